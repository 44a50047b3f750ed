-- Authority (docs/SPEC.md §16b): movements that wait for a human's approval, and what the
-- authorities with an hourly limit counted.

-- A movement an authority asked about: the operating envelope (`envelope`, canonical JSON, decided
-- again once approved), what it holds in `escrow:hold.<id>` (`payer`, `amount`), and its record
-- (asks, approvers, who approved). `version` rises with every change, as contracts' does. Guards
-- in the batch that writes one keep at most 100 waiting and 1,000 in all per operator (decided
-- rows go after 30 days), and no envelope over 64 KiB is kept, so an operator grows this table by
-- at most 64 MiB however it asks; operators themselves are bounded as registrations are.
CREATE TABLE libro_pending (
  id       TEXT PRIMARY KEY,
  operator TEXT NOT NULL,
  state    TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'declined', 'expired')),
  payer    TEXT,
  amount   INTEGER NOT NULL DEFAULT 0 CHECK (amount >= 0),
  expires  INTEGER NOT NULL,
  created  INTEGER NOT NULL,
  updated  INTEGER NOT NULL,
  version  INTEGER NOT NULL DEFAULT 1,
  envelope TEXT NOT NULL,
  record   TEXT NOT NULL
) STRICT;
CREATE INDEX libro_pending_operator ON libro_pending (operator, state);
CREATE INDEX libro_pending_due ON libro_pending (expires) WHERE state = 'pending';

-- Who may decide which approval: one row per approver, for the reads of `GET /libro/cuenta`.
CREATE TABLE libro_pending_approvers (
  pending  TEXT NOT NULL REFERENCES libro_pending (id),
  approver TEXT NOT NULL,
  PRIMARY KEY (approver, pending)
) STRICT, WITHOUT ROWID;

-- Movements an authority with `max_per_hour` allowed, by subject (`card:<address>`,
-- `mandate:<id>`). The batch that writes one deletes that subject's rows older than an hour and
-- guards that the hour holds no more than the limit, so a subject keeps at most its limit.
CREATE TABLE libro_uses (
  subject  TEXT NOT NULL,
  at       INTEGER NOT NULL,
  envelope TEXT NOT NULL,
  amount   INTEGER NOT NULL,
  PRIMARY KEY (subject, envelope)
) STRICT, WITHOUT ROWID;
CREATE INDEX libro_uses_at ON libro_uses (subject, at);
