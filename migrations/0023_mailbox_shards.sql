-- Mailbox shards (issue 36 §3; docs/decisions/36-shards.md). A house may spread its agents'
-- mailboxes over several databases ("shards"), each a whole database with every migration (the
-- tables a shard does not use stay empty). The registry, the Libro and the queue stay on the
-- primary. With one database (the default) nothing here is used and nothing changes.

-- Where the agent's mailbox lives: 0 is the primary, k the k-th shard. Recorded once, at
-- registration, by a stable rule over the shards configured then; only a move changes it.
ALTER TABLE agents ADD COLUMN shard INTEGER NOT NULL DEFAULT 0 CHECK (shard >= 0);

-- On the primary: the statements of a batch that wrote both the primary and a mailbox on a
-- shard, written atomically with the primary's part, applied to the shard right after and, if
-- a crash came between, by the tick. `key` names the statement (a digest of it).
CREATE TABLE shard_handoffs (
  key   TEXT PRIMARY KEY,
  local TEXT NOT NULL,
  stmt  TEXT NOT NULL
) STRICT;

-- On a shard: the hand-offs applied here, written with them, so a statement is applied once.
CREATE TABLE shard_applied (
  key TEXT PRIMARY KEY
) STRICT, WITHOUT ROWID;

-- On a shard: agents whose mailbox is moving (or has moved) away from it. Their mailbox rows
-- take no writes here (`mailbox_moving`), and may be deleted once `copied` says the target holds
-- them all.
CREATE TABLE shard_moving (
  local  TEXT PRIMARY KEY,
  copied INTEGER NOT NULL DEFAULT 0 CHECK (copied IN (0, 1))
) STRICT, WITHOUT ROWID;

CREATE TRIGGER mailbox_moving_insert BEFORE INSERT ON mailbox
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_moving');
END;
CREATE TRIGGER mailbox_moving_update BEFORE UPDATE ON mailbox
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_moving');
END;
CREATE TRIGGER mailbox_usage_moving_insert BEFORE INSERT ON mailbox_usage
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_moving');
END;
CREATE TRIGGER mailbox_usage_moving_update BEFORE UPDATE ON mailbox_usage
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_moving');
END;
CREATE TRIGGER mailbox_acks_moving BEFORE INSERT ON mailbox_acks
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_moving');
END;
CREATE TRIGGER lists_moving_insert BEFORE INSERT ON lists
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_moving');
END;
CREATE TRIGGER lists_moving_delete BEFORE DELETE ON lists
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local AND copied = 0)
BEGIN
  SELECT RAISE(ABORT, 'mailbox_moving');
END;

-- Mailbox rows are still kept, except those of a mailbox that moved to another shard (they
-- were copied there first).
DROP TRIGGER mailbox_rows_kept;
CREATE TRIGGER mailbox_rows_kept BEFORE DELETE ON mailbox
WHEN NOT EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local AND copied = 1)
BEGIN
  SELECT RAISE(ABORT, 'mailbox rows are kept: seq must never go back');
END;
