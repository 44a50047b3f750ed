-- The Libro (spec §14–§21, docs/SPEC.md §14): the journal, the balances it implies, contracts,
-- mandates, the operations already done, and issues owed but not yet posted.
--
-- The kernel (crates/house/src/libro/kernel.rs) decides every posting as a pure function; this
-- schema refuses what must never be, whatever the code above it does: an entry that does not sum
-- to zero, a gap or a broken link in the hash chain, a second entry for one cause, a negative
-- balance for anyone but the house, a mandate spent past its cap.

-- The journal. `n` counts 1, 2, … with no gaps; `prev` is the previous entry's `sha256`. `cause`
-- is the operating envelope's id, or a key such as `welcome:<address>`: one entry per cause.
-- `lines` is the entry's lines as JSON, for the triggers below; `entry` the signed entry.
CREATE TABLE libro_entries (
  n      INTEGER PRIMARY KEY,
  id     TEXT NOT NULL UNIQUE,
  cause  TEXT NOT NULL UNIQUE,
  house  TEXT NOT NULL,
  at     INTEGER NOT NULL,
  prev   TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  lines  TEXT NOT NULL,
  entry  TEXT NOT NULL
) STRICT;

-- An entry sums to zero and names each account once.
CREATE TRIGGER libro_entry_balanced BEFORE INSERT ON libro_entries
WHEN (SELECT coalesce(sum(json_extract(value, '$.delta')), 1) FROM json_each(NEW.lines)) != 0
  OR (SELECT count(DISTINCT json_extract(value, '$.account')) FROM json_each(NEW.lines))
     != json_array_length(NEW.lines)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: entry_unbalanced');
END;

-- An entry follows the last one: the next number, linked by its hash.
CREATE TRIGGER libro_entry_chained BEFORE INSERT ON libro_entries
WHEN NEW.n != 1 + coalesce((SELECT max(n) FROM libro_entries), 0)
  OR NEW.prev != coalesce(
       (SELECT sha256 FROM libro_entries WHERE n = NEW.n - 1),
       '0000000000000000000000000000000000000000000000000000000000000000')
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: entry_chain');
END;

-- Balances are what the journal's lines add up to, kept by the journal itself: an entry's lines
-- are added here as it is inserted, and the CHECK undoes the batch that would leave anyone but
-- the house (`may_owe`) below zero.
CREATE TABLE libro_accounts (
  account TEXT PRIMARY KEY,
  balance INTEGER NOT NULL,
  may_owe INTEGER NOT NULL DEFAULT 0,
  CONSTRAINT balance_negative CHECK (balance >= 0 OR may_owe = 1)
) STRICT;

-- Which entries name an account, for statements read newest first without scanning the journal.
CREATE TABLE libro_lines (
  account TEXT NOT NULL,
  n       INTEGER NOT NULL,
  PRIMARY KEY (account, n)
) STRICT, WITHOUT ROWID;

-- (An upsert would not do: SQLite checks the CHECK on the row it proposes to insert before it
-- finds the conflict, so a debit of an existing account would fail. Existing accounts are
-- updated first, then the new ones inserted.)
CREATE TRIGGER libro_entry_posts AFTER INSERT ON libro_entries
BEGIN
  UPDATE libro_accounts
     SET balance = balance + (SELECT json_extract(j.value, '$.delta') FROM json_each(NEW.lines) j
                               WHERE json_extract(j.value, '$.account') = libro_accounts.account)
   WHERE account IN (SELECT json_extract(value, '$.account') FROM json_each(NEW.lines));
  INSERT INTO libro_accounts (account, balance, may_owe)
  SELECT json_extract(value, '$.account'), json_extract(value, '$.delta'),
         json_extract(value, '$.account') = 'casa@' || NEW.house
    FROM json_each(NEW.lines)
   WHERE json_extract(value, '$.account') NOT IN (SELECT account FROM libro_accounts);
  INSERT INTO libro_lines (account, n)
  SELECT json_extract(value, '$.account'), NEW.n FROM json_each(NEW.lines);
END;

-- The journal is written once.
CREATE TRIGGER libro_entry_fixed BEFORE UPDATE ON libro_entries
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: entry_fixed');
END;
CREATE TRIGGER libro_entry_kept BEFORE DELETE ON libro_entries
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: entry_fixed');
END;

-- Operations done, by envelope id: the same envelope again changes nothing. `receipt` is the
-- operator's receipt, answered again to a repeat.
CREATE TABLE libro_ops (
  envelope_id TEXT PRIMARY KEY,
  operator    TEXT NOT NULL,
  op          TEXT NOT NULL,
  sha256      TEXT NOT NULL,
  at          INTEGER NOT NULL,
  receipt     TEXT NOT NULL
) STRICT;

-- Contracts (§17). `record` is the contract's JSON (terms, history …); the columns are what
-- queries select on. `version` rises with every change: a batch that changes a contract carries
-- a guard that it still has the version its decision read.
CREATE TABLE libro_contracts (
  id          TEXT PRIMARY KEY,
  kind        TEXT NOT NULL CHECK (kind IN ('spot', 'escrow', 'bond', 'metered')),
  state       TEXT NOT NULL,
  seller      TEXT,
  buyer       TEXT,
  bondholder  TEXT,
  verifier    TEXT,
  beneficiary TEXT,
  arbiter     TEXT,
  vouchee     TEXT,
  amount      INTEGER NOT NULL CHECK (amount > 0),
  expires     INTEGER,
  created     INTEGER NOT NULL,
  updated     INTEGER NOT NULL,
  version     INTEGER NOT NULL DEFAULT 1,
  record      TEXT NOT NULL
) STRICT;
CREATE INDEX libro_contracts_seller ON libro_contracts (seller, updated) WHERE seller IS NOT NULL;
CREATE INDEX libro_contracts_buyer ON libro_contracts (buyer, updated) WHERE buyer IS NOT NULL;
CREATE INDEX libro_contracts_bondholder ON libro_contracts (bondholder, updated) WHERE bondholder IS NOT NULL;
CREATE INDEX libro_contracts_verifier ON libro_contracts (verifier, updated) WHERE verifier IS NOT NULL;
CREATE INDEX libro_contracts_beneficiary ON libro_contracts (beneficiary, updated) WHERE beneficiary IS NOT NULL;
CREATE INDEX libro_contracts_arbiter ON libro_contracts (arbiter, updated) WHERE arbiter IS NOT NULL;
CREATE INDEX libro_contracts_vouchee ON libro_contracts (vouchee, updated) WHERE vouchee IS NOT NULL;
CREATE INDEX libro_bonds_due ON libro_contracts (expires) WHERE kind = 'bond' AND state = 'posted';

-- Mandates (§18): `chain` is the JSON list of ids from the root to this one.
CREATE TABLE libro_mandates (
  id       TEXT PRIMARY KEY,
  grantor  TEXT NOT NULL,
  grantee  TEXT NOT NULL,
  cap      INTEGER NOT NULL CHECK (cap > 0),
  spent    INTEGER NOT NULL DEFAULT 0,
  state    TEXT NOT NULL CHECK (state IN ('active', 'revoked')),
  expires  INTEGER,
  parent   TEXT,
  root     TEXT NOT NULL,
  chain    TEXT NOT NULL,
  contract TEXT,
  created  INTEGER NOT NULL,
  version  INTEGER NOT NULL DEFAULT 1,
  record   TEXT NOT NULL,
  CONSTRAINT mandate_spent CHECK (spent >= 0 AND spent <= cap)
) STRICT;
CREATE INDEX libro_mandates_grantor ON libro_mandates (grantor);
CREATE INDEX libro_mandates_grantee ON libro_mandates (grantee);
CREATE INDEX libro_mandates_parent ON libro_mandates (parent) WHERE parent IS NOT NULL;

-- Issues the house owes but has not posted yet (a registration's welcome gift): written in the
-- batch that earns them, posted by the Libro right after and by every tick until done.
CREATE TABLE libro_due (
  cause   TEXT PRIMARY KEY,
  account TEXT NOT NULL,
  amount  INTEGER NOT NULL CHECK (amount > 0),
  concept TEXT NOT NULL,
  at      INTEGER NOT NULL
) STRICT;

-- The stamp's entry beside a stamped envelope (§19).
ALTER TABLE mailbox ADD COLUMN stamp TEXT;
