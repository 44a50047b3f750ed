-- The house's catalogue of App Cards (docs/SPEC.md "Apps — Pinned", GET /apps). The operator adds
-- and removes entries with the house token; each card is verified before it is listed. `card` is
-- the card's canonical JSON (what `GET /apps/:id` serves), `sha256` its SHA-256 (hex), which the
-- signed catalogue lists so that a copy of an entry cannot change the app. One row per app id (a
-- new version replaces the old), at most `app::MAX_CATALOGUE_ENTRIES`, guarded by the batch.
CREATE TABLE apps (
  id       TEXT PRIMARY KEY,
  name     TEXT NOT NULL,
  version  TEXT NOT NULL,
  author   TEXT NOT NULL,
  sha256   TEXT NOT NULL CHECK (length(sha256) = 64),
  url      TEXT,
  card     TEXT NOT NULL,
  added_at INTEGER NOT NULL
) STRICT;
