-- The federated index (spec §13, docs/SPEC.md §13): the houses an index crawls and the cards it
-- found in their directories. Both tables are grown by strangers (anyone may register a house;
-- a registered house lists what it likes), so both are bounded by the engine's batches
-- (`index.rs`: most houses, most cards per house), and every card row belongs to a house row.

-- A house the index crawls. A pass starts by fetching and verifying the domain card again
-- (`phase` 'start'), reads the directory a page at a time from `cursor` ('cards'), then the
-- public history of the cards it found ('history'), and waits until `next_at` for the next one.
CREATE TABLE index_houses (
  domain     TEXT PRIMARY KEY,
  url        TEXT NOT NULL,
  added_at   INTEGER NOT NULL,
  pass       INTEGER NOT NULL DEFAULT 0 CHECK (pass >= 0),
  phase      TEXT NOT NULL DEFAULT 'start' CHECK (phase IN ('start', 'cards', 'history')),
  cursor     INTEGER NOT NULL DEFAULT 0 CHECK (cursor >= 0),
  next_at    INTEGER NOT NULL,
  ok_at      INTEGER,
  failures   INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
  last_error TEXT
) STRICT;
CREATE INDEX index_houses_due ON index_houses (next_at, domain);

-- A listed agent card as its origin served it, verified against the origin's domain card when
-- it was read. `pass` is the house's pass that last saw it: what a finished pass did not see is
-- deleted. `search`, `accepts` and `caps` are what the directory indexes (routes::agents::index).
-- `history` is the count of released sales in the origin's signed history (§21), NULL when
-- unpublished or unread.
CREATE TABLE index_cards (
  address     TEXT PRIMARY KEY,
  house       TEXT NOT NULL REFERENCES index_houses (domain) ON DELETE CASCADE,
  card        TEXT NOT NULL,
  search      TEXT NOT NULL,
  accepts     TEXT NOT NULL,
  caps        TEXT NOT NULL,
  valid_until INTEGER,
  pass        INTEGER NOT NULL,
  history     INTEGER CHECK (history IS NULL OR history >= 0),
  history_at  INTEGER
) STRICT;
CREATE INDEX index_cards_house ON index_cards (house, pass);
CREATE INDEX index_cards_history ON index_cards (house, history_at);
