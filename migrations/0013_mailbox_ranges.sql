-- An accepted envelope writes four rows, not five (issue 12 §5, D1 rows): the index
-- `mailbox_pending (local, seq, …)`, written by every insert, is gone. Each agent's mailbox now
-- owns a range of `seq`s instead, so the table's own key keeps a mailbox's waiting envelopes
-- together and in order, which is all a page needs:
--
--   seq = (mbox << 30) + n       while the envelope waits
--   seq = -((mbox << 30) + n)    once it is acknowledged
--
-- `agents.mbox` numbers the mailbox (1 to 2^23 − 1, given once as the agent is inserted, never
-- reused: agents are never deleted) and `n` counts its envelopes from 1; `n` is the `seq` the
-- API shows. Every whole `seq` stays below 2^53 in size, so D1 can hand one to JavaScript (a
-- statement's `meta.last_row_id`) as an exact number. An envelope takes the mailbox's highest `n`,
-- waiting or acknowledged, plus one (rows are never deleted: `mailbox_rows_kept`), so `n` only
-- grows and a reader's `after` never misses one.
--
-- An acknowledged row moves to the mirror of its range below zero (its id still guards against a
-- second delivery), so a page walks waiting envelopes only, however many were acknowledged
-- before, after or between them.
--
-- Rows already stored keep their `seq` as `n` (a global counter is increasing within each
-- mailbox too), so cursors that clients hold stay valid. A house that had stored 2^30 envelopes,
-- or holds a row whose `seq` is not positive (the engine never wrote one; an operator may have),
-- fails this migration on `m13_guard`'s check (nothing is changed) rather than moving a row into
-- another mailbox's range or onto a range's base. Rows of a local no agent holds (the engine writes none, but an
-- operator may have) go to range 0, which no agent owns and no page reads; if that name is
-- registered later, they still hold their ids (`UNIQUE (local, envelope_id)`), so an envelope
-- with one of those ids is answered as already delivered. The text (`envelope`) becomes the
-- last column, so reading a row's size and state never walks the overflow pages of a large
-- envelope.
CREATE TABLE m13_guard (
  lowest INTEGER, highest INTEGER,
  CONSTRAINT seq_fits_in_a_range CHECK (lowest > 0 AND highest < 1073741824)
) STRICT;
INSERT INTO m13_guard SELECT coalesce(min(seq), 1), coalesce(max(seq), 0) FROM mailbox;
DROP TABLE m13_guard;
ALTER TABLE agents ADD COLUMN mbox INTEGER CONSTRAINT mailbox_number CHECK (mbox BETWEEN 1 AND 8388607);
UPDATE agents SET mbox = r.n
  FROM (SELECT rowid AS id, row_number() OVER (ORDER BY rowid) AS n FROM agents) AS r
  WHERE agents.rowid = r.id;
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
  SELECT CASE WHEN m.acked_at IS NULL THEN 1 ELSE -1 END * ((coalesce(a.mbox, 0) << 30) + m.seq),
         m.local, m.envelope_id, m.sender, m.received_at, m.acked_at, m.bytes, m.stamp, m.envelope
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
WHEN NEW.seq IS NULL OR NEW.seq <= 0 OR NEW.seq & 1073741823 = 0
  OR NEW.seq >> 30 IS NOT (SELECT mbox FROM agents WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_range: an envelope goes into its own mailbox''s range of seq');
END;

-- Every agent gets its number as it is inserted, whatever inserts it: the next after the
-- highest given (agents are never deleted, so none is given twice).
CREATE TRIGGER agents_mbox_given AFTER INSERT ON agents WHEN NEW.mbox IS NULL
BEGIN
  UPDATE agents SET mbox = (SELECT coalesce(max(mbox), 0) + 1 FROM agents) WHERE local = NEW.local;
END;
