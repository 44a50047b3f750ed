-- An accepted envelope writes one row fewer (issue 12 §5, D1 rows): `mailbox.seq` is a plain
-- INTEGER PRIMARY KEY, no longer AUTOINCREMENT, whose bookkeeping row in `sqlite_sequence` was
-- written by every insert. A plain key is the highest `seq` plus one; the two differ only once
-- the highest row has been deleted, when a plain key would hand its `seq` out again and a reader
-- paging `after` it would miss the new envelope. Mailbox rows are never deleted (an acknowledged
-- envelope's body is dropped, its row and id stay), and `mailbox_rows_kept` makes that a rule of
-- the schema: whoever needs to delete them must keep `seq` from going back first.
--
-- SQLite cannot drop AUTOINCREMENT from a table, so the table is copied, rows and `seq` as they
-- are, and its indexes made again. The copy starts from the highest `seq` it holds, not from
-- `sqlite_sequence` (D1 may not let a migration read SQLite's own tables): no release ever deleted
-- a mailbox row, so the two are equal unless an operator deleted the newest rows by hand, and
-- then the next envelope would take the first of those `seq`s again.
CREATE TABLE mailbox_copy (
  seq         INTEGER PRIMARY KEY,
  local       TEXT NOT NULL,
  envelope_id TEXT NOT NULL,
  sender      TEXT NOT NULL,
  envelope    TEXT NOT NULL,
  received_at INTEGER NOT NULL,
  acked_at    INTEGER,
  bytes       INTEGER CHECK (bytes IS NULL OR bytes >= 0),
  stamp       TEXT,
  UNIQUE (local, envelope_id)
) STRICT;
INSERT INTO mailbox_copy (seq, local, envelope_id, sender, envelope, received_at, acked_at, bytes, stamp)
  SELECT seq, local, envelope_id, sender, envelope, received_at, acked_at, bytes, stamp FROM mailbox;
DROP TABLE mailbox;
ALTER TABLE mailbox_copy RENAME TO mailbox;
CREATE INDEX mailbox_pending ON mailbox (local, seq, bytes, acked_at) WHERE acked_at IS NULL;
CREATE INDEX mailbox_acked ON mailbox (acked_at) WHERE acked_at IS NOT NULL AND bytes IS NOT 0;
CREATE TRIGGER mailbox_rows_kept BEFORE DELETE ON mailbox
BEGIN
  SELECT RAISE(ABORT, 'mailbox rows are kept: seq must never go back');
END;
