-- Tables that stop growing (issue 35 §3). Self-contained: it depends on nothing after 0005, and
-- the Worker still running between this migration and `wrangler deploy` keeps working with it
-- (the triggers keep the counter right whatever code writes `pins`; the index only speeds up).
--
-- `registrations` took a row per card update, for ever: an agent that updates its card every
-- minute wrote half a million rows a year. The house now keeps an agent's first registration and
-- its latest few (`store::agents::REGISTRATIONS_KEPT`), dropping the rest in the batch that
-- records one; `registrations_local` finds an agent's rows by age without reading anyone else's.
CREATE INDEX registrations_local ON registrations (local, id);

-- The number of pins, kept by triggers, so that pinning a new domain reads one row instead of
-- counting up to `resolver::MAX_PINS` (100,000) rows each time (D1 bills each row read).
CREATE TABLE row_counts (
  name TEXT PRIMARY KEY,
  n    INTEGER NOT NULL CHECK (n >= 0)
) STRICT;
INSERT INTO row_counts (name, n) SELECT 'pins', count(*) FROM pins;
CREATE TRIGGER pins_counted_insert AFTER INSERT ON pins
BEGIN
  UPDATE row_counts SET n = n + 1 WHERE name = 'pins';
END;
CREATE TRIGGER pins_counted_delete AFTER DELETE ON pins
BEGIN
  UPDATE row_counts SET n = n - 1 WHERE name = 'pins';
END;
