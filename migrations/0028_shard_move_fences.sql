-- Every move has a generation, and every database a move writes to keeps the newest generation
-- that wrote there (issue 36 §3; the second hostile review of moves in steps, MEDIUM 1). A step
-- that stalled past its lease, or a step of a move that already ended, used to write its
-- freeze, its set-up or its end onto a database where a later move had begun since: it could
-- thaw that move's frozen source (mail written there, then forgotten with the source) or leave a
-- stale `shard_incoming` on a live mailbox. Each batch a step sends to a source or a target now
-- begins by claiming the database for its move's generation (`INSERT INTO shard_claim`), which
-- aborts the whole batch when a newer move claimed it, or when this move already ended there.

-- On the primary: the last generation given (one row), and each move's own.
CREATE TABLE shard_move_count (
  one INTEGER PRIMARY KEY CHECK (one = 1),
  n   INTEGER NOT NULL
) STRICT;
INSERT INTO shard_move_count (one, n) VALUES (1, 0);
ALTER TABLE shard_moves ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;
-- A move under way when this runs is generation 1; no database has a claim yet.
UPDATE shard_moves SET gen = 1;
UPDATE shard_move_count SET n = 1 WHERE EXISTS (SELECT 1 FROM shard_moves);
-- A new move takes the next generation (its insert reads `n + 1`; this keeps `n` there). An
-- insert that finds its move under way updates it instead and keeps the move's generation; the
-- count may still step, which only skips a number.
CREATE TRIGGER shard_moves_generation BEFORE INSERT ON shard_moves
BEGIN
  UPDATE shard_move_count SET n = max(n, NEW.gen) WHERE one = 1;
END;

-- On every database: the newest move's generation that wrote an agent's mailbox state here,
-- and whether that move ended here (`done`: set by its end on its target).
CREATE TABLE shard_fence (
  local TEXT PRIMARY KEY,
  gen   INTEGER NOT NULL,
  done  INTEGER NOT NULL DEFAULT 0 CHECK (done IN (0, 1))
) STRICT, WITHOUT ROWID;

-- The claim a step puts first in each batch: refused (the batch with it) if a newer move
-- claimed the database or this one ended here; else the claim is recorded.
CREATE VIEW shard_claim AS SELECT local, gen FROM shard_fence;
CREATE TRIGGER shard_claim_fence INSTEAD OF INSERT ON shard_claim
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: shard_move_stale')
   WHERE EXISTS (SELECT 1 FROM shard_fence
                  WHERE local = NEW.local AND (gen > NEW.gen OR (gen = NEW.gen AND done = 1)));
  INSERT OR IGNORE INTO shard_fence (local, gen) VALUES (NEW.local, NEW.gen);
  UPDATE shard_fence SET gen = NEW.gen, done = 0 WHERE local = NEW.local AND gen < NEW.gen;
END;

-- The generation of the move that set a target up: the next move's set-up takes the row over
-- (unsealed) from an older move's, which a move that ended unfenced could leave behind; a late
-- step of the same move cannot unseal it.
ALTER TABLE shard_incoming ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;
-- A move inserted without a generation (by code from before this migration, until every isolate
-- runs the new one) takes the next, as one inserted by the new code does.
CREATE TRIGGER shard_moves_generation_fill AFTER INSERT ON shard_moves WHEN NEW.gen = 0
BEGIN
  UPDATE shard_move_count SET n = n + 1 WHERE one = 1;
  UPDATE shard_moves SET gen = (SELECT n FROM shard_move_count WHERE one = 1) WHERE local = NEW.local;
END;
