-- Mailbox shards (issue 36 §3; docs/decisions/0060-mailbox-shards.md). A house may spread its agents'
-- mailboxes over several databases ("shards"), each a whole database with every migration (the
-- tables a shard does not use stay empty). The registry, the Libro and the queue stay on the
-- primary. With one database (the default) nothing here is used and nothing changes.

-- Where the agent's mailbox lives: 0 is the primary, k the k-th shard. Recorded once, at
-- registration, by a stable rule over the shards configured then; only a move changes it.
ALTER TABLE agents ADD COLUMN shard INTEGER NOT NULL DEFAULT 0 CHECK (shard >= 0);

-- On the primary: the statements of a batch that wrote both the primary and a mailbox on a
-- shard, written atomically with the primary's part, applied to the shard right after (and this
-- row deleted as soon as they are) or, if a crash came between, by the tick. `key` is unique to
-- one hand-off (random bytes of the writing process and a counter: never a digest of the
-- statement, which may rightly be repeated). The tick tries a row again after `next_try` (unix
-- seconds), and after `attempts` tries moves it to `shard_dead`.
CREATE TABLE shard_handoffs (
  key      TEXT PRIMARY KEY,
  local    TEXT NOT NULL,
  stmt     TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_try INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX shard_handoffs_due ON shard_handoffs (next_try);
CREATE INDEX shard_handoffs_local ON shard_handoffs (local);

-- On the primary: hand-offs the tick gave up on (logged), kept for the operator; bounded (the
-- oldest are forgotten past a fixed number).
CREATE TABLE shard_dead (
  key   TEXT PRIMARY KEY,
  local TEXT NOT NULL,
  stmt  TEXT NOT NULL,
  why   TEXT NOT NULL,
  at    INTEGER NOT NULL
) STRICT;

-- On a shard: the hand-offs applied here, written with them, so a statement is applied once.
-- Moved with the mailbox; forgotten by the tick once the primary no longer holds the key.
CREATE TABLE shard_applied (
  key   TEXT PRIMARY KEY,
  local TEXT NOT NULL,
  at    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX shard_applied_at ON shard_applied (at, key);

-- On the primary: the move of a mailbox under way, one at a time (to one target; the same move
-- run again after an interruption takes it up).
CREATE TABLE shard_moves (
  local    TEXT PRIMARY KEY,
  to_shard INTEGER NOT NULL,
  since    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- On a shard: agents whose mailbox is moving (or has moved) away from it. Their mailbox rows
-- take no writes here (`mailbox_moving`), and may be deleted while `copied` is 1 (the target
-- holds them all); 2 once they are (no write, not even a delete, is taken here after).
CREATE TABLE shard_moving (
  local  TEXT PRIMARY KEY,
  copied INTEGER NOT NULL DEFAULT 0 CHECK (copied IN (0, 1, 2))
) STRICT, WITHOUT ROWID;

-- On a shard: agents whose mailbox is being copied here by a move not yet ended. The house's
-- upkeep (body drops) leaves their rows alone until it ends: what it took off would be counted
-- again by the usage the move copies last.
CREATE TABLE shard_incoming (
  local TEXT PRIMARY KEY
) STRICT, WITHOUT ROWID;

CREATE TRIGGER mailbox_moving_insert BEFORE INSERT ON mailbox
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;
CREATE TRIGGER mailbox_moving_update BEFORE UPDATE ON mailbox
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;
CREATE TRIGGER mailbox_usage_moving_insert BEFORE INSERT ON mailbox_usage
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;
CREATE TRIGGER mailbox_usage_moving_update BEFORE UPDATE ON mailbox_usage
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;
CREATE TRIGGER mailbox_acks_moving BEFORE INSERT ON mailbox_acks
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;
CREATE TRIGGER shard_applied_moving BEFORE INSERT ON shard_applied
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;
CREATE TRIGGER lists_moving_insert BEFORE INSERT ON lists
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = NEW.local)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;
CREATE TRIGGER lists_moving_delete BEFORE DELETE ON lists
WHEN EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local AND copied <> 1)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: mailbox_moving');
END;

-- Mailbox rows are still kept, except those of a mailbox that moved to another shard (they
-- were copied there first).
DROP TRIGGER mailbox_rows_kept;
CREATE TRIGGER mailbox_rows_kept BEFORE DELETE ON mailbox
WHEN NOT EXISTS (SELECT 1 FROM shard_moving WHERE local = OLD.local AND copied = 1)
BEGIN
  SELECT RAISE(ABORT, 'mailbox rows are kept: seq must never go back');
END;
