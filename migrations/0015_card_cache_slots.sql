-- The card cache kept its bound of 10,000 rows by counting the table in every insert: a card
-- fetched read every card cached in the last five minutes (D1 bills each), so a stranger who made
-- the house fetch N cards made it read N²/2 rows. The cache now has 10,000 slots, a card's slot a
-- hash of its key (`store::resolver::slot`): a new card takes its slot over, whatever held it,
-- and the bound is the key's range. An insert reads the one row it replaces. Two keys that share a
-- slot take turns; each costs only a fetch, as the cache only saves fetches.
--
-- The rows dropped here are at most five minutes of cached cards, fetched again when next needed.
DROP TABLE card_cache;
CREATE TABLE card_cache (
  slot       INTEGER PRIMARY KEY,               -- 0 to 9,999: a hash of `key`
  key        TEXT NOT NULL,                     -- a domain, or an address
  card       TEXT NOT NULL,
  url        TEXT NOT NULL,
  fetched_at INTEGER NOT NULL
) STRICT;
CREATE INDEX card_cache_fetched ON card_cache (fetched_at);
