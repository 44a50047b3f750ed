-- When the Libro first received an operation it could not do yet (issue 34 §4). An operation is
-- judged at the time this house first received it, so that a flood, a queue or a retry cannot
-- make a deadline pass under it. An agent of this house hands its operation to the outbox, whose
-- job keeps that time (`jobs.not_before`); an operation from another house is remembered here when
-- it is refused for a passing reason (429, 503), and its retry is judged at its first arrival.
-- An operation lives an hour from then (docs/SPEC.md §16): the tick forgets rows two hours old
-- through `libro_received_at`. Rows are written at most `inbound_per_domain_per_minute` a minute
-- per sending site.
CREATE TABLE libro_received (
  envelope_id TEXT NOT NULL,
  sha256      TEXT NOT NULL,
  at          INTEGER NOT NULL,
  PRIMARY KEY (envelope_id, sha256)
) STRICT;
CREATE INDEX libro_received_at ON libro_received (at);
