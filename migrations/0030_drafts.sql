-- Drafts a person approves (issue 38 §3; docs/SPEC.md §7c; docs/decisions/0072-drafts.md).
--
-- A hold on an agent makes the envelopes it covers (all, to strangers, to some domains, of some
-- types) wait at the house for an approver, its subagents' too. The outbox will not take a row
-- from a held tree unless the sender judged it against the tree's holds as they are now
-- (`judged`, the version `max(seq):count` of the root's holds) or a draft of that very envelope
-- was approved: so no path into the outbox skips a hold, and a hold set while a send is being
-- decided fails that send's batch instead of letting it by. Trees without a hold pay one index
-- seek per send and no row written.

-- One hold per agent; `seq` only grows (AUTOINCREMENT), so a tree's `max(seq):count` changes
-- with every hold set or lifted in it.
CREATE TABLE mail_holds (
  seq      INTEGER PRIMARY KEY AUTOINCREMENT,
  local    TEXT NOT NULL UNIQUE,
  root     TEXT NOT NULL,
  approver TEXT NOT NULL,
  rule     TEXT NOT NULL,
  set_by   TEXT NOT NULL,
  set_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX mail_holds_root ON mail_holds (root);

-- A held envelope: its id is the envelope's. `asks` lists the approvers (a JSON array, each
-- once), `approved_by` who said yes so far; `readers` the content key wrapped for each approver
-- when the envelope is sealed (`{"<address>": {epk, iv, ct, tag}}`, kept apart from the envelope).
CREATE TABLE drafts (
  id          TEXT PRIMARY KEY,
  root        TEXT NOT NULL,
  sender      TEXT NOT NULL,
  envelope    TEXT NOT NULL,
  bytes       INTEGER NOT NULL CHECK (bytes >= 0),
  sha256      TEXT NOT NULL,
  readers     TEXT,
  asks        TEXT NOT NULL,
  approved_by TEXT NOT NULL DEFAULT '[]',
  state       TEXT NOT NULL CONSTRAINT draft_state CHECK (state IN ('pending', 'approved', 'declined')),
  held_at     INTEGER NOT NULL,
  expires     INTEGER NOT NULL,
  decided_at  INTEGER,
  decided_by  TEXT,
  note        TEXT,
  -- This draft's place among its tree's drafts held in its minute; 0 past the cap refuses it.
  rate_n      INTEGER CONSTRAINT drafts_rate CHECK (rate_n IS NOT 0)
) STRICT, WITHOUT ROWID;
CREATE INDEX drafts_root ON drafts (root, state, expires, bytes);
CREATE INDEX drafts_expires ON drafts (expires);

-- Who must decide what: one row per approver and draft, for `GET /drafts/:local`.
CREATE TABLE draft_asks (
  approver TEXT NOT NULL,
  id       TEXT NOT NULL,
  PRIMARY KEY (approver, id)
) STRICT, WITHOUT ROWID;

-- A tree keeps at most 100 drafts waiting, 1,000 in all and 64 MiB of envelopes (waiting or
-- decided, until the purge takes them a week after they expire): only its own agents add to it,
-- at most as fast as they may send (`rate_n`).
CREATE TRIGGER drafts_bound BEFORE INSERT ON drafts
WHEN (SELECT count(*) FROM drafts WHERE root = NEW.root) >= 1000
  OR (SELECT count(*) FROM drafts WHERE root = NEW.root AND state = 'pending' AND expires > NEW.held_at) >= 100
  OR (SELECT coalesce(sum(bytes), 0) FROM drafts WHERE root = NEW.root) + NEW.bytes > 67108864
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: drafts_bound');
END;

ALTER TABLE outbox ADD COLUMN judged TEXT;

CREATE TRIGGER outbox_held BEFORE INSERT ON outbox
WHEN EXISTS (
    SELECT 1 FROM mail_holds AS h
    WHERE h.root = NEW.root
      AND (h.local = substr(NEW.sender, 1, instr(NEW.sender, '@') - 1)
           OR substr(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1),
                     instr(NEW.sender, '@') - 1 - length(h.local)) = '.' || h.local))
  AND NEW.judged IS NOT (SELECT max(seq) || ':' || count(*) FROM mail_holds WHERE root = NEW.root)
  AND NOT EXISTS (
    SELECT 1 FROM drafts
    WHERE id = NEW.envelope_id AND state = 'approved' AND sender = NEW.sender AND sha256 = NEW.sha256)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: outbox_held');
END;

-- Email a held agent sends through the bridge (`POST /email/out`) meets the same holds: a row of
-- a held tree is taken only when judged against its holds as they are now. (An email cannot wait
-- as a draft: one a hold covers is refused, docs/SPEC.md §7c.) `email_out` has no root column;
-- the root is computed from the sender as the outbox's CHECK computes it (migration 0029).
ALTER TABLE email_out ADD COLUMN judged TEXT;

CREATE TRIGGER email_out_held BEFORE INSERT ON email_out
WHEN EXISTS (
    SELECT 1 FROM mail_holds AS h
    WHERE h.root = substr(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1), length(rtrim(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1), replace(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1), '.', ''))) + 1) || substr(NEW.sender, instr(NEW.sender, '@'))
      AND (h.local = substr(NEW.sender, 1, instr(NEW.sender, '@') - 1)
           OR substr(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1), instr(NEW.sender, '@') - 1 - length(h.local)) = '.' || h.local))
  AND NEW.judged IS NOT (SELECT max(seq) || ':' || count(*) FROM mail_holds WHERE root = substr(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1), length(rtrim(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1), replace(substr(NEW.sender, 1, instr(NEW.sender, '@') - 1), '.', ''))) + 1) || substr(NEW.sender, instr(NEW.sender, '@')))
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: email_out_held');
END;
