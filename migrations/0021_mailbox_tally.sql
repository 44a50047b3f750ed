-- An accepted envelope writes three rows, not four (issue 36 §1, D1 rows): the mailbox's usage
-- row was rewritten by every envelope accepted (its count and bytes). The envelope's own row now
-- carries the count instead, as a running tally of its mailbox: `total_n`, the envelopes counted
-- towards the quota ever given to the mailbox up to this one, and `total_bytes`, their bytes as
-- stored then. The newest row of a mailbox (its highest `n`, either side of zero) says what was
-- ever given; `mailbox_usage.envelopes` and `.bytes` become what has been taken off since
-- (acknowledgments, dropped bodies: zero or below). What a mailbox holds is the sum of the two,
-- and the insert that would pass the quota fails on `within` (`mailbox_quota`), decided by the
-- insert itself from the same newest row and usage.
--
-- Rows inserted before this migration carry no tally but the newest of each mailbox, which gets
-- the mailbox's count as it stands; the usage row takes it off again, so what each mailbox holds
-- is unchanged. A Worker from before, still running until `wrangler deploy`, inserts rows with no
-- tally and counts them in `mailbox_usage` as it always did; the new engine reads the tally of the
-- newest row that has one, so those envelopes are counted once, by the usage row.
ALTER TABLE mailbox ADD COLUMN total_n INTEGER CHECK (total_n IS NULL OR total_n >= 0);
ALTER TABLE mailbox ADD COLUMN total_bytes INTEGER CHECK (total_bytes IS NULL OR total_bytes >= 0);
ALTER TABLE mailbox ADD COLUMN within INTEGER CONSTRAINT mailbox_quota CHECK (within IS NOT 0);

CREATE TABLE m21_tally (local TEXT PRIMARY KEY, n INTEGER NOT NULL, b INTEGER NOT NULL, top INTEGER NOT NULL) STRICT;
INSERT INTO m21_tally (local, n, b, top)
  SELECT local, count(bytes), coalesce(sum(bytes), 0), max(abs(seq)) FROM mailbox GROUP BY local;
UPDATE mailbox SET total_n = t.n, total_bytes = t.b
  FROM m21_tally AS t WHERE t.local = mailbox.local AND abs(mailbox.seq) = t.top;
UPDATE mailbox_usage SET envelopes = envelopes - t.n, bytes = bytes - t.b
  FROM m21_tally AS t WHERE t.local = mailbox_usage.local;
DROP TABLE m21_tally;
