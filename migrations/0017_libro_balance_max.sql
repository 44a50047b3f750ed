-- A balance is a JSON number wherever it is read (entries, receipts, `/libro/cuenta`), and a
-- JSON reader holds integers exactly only up to 2^53 - 1: past it, the Libro read the balance as
-- 0 and the account froze (issue 34 §4). No write may take a balance past 2^53 - 1, or casa@'s
-- below -(2^53 - 1): the batch that would is undone whole, as `balance_negative` undoes one that
-- overdraws (`store::libro::BALANCE_MAX`, answered 409 with its reason).
--
-- Triggers rather than a CHECK: SQLite adds no CHECK to a table that exists, and rebuilding
-- `libro_accounts` under the running Worker is a contraction of its own. This migration depends
-- on nothing after 0015.
CREATE TRIGGER libro_balance_max_insert BEFORE INSERT ON libro_accounts
WHEN NEW.balance > 9007199254740991 OR NEW.balance < -9007199254740991
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: balance_max');
END;
-- A balance already past the bound (written before this migration) may still move back towards
-- it: only a step further out is refused.
CREATE TRIGGER libro_balance_max_update BEFORE UPDATE OF balance ON libro_accounts
WHEN (NEW.balance > 9007199254740991 AND NEW.balance > OLD.balance)
  OR (NEW.balance < -9007199254740991 AND NEW.balance < OLD.balance)
BEGIN
  SELECT RAISE(ABORT, 'CHECK constraint failed: balance_max');
END;
