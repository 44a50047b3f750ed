-- The house's account keeps its balance on the journal (issue 36 §1, D1 rows;
-- docs/decisions/0076-an-operation-counted-once.md).
--
-- `casa@<house>` takes part in nearly every entry: each fee, top-up, welcome gift and stamp
-- moves it. Its lines (one per entry, keyed by account) were a second copy of the journal, one
-- row written per entry. Now the entry carries that balance itself: `house_balance` is
-- casa@'s balance after the entry, the previous entry's plus the entry's casa@ delta. The
-- entry is read anyway to chain the next one (`prev`), so casa@'s balance costs one column and
-- no row. No other account changes: each still has its lines with its running balance.
--
-- Readers: `libro_accounts` (the view) takes casa@'s row from the newest entry; the store reads
-- casa@'s balance there and its statement from the journal. casa@'s lines from before stay where
-- they are, read by nobody: removing them would write a row per entry the house ever made, in
-- one statement, against the Free plan's 100,000 rows a day. The schema keeps the rules it kept
-- on casa@'s lines: the balance is the previous one plus the delta (`house_balance`), and it
-- never passes -(2^53 - 1) further (`balance_max`, as 0017).
--
-- A contraction (migrations/README.md): a Worker from before this writes entries without
-- `house_balance`, which the schema refuses (its Libro operations fail whole, 500, and change
-- nothing) until `wrangler deploy`: apply and deploy together.

ALTER TABLE libro_entries ADD COLUMN house_balance INTEGER;

-- The newest entry gets casa@'s balance as its lines say; the next entry goes on from it.
DROP TRIGGER libro_entry_fixed;
UPDATE libro_entries
   SET house_balance = coalesce((SELECT l.balance FROM libro_lines l
                                  WHERE l.account = 'casa@' || libro_entries.house
                                  ORDER BY l.n DESC LIMIT 1), 0)
 WHERE n = (SELECT max(n) FROM libro_entries);
CREATE TRIGGER libro_entry_fixed BEFORE UPDATE ON libro_entries
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: entry_fixed');
END;

-- A journal is one house's (the offline audit refuses one of two): an entry names the house the
-- one before it names, so casa@'s balance is one account's all along.
CREATE TRIGGER libro_entry_one_house BEFORE INSERT ON libro_entries
WHEN NEW.house IS NOT coalesce((SELECT p.house FROM libro_entries p WHERE p.n = NEW.n - 1), NEW.house)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: entry_house');
END;

-- An entry's casa@ balance follows the previous entry's by its own casa@ delta.
CREATE TRIGGER libro_entry_house_balance BEFORE INSERT ON libro_entries
WHEN NEW.house_balance IS NOT
       coalesce((SELECT p.house_balance FROM libro_entries p WHERE p.n = NEW.n - 1), 0)
       + coalesce((SELECT sum(json_extract(j.value, '$.delta')) FROM json_each(NEW.lines) j
                    WHERE json_extract(j.value, '$.account') = 'casa@' || NEW.house), 0)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: house_balance');
END;

-- casa@ may owe at most 2^53 - 1 (0017): a balance past the bound may only move back towards it.
CREATE TRIGGER libro_entry_house_max BEFORE INSERT ON libro_entries
WHEN abs(NEW.house_balance) > 9007199254740991
 AND abs(NEW.house_balance) > abs(coalesce((SELECT p.house_balance FROM libro_entries p WHERE p.n = NEW.n - 1), 0))
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: balance_max');
END;

-- An entry posts a line for each account it moves but casa@.
DROP TRIGGER libro_entry_posts;
CREATE TRIGGER libro_entry_posts AFTER INSERT ON libro_entries
BEGIN
  INSERT INTO libro_lines (account, n, balance, may_owe)
  SELECT json_extract(j.value, '$.account'), NEW.n,
         coalesce((SELECT p.balance FROM libro_lines p WHERE p.account = json_extract(j.value, '$.account')
                    ORDER BY p.n DESC LIMIT 1), 0) + json_extract(j.value, '$.delta'),
         0
    FROM json_each(NEW.lines) j
   WHERE json_extract(j.value, '$.account') IS NOT 'casa@' || NEW.house;
END;

-- Each account's newest line but casa@'s (its lines from before are history: the only lines
-- that may owe, 0025; an agent's line that says it may owe, which nothing writes, still shows),
-- and casa@'s balance from the newest entry.
DROP VIEW libro_accounts;
CREATE VIEW libro_accounts AS
  SELECT account, balance, may_owe, n FROM libro_lines l
   WHERE n = (SELECT max(m.n) FROM libro_lines m WHERE m.account = l.account)
     AND NOT (may_owe = 1 AND account LIKE 'casa@%')
  UNION ALL
  SELECT 'casa@' || house, house_balance, 1, n FROM libro_entries
   WHERE n = (SELECT max(n) FROM libro_entries) AND house_balance IS NOT NULL;
