-- The mail half of a house (spec §2–§9): agents, registration, auth nonces, mailbox, queue,
-- resolver state. Times are integer milliseconds since the Unix epoch. Guards live here:
-- UNIQUE keys for idempotency and single use, CHECKs for what may never hold.

-- Every certified agent of this house. `card` is the exact certified JSON served at /agents/:local.
CREATE TABLE agents (
  local          TEXT PRIMARY KEY,
  card           TEXT NOT NULL,
  sig            TEXT NOT NULL,
  listed         INTEGER NOT NULL DEFAULT 0 CHECK (listed IN (0, 1)),
  search         TEXT NOT NULL DEFAULT '',      -- lower-case text the directory's `q` matches
  accepts        TEXT NOT NULL DEFAULT '',      -- ' media1 media2 ' for `accepts=` filters
  caps           TEXT NOT NULL DEFAULT '',      -- ' mcp a2a ' capability names for `capability=`
  webhook        TEXT,                          -- private push URL, never published
  registered_via TEXT NOT NULL,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL
) STRICT;
CREATE INDEX agents_listed ON agents (listed, local);

-- One row per registration or update, for the record (`registered_via`).
CREATE TABLE registrations (
  id      INTEGER PRIMARY KEY,
  local   TEXT NOT NULL,
  via     TEXT NOT NULL,
  sig     TEXT NOT NULL,
  at      INTEGER NOT NULL
) STRICT;

-- Invitation codes: `used` can never pass `uses`, so a batch that over-uses one fails whole.
CREATE TABLE invitations (
  code       TEXT PRIMARY KEY,
  uses       INTEGER NOT NULL CHECK (uses > 0),
  used       INTEGER NOT NULL DEFAULT 0,
  expires    INTEGER,
  note       TEXT,
  welcome    INTEGER NOT NULL DEFAULT 0 CHECK (welcome >= 0),
  created_at INTEGER NOT NULL,
  CONSTRAINT invitation_uses CHECK (used >= 0 AND used <= uses)
) STRICT;

-- Counters per window (open registrations per minute, inbound per sending domain per minute).
-- The CHECK makes the batch that would pass the cap fail.
CREATE TABLE rate_windows (
  bucket  TEXT NOT NULL,
  window  INTEGER NOT NULL,
  count   INTEGER NOT NULL,
  cap     INTEGER NOT NULL,
  PRIMARY KEY (bucket, window),
  CONSTRAINT rate_cap CHECK (count <= cap)
) STRICT;

-- Agent-auth nonces: single use is the primary key itself.
CREATE TABLE nonces (
  address    TEXT NOT NULL,
  nonce      TEXT NOT NULL,
  keep_until INTEGER NOT NULL,
  PRIMARY KEY (address, nonce)
) STRICT;
CREATE INDEX nonces_expiry ON nonces (keep_until);

-- Per-agent allow and block lists (addresses or whole domains).
CREATE TABLE lists (
  local  TEXT NOT NULL,
  kind   TEXT NOT NULL CHECK (kind IN ('allow', 'block')),
  entry  TEXT NOT NULL,
  PRIMARY KEY (local, kind, entry)
) STRICT;

-- Envelopes waiting in mailboxes. One row per (recipient, envelope id): a second delivery of the
-- same envelope changes nothing. `seq` orders the mailbox; acked rows keep the id reserved.
CREATE TABLE mailbox (
  seq         INTEGER PRIMARY KEY AUTOINCREMENT,
  local       TEXT NOT NULL,
  envelope_id TEXT NOT NULL,
  sender      TEXT NOT NULL,
  envelope    TEXT NOT NULL,
  received_at INTEGER NOT NULL,
  acked_at    INTEGER,
  UNIQUE (local, envelope_id)
) STRICT;
CREATE INDEX mailbox_pending ON mailbox (local, seq) WHERE acked_at IS NULL;

-- Envelopes this house accepted from its agents (POST /outbound). The envelope id is unique: a
-- resend changes nothing. `seq` orders GET /outbox; rows are purged a while after every job ends.
CREATE TABLE outbox (
  seq         INTEGER PRIMARY KEY AUTOINCREMENT,
  envelope_id TEXT NOT NULL UNIQUE,
  sender      TEXT NOT NULL,
  envelope    TEXT NOT NULL,
  sha256      TEXT NOT NULL,                   -- of the canonical envelope, as notices cite it
  expires     INTEGER,
  created_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX outbox_sender ON outbox (sender, seq);

-- Delivery jobs: one per (envelope, destination domain). `lease_until` keeps two ticks from
-- working the same job at once. `not_before` is the first due time (`deliver_after` or the queue
-- time); `deadline` = min(`expires`, not_before + give-up time): past it the job bounces.
CREATE TABLE jobs (
  id           INTEGER PRIMARY KEY,
  envelope_id  TEXT NOT NULL REFERENCES outbox (envelope_id),
  domain       TEXT NOT NULL,
  recipients   TEXT NOT NULL,                   -- JSON array of addresses at `domain`
  state        TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'bounced')),
  attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt INTEGER NOT NULL,
  not_before   INTEGER NOT NULL,
  deadline     INTEGER NOT NULL,
  lease_until  INTEGER NOT NULL DEFAULT 0,
  last_error   TEXT,
  result       TEXT,                            -- JSON {delivered: [...], bounced: [{to, code, reason}]}
  created_at   INTEGER NOT NULL,
  finished_at  INTEGER,
  UNIQUE (envelope_id, domain),
  CONSTRAINT job_finished CHECK ((state = 'pending') = (finished_at IS NULL))
) STRICT;
CREATE INDEX jobs_due ON jobs (next_attempt) WHERE state = 'pending';
CREATE INDEX jobs_domain ON jobs (domain, state);

-- Destination domains that are failing: one job probes, the rest wait for it.
CREATE TABLE domain_health (
  domain        TEXT PRIMARY KEY,
  failing_since INTEGER NOT NULL,
  failures      INTEGER NOT NULL,
  next_probe    INTEGER NOT NULL,
  last_error    TEXT
) STRICT;

-- Trust on first use: the first domain key seen for a domain with no anchor.
CREATE TABLE pins (
  domain     TEXT PRIMARY KEY,
  sig        TEXT NOT NULL,
  first_seen INTEGER NOT NULL,
  pending    TEXT,                              -- a changed key, refused until confirmed
  pending_at INTEGER
) STRICT;

-- Verified cards from other houses, reused for five minutes.
CREATE TABLE card_cache (
  key        TEXT PRIMARY KEY,                  -- a domain, or an address
  card       TEXT NOT NULL,
  url        TEXT NOT NULL,
  fetched_at INTEGER NOT NULL
) STRICT;
