-- What a remembered operation names (issue 34 §4, review): the contract or pending approval an
-- operation of another house's agent, refused for a passing reason, is about. The tick's upkeep
-- does not act on a deadline of what such an operation names while it waits within its life
-- (arrived before that deadline, not yet decided): a forfeit that arrived before a bond expired
-- is decided before the bond returns. Self-contained: it depends only on 0016.
ALTER TABLE libro_received ADD COLUMN names TEXT;
CREATE INDEX libro_received_names ON libro_received (names, at) WHERE names IS NOT NULL;
