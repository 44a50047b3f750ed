-- Shares of an agent's A2A tasks, and indexes that read tasks without their text (issue 39, the
-- second and third hostile reviews; docs/SPEC.md "A2A gateway", Bounds; decision 0075).
--
-- An agent's tasks were bounded in all and for unverified callers together; a verified caller
-- could fill the rest alone. Now every task counts in a share: `allowed` (a caller on the
-- agent's allow list, held only to the whole), `unverified` (the unverified callers together) or
-- `site:<site>` (the verified callers of one site together). The strangers (every share but
-- `allowed`) together have half the room, and each of their shares a part of that.
--
-- Tasks written before this migration: an unverified caller's share as before; a verified
-- one's by its address's domain, which is its site unless the domain is below a registrable
-- name (a week later every such task has ended and been forgotten, but for open paid ones).
ALTER TABLE a2a_tasks ADD COLUMN share TEXT NOT NULL DEFAULT 'unverified';
UPDATE a2a_tasks SET share = 'site:' || substr(caller, instr(caller, '@') + 1) WHERE caller IS NOT NULL;

-- What each share holds, kept by triggers, so that the room's guard reads three rows, not every
-- task of the agent (the third review: a full room made every refused call, which counts in no
-- rate, read thousands of index entries). `share` is a task's share, or '' for the agent's whole
-- room, or '~' for its strangers together (every share but 'allowed').
CREATE TABLE a2a_rooms (
  local TEXT NOT NULL,
  share TEXT NOT NULL,
  tasks INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  PRIMARY KEY (local, share)
) STRICT, WITHOUT ROWID;
INSERT INTO a2a_rooms (local, share, tasks, bytes)
  SELECT local, share, count(*), sum(bytes) FROM a2a_tasks GROUP BY local, share
  UNION ALL SELECT local, '', count(*), sum(bytes) FROM a2a_tasks GROUP BY local
  UNION ALL SELECT local, '~', count(*), sum(bytes) FROM a2a_tasks WHERE share <> 'allowed' GROUP BY local;
CREATE TRIGGER a2a_rooms_insert AFTER INSERT ON a2a_tasks BEGIN
  INSERT INTO a2a_rooms (local, share, tasks, bytes)
    SELECT NEW.local, value, 1, NEW.bytes FROM json_each(json_array(NEW.share, '', '~'))
     WHERE value <> '~' OR NEW.share <> 'allowed'
    ON CONFLICT (local, share) DO UPDATE SET tasks = tasks + 1, bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER a2a_rooms_delete AFTER DELETE ON a2a_tasks BEGIN
  UPDATE a2a_rooms SET tasks = tasks - 1, bytes = bytes - OLD.bytes
   WHERE local = OLD.local AND (share IN (OLD.share, '') OR (share = '~' AND OLD.share <> 'allowed'));
END;
CREATE TRIGGER a2a_rooms_bytes AFTER UPDATE OF bytes ON a2a_tasks WHEN NEW.bytes <> OLD.bytes BEGIN
  UPDATE a2a_rooms SET bytes = bytes + NEW.bytes - OLD.bytes
   WHERE local = NEW.local AND (share IN (NEW.share, '') OR (share = '~' AND NEW.share <> 'allowed'));
END;

-- A row's `updated` comes after its text (`request`, `answer`), so a read of it from the table
-- walks the text's overflow pages: these indexes carry what a ListTasks page's cut and a
-- stream's rereads read.
DROP INDEX a2a_tasks_local;
DROP INDEX a2a_tasks_context;
CREATE INDEX a2a_tasks_context ON a2a_tasks (local, context, updated, id, bytes);
CREATE INDEX a2a_tasks_moves ON a2a_tasks (id, local, state, updated);
