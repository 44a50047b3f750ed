-- An acknowledgment that does not rewrite every row (issue 36 §1, D1 rows). Acknowledging an
-- envelope moved its row below zero (0013): three rows written per envelope (the row under its
-- new key, its `UNIQUE (local, envelope_id)` entry, its `mailbox_acked` entry), 154 for a page of
-- 50. Agents acknowledge what they read, and they read in order, so what they acknowledge is
-- almost always the oldest envelopes waiting: a mailbox now keeps a watermark instead.
--
-- `mailbox_usage.acked_through` is an `n` (the `seq` pages show): every envelope of the mailbox
-- at or below it is acknowledged, whichever side of zero its row is on. An envelope waits while
-- its row is above zero and above the watermark. An acknowledgment that takes the oldest waiting
-- envelopes raises the watermark over them (one row), and moves below zero, as before, only what
-- it acknowledges past an envelope still waiting. The watermark never passes the highest `n`
-- given, so an envelope accepted later is never born acknowledged.
--
-- The CHECK is the acknowledgment's guard: the batch sets `acked_through` to -1 when the
-- watermark, or what waits among its ids, is not what its decision read (a concurrent
-- acknowledgment), and so undoes itself; the engine reads again and decides again.
ALTER TABLE mailbox_usage ADD COLUMN acked_through INTEGER NOT NULL DEFAULT 0
  CONSTRAINT mailbox_ack_raced CHECK (acked_through >= 0);

-- When each raise of a watermark happened, for the bodies dropped 7 days after acknowledgment
-- (spec §8c): the envelopes `lo` to `through` of `local`'s mailbox were acknowledged `at`. The
-- tick drops the bodies of the oldest range, a batch at a time, moving `lo` on, and forgets the
-- range once `lo` passes `through`. One row per acknowledgment that raised a watermark, kept 7
-- days: keyed by time, so the tick finds the oldest without an index of its own.
CREATE TABLE mailbox_acks (
  at      INTEGER NOT NULL,
  local   TEXT NOT NULL,
  lo      INTEGER NOT NULL,
  through INTEGER NOT NULL,
  PRIMARY KEY (at, local, through),
  CONSTRAINT mailbox_ack_range CHECK (lo >= 1 AND lo <= through + 1)
) STRICT, WITHOUT ROWID;
