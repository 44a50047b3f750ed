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

-- Every authenticated request (a page, an ack, a send) writes its token's nonce; the index
-- `nonces_expiry (keep_until)` made that two rows written, for the tick's purge alone. The table
-- holds only the nonces of the last few minutes (a token's window), so the purge now reads it
-- whole, as it reads `rate_windows`: ~10 minutes of requests read once a minute, where each
-- request wrote a row more (D1's Free plan allows 50 rows read for each row written).
DROP INDEX nonces_expiry;

-- A delivery job's `jobs_domain (domain, state)` entry was written when the job was queued and
-- twice more when it ended (its `state` is in the key), for the queries of a destination's
-- pending jobs alone (a failing domain's jobs postponed, a recovered one's made due, its health
-- forgotten). An index of pending jobs only serves them all, and an ending job only deletes its
-- entry: a row written less per envelope sent.
CREATE INDEX jobs_pending_domain ON jobs (domain) WHERE state = 'pending';
DROP INDEX jobs_domain;
