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

-- A row's `bytes`, `share` and `updated` come after its text (`request`, `answer`), so a read of
-- them from the table walks the text's overflow pages: these indexes carry what the room's
-- guard, a ListTasks page's cut and a stream's rereads read.
CREATE INDEX a2a_tasks_room ON a2a_tasks (local, share, bytes);
DROP INDEX a2a_tasks_local;
DROP INDEX a2a_tasks_context;
CREATE INDEX a2a_tasks_context ON a2a_tasks (local, context, updated, id, bytes);
CREATE INDEX a2a_tasks_moves ON a2a_tasks (id, local, state, updated);
