-- A Libro operation writes fewer rows (issue 36 §1, D1 rows). D1 bills one row written per row
-- inserted, updated or deleted, and one per index entry changed; a spot `accept` wrote 25, a
-- top-up 9 (docs/decisions/0059-libro-rows.md has the ledger). Four changes, none in what any row
-- means to a reader:
--
-- 1. A line carries its account's balance. Each entry wrote a line per account it moves AND
--    rewrote each account's row (a new account: a row and its `PRIMARY KEY` entry). Now the line
--    is all: `libro_lines.balance` is the account's balance after entry `n`, so an account's
--    balance is its newest line's (one seek down the key, `ORDER BY n DESC LIMIT 1`), and the
--    CHECK that undoes an overdraft (`balance_negative`) and the bound of 0017 (`balance_max`)
--    hold on the line. `libro_accounts` becomes a view of each account's newest line, with the
--    columns it had (and that line's `n`): readers outside the hot paths (audits, the simulator, a Worker from before
--    this migration until `wrangler deploy`) read it as before.
-- 2. The journal's indexes: `libro_entries.id` loses its `UNIQUE` (no query reads an entry by id,
--    and the id is a fresh UUID per entry), and `cause` keeps its `UNIQUE` only where nothing else
--    makes it one: an operation's entry has the operating envelope's id as its cause (an id has no
--    `:`, spec §1) and is written in the batch that inserts that id into `libro_ops`, whose key
--    refuses it twice; every other cause (`topup:…`, `welcome:…`, `stamp:…`, `expiry:…`,
--    `approval-expiry:…`) has a `:` and its entry in the partial index `libro_entries_cause`,
--    which `post_once` reads. One entry per cause still; two index entries fewer per operation.
-- 3. `libro_ops`, 4. `libro_contracts` and 5. `rate_windows` (which counts every operation, as it
--    counts mail) are keyed WITHOUT ROWID: a rowid table with a text or composite `PRIMARY KEY`
--    writes the row and, apart, its key's index entry.
--
-- Every table is rebuilt under its own name with its own columns: a Worker from before this
-- migration writes the same statements against it, and the triggers (now on the new tables)
-- post its entries' lines the new way.

DROP TRIGGER libro_entry_posts;
DROP TRIGGER libro_balance_max_insert;
DROP TRIGGER libro_balance_max_update;

-- 1. Lines with balances. Each line gets its account's running balance as the journal adds it
-- up; the newest line of each account gets the balance `libro_accounts` holds, so what every
-- account holds does not move.
CREATE TABLE libro_lines_0025 (
  account TEXT NOT NULL,
  n       INTEGER NOT NULL,
  balance INTEGER NOT NULL,
  may_owe INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (account, n),
  CONSTRAINT balance_negative CHECK (balance >= 0 OR may_owe = 1)
) STRICT, WITHOUT ROWID;
INSERT INTO libro_lines_0025 (account, n, balance, may_owe)
SELECT l.account, l.n,
       CASE WHEN a.account IS NOT NULL AND l.n = (SELECT max(m.n) FROM libro_lines m WHERE m.account = l.account)
            THEN a.balance ELSE coalesce(d.running, 0) END,
       coalesce(a.may_owe, 0)
  FROM libro_lines l
  LEFT JOIN libro_accounts a ON a.account = l.account
  LEFT JOIN (SELECT json_extract(j.value, '$.account') AS account, e.n AS n,
                    sum(json_extract(j.value, '$.delta'))
                      OVER (PARTITION BY json_extract(j.value, '$.account') ORDER BY e.n) AS running
               FROM libro_entries e, json_each(e.lines) j) d
    ON d.account = l.account AND d.n = l.n;
DROP TABLE libro_lines;
DROP TABLE libro_accounts;
ALTER TABLE libro_lines_0025 RENAME TO libro_lines;

CREATE VIEW libro_accounts AS
  SELECT account, balance, may_owe, n FROM libro_lines l
   WHERE n = (SELECT max(m.n) FROM libro_lines m WHERE m.account = l.account);

-- No line may take a balance past 2^53 - 1, or casa@'s below -(2^53 - 1) (0017); one already past
-- the bound may still move back towards it.
CREATE TRIGGER libro_balance_max BEFORE INSERT ON libro_lines
WHEN (NEW.balance > 9007199254740991 OR NEW.balance < -9007199254740991)
 AND abs(NEW.balance) > abs(coalesce((SELECT p.balance FROM libro_lines p
                                       WHERE p.account = NEW.account AND p.n < NEW.n
                                       ORDER BY p.n DESC LIMIT 1), 0))
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: balance_max');
END;

-- 2. The journal, without the index of its ids, and causes indexed where `libro_ops` is not their key.
CREATE TABLE libro_entries_0025 (
  n      INTEGER PRIMARY KEY,
  id     TEXT NOT NULL,
  cause  TEXT NOT NULL,
  house  TEXT NOT NULL,
  at     INTEGER NOT NULL,
  prev   TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  lines  TEXT NOT NULL,
  entry  TEXT NOT NULL
) STRICT;
INSERT INTO libro_entries_0025 (n, id, cause, house, at, prev, sha256, lines, entry)
  SELECT n, id, cause, house, at, prev, sha256, lines, entry FROM libro_entries ORDER BY n;
DROP TABLE libro_entries;
ALTER TABLE libro_entries_0025 RENAME TO libro_entries;
CREATE UNIQUE INDEX libro_entries_cause ON libro_entries (cause) WHERE instr(cause, ':') > 0;

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

-- An entry posts its lines: each account's new balance is its newest line's plus the delta (the
-- `SELECT` is read whole before the first line is inserted; an entry names each account once).
-- The house's account (`casa@<house>`) may owe.
CREATE TRIGGER libro_entry_posts AFTER INSERT ON libro_entries
BEGIN
  INSERT INTO libro_lines (account, n, balance, may_owe)
  SELECT json_extract(j.value, '$.account'), NEW.n,
         coalesce((SELECT p.balance FROM libro_lines p WHERE p.account = json_extract(j.value, '$.account')
                    ORDER BY p.n DESC LIMIT 1), 0) + json_extract(j.value, '$.delta'),
         json_extract(j.value, '$.account') = 'casa@' || NEW.house
    FROM json_each(NEW.lines) j;
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

-- 3. Operations done, keyed by envelope id.
CREATE TABLE libro_ops_0025 (
  envelope_id TEXT PRIMARY KEY,
  operator    TEXT NOT NULL,
  op          TEXT NOT NULL,
  sha256      TEXT NOT NULL,
  at          INTEGER NOT NULL,
  receipt     TEXT NOT NULL,
  refused     INTEGER CHECK (refused IS NULL OR (refused >= 400 AND refused < 500)),
  reason      TEXT
) STRICT, WITHOUT ROWID;
INSERT INTO libro_ops_0025 (envelope_id, operator, op, sha256, at, receipt, refused, reason)
  SELECT envelope_id, operator, op, sha256, at, receipt, refused, reason FROM libro_ops;
DROP TABLE libro_ops;
ALTER TABLE libro_ops_0025 RENAME TO libro_ops;

-- 4. Contracts, keyed by id, with the indexes they had.
CREATE TABLE libro_contracts_0025 (
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
) STRICT, WITHOUT ROWID;
INSERT INTO libro_contracts_0025 (id, kind, state, seller, buyer, bondholder, verifier, beneficiary, arbiter,
                                  vouchee, amount, expires, created, updated, version, record)
  SELECT id, kind, state, seller, buyer, bondholder, verifier, beneficiary, arbiter,
         vouchee, amount, expires, created, updated, version, record FROM libro_contracts;
DROP TABLE libro_contracts;
ALTER TABLE libro_contracts_0025 RENAME TO libro_contracts;
CREATE INDEX libro_contracts_seller ON libro_contracts (seller, updated) WHERE seller IS NOT NULL;
CREATE INDEX libro_contracts_buyer ON libro_contracts (buyer, updated) WHERE buyer IS NOT NULL;
CREATE INDEX libro_contracts_bondholder ON libro_contracts (bondholder, updated) WHERE bondholder IS NOT NULL;
CREATE INDEX libro_contracts_verifier ON libro_contracts (verifier, updated) WHERE verifier IS NOT NULL;
CREATE INDEX libro_contracts_beneficiary ON libro_contracts (beneficiary, updated) WHERE beneficiary IS NOT NULL;
CREATE INDEX libro_contracts_arbiter ON libro_contracts (arbiter, updated) WHERE arbiter IS NOT NULL;
CREATE INDEX libro_contracts_vouchee ON libro_contracts (vouchee, updated) WHERE vouchee IS NOT NULL;
CREATE INDEX libro_bonds_due ON libro_contracts (expires) WHERE kind = 'bond' AND state = 'posted';

-- 5. Counters per window, keyed by (bucket, window): a window's first count is one row.
CREATE TABLE rate_windows_0025 (
  bucket  TEXT NOT NULL,
  window  INTEGER NOT NULL,
  count   INTEGER NOT NULL,
  cap     INTEGER NOT NULL,
  PRIMARY KEY (bucket, window),
  CONSTRAINT rate_cap CHECK (count <= cap)
) STRICT, WITHOUT ROWID;
INSERT INTO rate_windows_0025 (bucket, window, count, cap) SELECT bucket, window, count, cap FROM rate_windows;
DROP TABLE rate_windows;
ALTER TABLE rate_windows_0025 RENAME TO rate_windows;
