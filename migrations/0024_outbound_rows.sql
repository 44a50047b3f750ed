-- An outbound envelope writes fewer rows (issue 36 §1, D1 rows; D1 counts a row written per row
-- inserted or updated and per index entry added). docs/decisions/36-outrows.md has the figures.
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
-- (`outbox_created`, an index entry per envelope, is dropped). The agent's sends a minute are
-- counted from the outbox itself (the rows of its root agent's tree created in that minute, read
-- through `outbox_root`), not in a `rate_windows` row each send rewrote: the insert numbers its
-- row in the minute (`rate_n`) and a send past the cap gets 0, which `outbox_rate` refuses.
-- `outbox_root` (the root agent of the sender, as `store::queue::root_of!` spells it, then `seq`)
-- replaces `outbox_sender (sender, seq)` for `GET /outbox` pages too. Rows from before (and any a
-- Worker from before inserts until `wrangler deploy`) have no `rate_n`, which the CHECK allows.
ALTER TABLE outbox ADD COLUMN rate_n INTEGER CONSTRAINT outbox_rate CHECK (rate_n IS NOT 0);
CREATE INDEX outbox_root ON outbox ((substr(substr(sender, 1, instr(sender, '@') - 1), length(rtrim(substr(sender, 1, instr(sender, '@') - 1), replace(substr(sender, 1, instr(sender, '@') - 1), '.', ''))) + 1) || substr(sender, instr(sender, '@'))), seq);
DROP INDEX outbox_sender;
DROP INDEX outbox_created;

-- Pending jobs: one index, by `not_before`, which no lease, retry or postponement changes (a
-- pending job's `next_attempt` is never before it), instead of `jobs_due (next_attempt)`, whose
-- entry every lease rewrote, and `jobs_pending_domain (domain)`, whose queries (a failing
-- domain's jobs) read the pending jobs instead. A job leaving `pending` only deletes its entry.
CREATE INDEX jobs_pending ON jobs (not_before) WHERE state = 'pending';
DROP INDEX jobs_due;
DROP INDEX jobs_pending_domain;
