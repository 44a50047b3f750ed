-- Guards (crates/house/src/store/guard.rs): assertions inside a batch. A guard statement writes
-- its condition, evaluated at its place in the batch, into `holds`; the CHECK refuses anything
-- but 1, so a guard that does not hold fails and undoes its whole batch (D1's batch is one
-- transaction). One row per guard name, rewritten each time.
CREATE TABLE guards (
  name  TEXT PRIMARY KEY,
  holds INTEGER NOT NULL,
  CONSTRAINT guard CHECK (holds = 1)
) STRICT;
