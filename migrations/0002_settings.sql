-- House settings kept in the database: today the domain key a local house generates for itself
-- when no NYX5_DOMAIN_KEY secret is set (production must set the secret).
CREATE TABLE settings (
  name       TEXT PRIMARY KEY,
  value      TEXT NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
