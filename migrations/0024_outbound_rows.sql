-- An outbound envelope writes fewer rows (issue 36 §1, D1 rows; D1 counts a row written per row
-- inserted or updated and per index entry added). docs/decisions/0061-outbound-rows.md has the figures.
--
-- A token's nonce was two rows: `nonces` had a rowid and its key `(address, nonce)` was an index
-- beside it. Keyed by the pair itself (WITHOUT ROWID) it is one, for every authenticated request.
CREATE TABLE nonces_0024 (
  address    TEXT NOT NULL,
  nonce      TEXT NOT NULL,
  keep_until INTEGER NOT NULL,
  PRIMARY KEY (address, nonce)
) STRICT, WITHOUT ROWID;
INSERT INTO nonces_0024 (address, nonce, keep_until) SELECT address, nonce, keep_until FROM nonces;
DROP TABLE nonces;
ALTER TABLE nonces_0024 RENAME TO nonces;

-- The outbox: an envelope's `seq` is given by the insert, `created_at` (ms) × 1024 or the last
-- `seq` + 1 if that is higher, so the key is in the order of time and the tick's purge walks it
-- (`outbox_created`, an index entry per envelope, is dropped), and without AUTOINCREMENT (whose
-- `sqlite_sequence` row every envelope rewrote): the highest `seq` is never purged before a week
-- and every new one is above it anyway. The agent's sends a minute are counted from the outbox
-- itself (the rows of its root agent's tree created in that minute, read through
-- `outbox_root`), not in a `rate_windows` row each send rewrote: the insert numbers its row in
-- the minute (`rate_n`) and a send past the cap gets 0, which `outbox_rate` refuses.
-- `outbox_root` (the root agent of the sender, as `store::queue::root_of!` spells it, then `seq`)
-- replaces `outbox_sender (sender, seq)` for `GET /outbox` pages too. Rows from before (and any a
-- Worker from before inserts until `wrangler deploy`, which take the next `seq`) have no
-- `rate_n`, which the CHECK allows.
--
-- `jobs` is copied as it is, to point its foreign key at the new outbox (the old outbox could
-- not be dropped under it).
CREATE TABLE outbox_0024 (
  seq         INTEGER PRIMARY KEY,
  envelope_id TEXT NOT NULL UNIQUE,
  sender      TEXT NOT NULL,
  envelope    TEXT NOT NULL,
  sha256      TEXT NOT NULL,
  expires     INTEGER,
  created_at  INTEGER NOT NULL,
  rate_n      INTEGER CONSTRAINT outbox_rate CHECK (rate_n IS NOT 0)
) STRICT;
INSERT INTO outbox_0024 (seq, envelope_id, sender, envelope, sha256, expires, created_at)
  SELECT seq, envelope_id, sender, envelope, sha256, expires, created_at FROM outbox;
CREATE TABLE jobs_0024 (
  id           INTEGER PRIMARY KEY,
  envelope_id  TEXT NOT NULL REFERENCES outbox_0024 (envelope_id),
  domain       TEXT NOT NULL,
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
  UNIQUE (envelope_id, domain),
  CONSTRAINT job_finished CHECK ((state = 'pending') = (finished_at IS NULL))
) STRICT;
INSERT INTO jobs_0024 SELECT id, envelope_id, domain, recipients, state, attempts, next_attempt, not_before, deadline,
  lease_until, last_error, result, created_at, finished_at FROM jobs;
DROP TABLE jobs;
DROP TABLE outbox;
ALTER TABLE outbox_0024 RENAME TO outbox;
ALTER TABLE jobs_0024 RENAME TO jobs;
CREATE INDEX outbox_root ON outbox ((substr(substr(sender, 1, instr(sender, '@') - 1), length(rtrim(substr(sender, 1, instr(sender, '@') - 1), replace(substr(sender, 1, instr(sender, '@') - 1), '.', ''))) + 1) || substr(sender, instr(sender, '@'))), seq);

-- Pending jobs keep the two indexes they had (0001, 0022), rebuilt on the copy: the due scan
-- reads `jobs_due` up to now, and a failing domain's jobs are found through
-- `jobs_pending_domain`. One index by `not_before` alone (which no lease changes) would save the
-- entry each lease rewrites, but every tick would then read every job waiting to retry, a
-- backlog strangers can grow (docs/decisions/0061-outbound-rows.md).
CREATE INDEX jobs_due ON jobs (next_attempt) WHERE state = 'pending';
CREATE INDEX jobs_pending_domain ON jobs (domain) WHERE state = 'pending';
