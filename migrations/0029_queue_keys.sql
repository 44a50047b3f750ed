-- An outbound envelope in six rows written (issue 36 §1; docs/decisions/0071-queue-keys.md).
-- D1 counts a row written per row inserted or updated and per index entry added; the send wrote
-- seven (the outbox row and its `envelope_id` and `outbox_root` entries, the job and its
-- `(envelope_id, domain)`, `jobs_due` and `jobs_pending_domain` entries) and the delivery one.
--
-- The outbox is keyed by its sender's root agent and `seq` (WITHOUT ROWID): the pages of
-- `GET /outbox` and the count of a tree's sends in a minute read that key, where they read
-- `outbox_root` beside it, which goes. `root` is stored (the CHECK holds it to the sender's root,
-- as `store::queue::root_address` computes it), and a `seq` is unique within its root (given in its
-- millisecond's slots of the root's key). The purge, which walked the old key by age, walks it
-- root by root (`store::queue::purge`).
--
-- A job is keyed by its envelope and destination (WITHOUT ROWID): the UNIQUE pair was an index
-- entry beside the rowid. `made` (the envelope's `seq` × 256 and the job's place among its
-- envelope's destinations; the old `id` for jobs from before) orders jobs as `id` did. Code from
-- before 0029 (a Worker until `wrangler deploy`) names `id` and no `root`, so its statements on
-- these tables fail whole rather than act on the wrong row: its sends and ticks answer 500 until
-- the new code runs.
CREATE TABLE outbox_0029 (
  root        TEXT NOT NULL,
  seq         INTEGER NOT NULL,
  envelope_id TEXT NOT NULL UNIQUE,
  sender      TEXT NOT NULL,
  envelope    TEXT NOT NULL,
  sha256      TEXT NOT NULL,
  expires     INTEGER,
  created_at  INTEGER NOT NULL,
  rate_n      INTEGER CONSTRAINT outbox_rate CHECK (rate_n IS NOT 0),
  PRIMARY KEY (root, seq),
  CONSTRAINT outbox_root_of_sender CHECK (root = (substr(substr(sender, 1, instr(sender, '@') - 1), length(rtrim(substr(sender, 1, instr(sender, '@') - 1), replace(substr(sender, 1, instr(sender, '@') - 1), '.', ''))) + 1) || substr(sender, instr(sender, '@'))))
) STRICT, WITHOUT ROWID;
INSERT INTO outbox_0029 (root, seq, envelope_id, sender, envelope, sha256, expires, created_at, rate_n)
  SELECT (substr(substr(sender, 1, instr(sender, '@') - 1), length(rtrim(substr(sender, 1, instr(sender, '@') - 1), replace(substr(sender, 1, instr(sender, '@') - 1), '.', ''))) + 1) || substr(sender, instr(sender, '@'))),
         seq, envelope_id, sender, envelope, sha256, expires, created_at, rate_n
  FROM outbox;
CREATE TABLE jobs_0029 (
  envelope_id  TEXT NOT NULL REFERENCES outbox_0029 (envelope_id),
  domain       TEXT NOT NULL,
  made         INTEGER NOT NULL,
  recipients   TEXT NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'bounced')),
  attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt INTEGER NOT NULL,
  not_before   INTEGER NOT NULL,
  deadline     INTEGER NOT NULL,
  lease_until  INTEGER NOT NULL DEFAULT 0,
  last_error   TEXT,
  result       TEXT,
  created_at   INTEGER NOT NULL,
  finished_at  INTEGER,
  PRIMARY KEY (envelope_id, domain),
  CONSTRAINT job_finished CHECK ((state = 'pending') = (finished_at IS NULL))
) STRICT, WITHOUT ROWID;
INSERT INTO jobs_0029 SELECT envelope_id, domain, id, recipients, state, attempts, next_attempt, not_before, deadline,
  lease_until, last_error, result, created_at, finished_at FROM jobs;
DROP TABLE jobs;
DROP TABLE outbox;
ALTER TABLE outbox_0029 RENAME TO outbox;
ALTER TABLE jobs_0029 RENAME TO jobs;

-- The pending jobs keep their two indexes (0024): the due scan, and a failing domain's jobs.
CREATE INDEX jobs_due ON jobs (next_attempt) WHERE state = 'pending';
CREATE INDEX jobs_pending_domain ON jobs (domain) WHERE state = 'pending';

-- Where the purge's walk over the outbox's roots stands, and where its window ends (see
-- `store::queue::purge`).
INSERT INTO settings (name, value, created_at) VALUES ('outbox_purge_root', '', 0), ('outbox_purge_hi', '', 0)
  ON CONFLICT (name) DO NOTHING;
