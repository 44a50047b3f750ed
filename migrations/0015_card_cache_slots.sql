-- The card cache kept its bound of 10,000 rows by counting the table in every insert: each card
-- fetched read every card cached in the last five minutes (D1 bills each row read), so a stranger
-- who made the house fetch N cards made it read about N²/2 rows. `card_slots` has 10,000 slots
-- instead, a card's slot a hash of its key (`store::resolver::slot`): a new card takes its slot
-- over, whatever held it, and the bound is the slot's range. An insert reads the one row it
-- replaces. Two keys that share a slot take turns; a turn costs a fetch (and, for a domain with
-- no pin, one of its site's new names a minute), never a wrong card: a row is read only under
-- the key it names.
--
-- A new table rather than `card_cache` rebuilt: migrations are applied before `wrangler deploy`,
-- and the Worker still running in between keeps writing `card_cache` as it knows it. Its rows
-- (at most five minutes of cached cards) are dropped here; the table goes in a later migration,
-- once no Worker from before this one runs (README.md, "Contractions").
DELETE FROM card_cache;
CREATE TABLE card_slots (
  slot       INTEGER PRIMARY KEY CHECK (slot BETWEEN 0 AND 9999), -- a hash of `key`
  key        TEXT NOT NULL,                     -- a domain, or an address
  card       TEXT NOT NULL,
  url        TEXT NOT NULL,
  fetched_at INTEGER NOT NULL
) STRICT;
CREATE INDEX card_slots_fetched ON card_slots (fetched_at);
