-- The house's own agents (spec §22, §23; docs/SPEC.md §22, §23): the checks `verifica@` owes, and
-- the work `tareas@` offers and the tasks it gave out.

-- A check `verifica@` owes: written in the batch of the `deliver` that handed it an escrow naming
-- it arbiter with `terms.verify`. A tick leases it (`lease_until`), runs the tests and sends its
-- verdict to `libro@`; the row goes when the Libro took the verdict. An undecided verdict keeps the
-- row, due again at `next_at`, until `attempts` reaches the most (then `state` 'undecided': nothing
-- was decided, and nothing more is tried). `last` is the last verdict, as JSON. One row per
-- contract, and contracts exist only as far as balances paid for them: bounded by the Libro.
CREATE TABLE verifica_checks (
  contract    TEXT PRIMARY KEY,
  state       TEXT NOT NULL DEFAULT 'due' CHECK (state IN ('due', 'undecided')),
  next_at     INTEGER NOT NULL,
  lease_until INTEGER,
  attempts    INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  last        TEXT,
  added_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX verifica_checks_due ON verifica_checks (next_at) WHERE state = 'due';

-- The catalogue `GET /tareas` publishes, kept by the operator. `terms` is the canonical JSON a
-- quote's `terms` must equal byte for byte (it carries the task's `id` as `task`, so no two tasks
-- share terms). A retired task is no longer offered; its row stays, as claims name it.
CREATE TABLE tareas (
  id         TEXT PRIMARY KEY,
  price      INTEGER NOT NULL CHECK (price > 0),
  statement  TEXT NOT NULL,
  terms      TEXT NOT NULL UNIQUE,
  added_at   INTEGER NOT NULL,
  retired_at INTEGER
) STRICT;

-- A task `tareas@` took: one row per escrow it accepted, written in the accept's batch. `within`
-- is the quota as the batch saw it, just before this row: no task of the agent's in flight, under
-- its daily cap and the house's, and this task never paid to it (or refunded). The named CHECK
-- makes a quota lost in a race undo the whole accept.
CREATE TABLE tareas_claims (
  contract TEXT PRIMARY KEY,
  task     TEXT NOT NULL REFERENCES tareas (id),
  agent    TEXT NOT NULL,
  day      INTEGER NOT NULL,
  at       INTEGER NOT NULL,
  within   INTEGER NOT NULL,
  CONSTRAINT tareas_quota CHECK (within = 1)
) STRICT;
CREATE INDEX tareas_claims_agent ON tareas_claims (agent, day);
CREATE INDEX tareas_claims_day ON tareas_claims (day);
CREATE INDEX tareas_claims_task ON tareas_claims (task, agent);
