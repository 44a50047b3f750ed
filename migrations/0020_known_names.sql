-- Names this house has verified a domain card for without pinning its key: domains anchored in
-- DNS (which pins nothing) and domains past their site's share of pins. Such a name spends its
-- site's budget of known names (`resolver::KNOWN_FETCHES_PER_SITE_PER_MINUTE`) rather than of new
-- names (`resolver::NEW_NAMES_PER_SITE_PER_MINUTE`) when its cached card has expired: a stranger
-- minting names under a peer's site spends the new names' budget on names that never verify, and
-- must not cut the house off from the peer it already knows. Bounded
-- as pins are: at most `resolver::MAX_KNOWN_PER_SITE` per site (nobody but a site's owner can make
-- a name under it verify) and `resolver::MAX_KNOWN` in all, counted by triggers in `row_counts`;
-- a name not recorded for room spends the budget as before, and nothing recorded is pushed out.
-- Forgotten `resolver::KNOWN_MS` after the last verification (the tick's purge, by `seen_at`).
CREATE TABLE known_names (
  domain  TEXT PRIMARY KEY,
  site    TEXT NOT NULL,
  seen_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX known_names_site ON known_names (site);
CREATE INDEX known_names_seen ON known_names (seen_at);
INSERT INTO row_counts (name, n) VALUES ('known_names', 0);
CREATE TRIGGER known_names_counted_insert AFTER INSERT ON known_names
BEGIN
  UPDATE row_counts SET n = n + 1 WHERE name = 'known_names';
END;
CREATE TRIGGER known_names_counted_delete AFTER DELETE ON known_names
BEGIN
  UPDATE row_counts SET n = n - 1 WHERE name = 'known_names';
END;
