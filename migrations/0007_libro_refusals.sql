-- An operation refused for good keeps its refusal (issue 12; found by the simulator, seed 162).
-- A refusal is the answer to an envelope as much as a receipt is: the same envelope again — a late
-- copy the network held, a replay — is refused again with the same code and reason, rather than
-- done once things change (a top-up arrives, a contract moves on) after its sender was told it
-- bounced. `refused` is the refusal's code and `reason` its text; such a row's `receipt` is ''.
-- Temporary refusals (429, 503) are not kept: those are asked again.
ALTER TABLE libro_ops ADD COLUMN refused INTEGER CHECK (refused IS NULL OR (refused >= 400 AND refused < 500));
ALTER TABLE libro_ops ADD COLUMN reason TEXT;
