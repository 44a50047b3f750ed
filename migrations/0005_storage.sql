-- Storage with bounds (issue 10 §3): what a mailbox holds is counted, so it can be paged by bytes
-- and held to its quota in O(1); acknowledged bodies can be dropped; pins know their site.

-- The size in bytes of an envelope's stored text, for paging by bytes and for the quota. Set by
-- every write that counts towards the mailbox's quota (envelopes and email from outside); NULL
-- for the house's own notices, which do not count. 0 once an acknowledged envelope's body has
-- been dropped (the row stays: its id is still a duplicate).
ALTER TABLE mailbox ADD COLUMN bytes INTEGER CHECK (bytes IS NULL OR bytes >= 0);
UPDATE mailbox SET bytes = length(CAST(envelope AS BLOB)) WHERE acked_at IS NULL;
-- The page of pending envelopes, with their sizes, read from the index alone (`acked_at` too, so
-- SQLite sees it covers the query): the text of an envelope is loaded only once it is in the page.
DROP INDEX mailbox_pending;
CREATE INDEX mailbox_pending ON mailbox (local, seq, bytes, acked_at) WHERE acked_at IS NULL;
-- Acknowledged envelopes whose body is still kept, oldest acknowledgement first.
CREATE INDEX mailbox_acked ON mailbox (acked_at) WHERE acked_at IS NOT NULL AND bytes IS NOT 0;

-- What each mailbox holds unacknowledged (rows with `bytes` set), kept by the same batches that
-- insert and acknowledge. Like `rate_windows`, a row carries the caps it was last counted under,
-- and the CHECK fails the batch that would pass them.
CREATE TABLE mailbox_usage (
  local         TEXT PRIMARY KEY,
  envelopes     INTEGER NOT NULL,
  bytes         INTEGER NOT NULL,
  max_envelopes INTEGER NOT NULL,
  max_bytes     INTEGER NOT NULL,
  CONSTRAINT mailbox_quota CHECK (envelopes <= max_envelopes AND bytes <= max_bytes)
) STRICT;
INSERT INTO mailbox_usage (local, envelopes, bytes, max_envelopes, max_bytes)
  SELECT local, count(*), sum(bytes), count(*), sum(bytes) FROM mailbox
  WHERE acked_at IS NULL AND bytes IS NOT NULL GROUP BY local;

-- The site (registrable domain) of each pin, so one party's names share one bound. NULL for pins
-- made before: they count towards the total only.
ALTER TABLE pins ADD COLUMN site TEXT;
CREATE INDEX pins_site ON pins (site);
