//! The schema: the same `migrations/*.sql` files wrangler applies to D1, embedded in order.

/// `(name, sql)` in the order they apply. Names match the files, as wrangler records them.
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_house.sql", include_str!("../../../migrations/0001_house.sql")),
    ("0002_settings.sql", include_str!("../../../migrations/0002_settings.sql")),
    ("0003_email.sql", include_str!("../../../migrations/0003_email.sql")),
    ("0004_guards.sql", include_str!("../../../migrations/0004_guards.sql")),
    ("0005_storage.sql", include_str!("../../../migrations/0005_storage.sql")),
    ("0006_libro.sql", include_str!("../../../migrations/0006_libro.sql")),
    ("0007_libro_refusals.sql", include_str!("../../../migrations/0007_libro_refusals.sql")),
    ("0008_mailbox_seq.sql", include_str!("../../../migrations/0008_mailbox_seq.sql")),
    ("0009_index.sql", include_str!("../../../migrations/0009_index.sql")),
    ("0010_services.sql", include_str!("../../../migrations/0010_services.sql")),
    ("0011_authority.sql", include_str!("../../../migrations/0011_authority.sql")),
    ("0012_apps.sql", include_str!("../../../migrations/0012_apps.sql")),
    ("0013_mailbox_ranges.sql", include_str!("../../../migrations/0013_mailbox_ranges.sql")),
    ("0014_tick_purges.sql", include_str!("../../../migrations/0014_tick_purges.sql")),
    ("0015_card_cache_slots.sql", include_str!("../../../migrations/0015_card_cache_slots.sql")),
    ("0016_libro_received.sql", include_str!("../../../migrations/0016_libro_received.sql")),
    ("0017_libro_balance_max.sql", include_str!("../../../migrations/0017_libro_balance_max.sql")),
    ("0018_tables_bounded.sql", include_str!("../../../migrations/0018_tables_bounded.sql")),
    ("0019_libro_received_names.sql", include_str!("../../../migrations/0019_libro_received_names.sql")),
    ("0020_known_names.sql", include_str!("../../../migrations/0020_known_names.sql")),
    ("0021_mailbox_watermark.sql", include_str!("../../../migrations/0021_mailbox_watermark.sql")),
    ("0022_mailbox_tally.sql", include_str!("../../../migrations/0022_mailbox_tally.sql")),
    ("0023_mailbox_shards.sql", include_str!("../../../migrations/0023_mailbox_shards.sql")),
];
