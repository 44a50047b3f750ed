-- The A2A gateway's tasks (issue 39; docs/SPEC.md "A2A gateway"; docs/decisions/0075-a2a-gateway.md).
--
-- An A2A caller's message becomes an unsigned envelope from `a2a@<house>` in the agent's
-- mailbox; the task is kept here, on the primary beside the Libro it may be bound to, until the
-- agent answers it with a `result` envelope to `a2a@`, the caller cancels it, or it is forgotten
-- (7 days after it ended, 30 days after an open one last moved; never while it is open and an
-- escrow is bound to it). A bound escrow is settled before the task's end is written.
CREATE TABLE a2a_tasks (
  id        TEXT PRIMARY KEY,
  local     TEXT NOT NULL,
  context   TEXT NOT NULL,
  -- The envelope carrying the caller's latest message (what the agent's result replies to).
  envelope  TEXT NOT NULL,
  -- A Nyx5 caller whose proof verified; NULL for an unverified caller.
  caller    TEXT,
  message_id TEXT NOT NULL,
  state     TEXT NOT NULL CHECK (state IN ('submitted', 'working', 'completed', 'failed', 'canceled', 'input-required', 'rejected')),
  -- The caller's messages as A2A writes them (a JSON array), and the agent's answer.
  request   TEXT NOT NULL,
  answer    TEXT,
  contract  TEXT,
  -- Where the caller hears of the task's changes (A2A push notifications): {id, url, token?}.
  push      TEXT,
  -- The bytes of `request` and `answer`: what the agent's room counts (crate::a2a::ROOM).
  bytes     INTEGER NOT NULL DEFAULT 0,
  created   INTEGER NOT NULL,
  updated   INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX a2a_tasks_envelope ON a2a_tasks (envelope);
-- A verified caller's message id is its own: sent again, it is the same task.
CREATE UNIQUE INDEX a2a_tasks_message ON a2a_tasks (local, caller, message_id) WHERE caller IS NOT NULL;
CREATE INDEX a2a_tasks_context ON a2a_tasks (local, context, updated);
CREATE UNIQUE INDEX a2a_tasks_contract ON a2a_tasks (contract) WHERE contract IS NOT NULL;
CREATE INDEX a2a_tasks_updated ON a2a_tasks (updated);
CREATE INDEX a2a_tasks_local ON a2a_tasks (local);
