-- A Libro operation refused for good is refused again, by the same answer, when its envelope
-- comes back (migration 0007). Refusals now carry a name by cause (issue 37 §4; docs/SPEC.md
-- "Refusals by name"), so the row keeps the name beside the code and the reason: a replay says
-- `mandate_exhausted` again, not only 402. Rows from before have none; they are answered by their
-- code's own name, as they were.
ALTER TABLE libro_ops ADD COLUMN refused_name TEXT;
