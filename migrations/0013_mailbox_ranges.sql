-- An accepted envelope writes four rows, not five (issue 12 §5, D1 rows): the index
-- `mailbox_pending (local, seq, …)`, written by every insert, is gone. Each agent's mailbox now
-- owns a range of `seq`s instead, so the table's own key keeps a mailbox's envelopes together
-- and in order, which is all a page needs:
--
--   seq = (mbox << 40) + n
--
-- `agents.mbox` numbers the mailbox (1 to 2^23 − 1, given once at registration, never reused:
-- agents are never deleted) and `n` counts its envelopes from 1. `n` is the `seq` the API shows;
-- an envelope takes the mailbox's highest `n` plus one (rows are never deleted:
-- `mailbox_rows_kept`), so `n` only grows and a reader's `after` never misses one.
--
-- Acknowledged rows stay in the range (their ids guard against a second delivery), so a page
-- skips them from `mailbox_usage.floor`: every `n` up to it is acknowledged. Acknowledging keeps
-- the floor, at the cost of reading the acknowledged rows it passes, once.
--
-- Rows already stored keep their `seq` as `n` (a global counter is increasing within each
-- mailbox too), so cursors that clients hold stay valid. Rows of a local no agent holds (none
-- are written so, but an operator may have) go to range 0, which no agent owns. The text
-- (`envelope`) becomes the last column, so reading a row's size and state never walks the
-- overflow pages of a large envelope.
ALTER TABLE agents ADD COLUMN mbox INTEGER CONSTRAINT mailbox_number CHECK (mbox BETWEEN 1 AND 8388607);
UPDATE agents SET mbox = rowid;
CREATE UNIQUE INDEX agents_mbox ON agents (mbox);

CREATE TABLE mailbox_copy (
  seq         INTEGER PRIMARY KEY,
  local       TEXT NOT NULL,
  envelope_id TEXT NOT NULL,
  sender      TEXT NOT NULL,
  received_at INTEGER NOT NULL,
  acked_at    INTEGER,
  bytes       INTEGER CHECK (bytes IS NULL OR bytes >= 0),
  stamp       TEXT,
  envelope    TEXT NOT NULL,
  UNIQUE (local, envelope_id)
) STRICT;
INSERT INTO mailbox_copy (seq, local, envelope_id, sender, received_at, acked_at, bytes, stamp, envelope)
  SELECT (coalesce(a.mbox, 0) << 40) + m.seq, m.local, m.envelope_id, m.sender, m.received_at, m.acked_at,
         m.bytes, m.stamp, m.envelope
  FROM mailbox AS m LEFT JOIN agents AS a ON a.local = m.local;
DROP TABLE mailbox;
ALTER TABLE mailbox_copy RENAME TO mailbox;
CREATE INDEX mailbox_acked ON mailbox (acked_at) WHERE acked_at IS NOT NULL AND bytes IS NOT 0;
CREATE TRIGGER mailbox_rows_kept BEFORE DELETE ON mailbox
BEGIN
  SELECT RAISE(ABORT, 'mailbox rows are kept: seq must never go back');
END;

-- An envelope goes into its own mailbox's range or nowhere: a row given no `seq`, or another
-- mailbox's, would be one no page of its agent ever shows. (The engine's inserts take their
-- `seq` from the agent's row; this is the schema saying so to everything else.)
CREATE TRIGGER mailbox_in_range BEFORE INSERT ON mailbox
WHEN NEW.seq IS NULL OR NEW.seq <= 0 OR NEW.seq & 1099511627775 = 0
  OR NEW.seq >> 40 IS NOT (SELECT mbox FROM agents WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_range: an envelope goes into its own mailbox''s range of seq');
END;

-- Every `n` of the mailbox up to `floor` is acknowledged (0: none known to be).
ALTER TABLE mailbox_usage ADD COLUMN floor INTEGER NOT NULL DEFAULT 0;

-- Every agent gets its number as it is inserted, whatever inserts it: the next after the
-- highest given (agents are never deleted, so none is given twice).
CREATE TRIGGER agents_mbox_given AFTER INSERT ON agents WHEN NEW.mbox IS NULL
BEGIN
  UPDATE agents SET mbox = (SELECT coalesce(max(mbox), 0) + 1 FROM agents) WHERE local = NEW.local;
END;
