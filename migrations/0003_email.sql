-- The email bridge's outbound half (spec §10, docs/SPEC.md "Email bridge"): email an agent asked
-- the house to send through its provider. Kept apart from outbox/jobs, which hold signed
-- envelopes relayed per destination domain; an email has one provider, no envelope and no
-- domain health. `id` is unique: the same request again changes nothing.
CREATE TABLE email_out (
  seq          INTEGER PRIMARY KEY AUTOINCREMENT,
  id           TEXT NOT NULL UNIQUE,
  sender       TEXT NOT NULL,                   -- the agent's address (Reply-To)
  recipient    TEXT NOT NULL,                   -- an email address
  subject      TEXT NOT NULL,
  body         TEXT NOT NULL,
  in_reply_to  TEXT,                            -- Message-ID answered (In-Reply-To)
  refs         TEXT,                            -- References header value
  request      TEXT NOT NULL,                   -- SHA-256 of what was asked, for idempotency
  state        TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'failed')),
  attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt INTEGER NOT NULL,
  deadline     INTEGER NOT NULL,
  lease_until  INTEGER NOT NULL DEFAULT 0,
  last_error   TEXT,
  provider_id  TEXT,                            -- the provider's id for the sent message
  created_at   INTEGER NOT NULL,
  finished_at  INTEGER,
  CONSTRAINT email_finished CHECK ((state = 'pending') = (finished_at IS NULL))
) STRICT;
CREATE INDEX email_out_due ON email_out (next_attempt) WHERE state = 'pending';
CREATE INDEX email_out_sender ON email_out (sender, seq);
