-- Each A2A caller's share of an agent's tasks (issue 39, the second hostile review's M1;
-- docs/SPEC.md "A2A gateway", Bounds). An agent's tasks were bounded in all and for unverified
-- callers together; a verified caller could still fill the rest alone, shutting out every other
-- caller the agent knows. Now each share is bounded on its own: the unverified callers together
-- (`unverified`), and the verified callers of one site together (`site:<site>`), as the rates
-- are counted.
--
-- Tasks written before this migration: an unverified caller's share as before; a verified one's
-- by its address's domain, which is its site unless the domain is below a registrable name (a
-- week after this migration every such task has ended or been forgotten, but for open paid ones).
ALTER TABLE a2a_tasks ADD COLUMN share TEXT NOT NULL DEFAULT 'unverified';
UPDATE a2a_tasks SET share = 'site:' || substr(caller, instr(caller, '@') + 1) WHERE caller IS NOT NULL;
CREATE INDEX a2a_tasks_share ON a2a_tasks (local, share);
