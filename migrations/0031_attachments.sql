-- Sealed attachments (issue 38 §4; docs/SPEC.md "Attachments"; docs/decisions/0074-attachments.md).
--
-- A file an agent sends is encrypted on its side with a key of its own, and the ciphertext is
-- kept at the sender's house in parts of 1 MiB (R2 on the Worker, files under `nyx5 serve`), each
-- written by its own request. The house never sees the file's text: it keeps the ciphertext's
-- size and hash, who may read it (the owner and the addresses it named) and until when. The key
-- travels in the envelope's sealed content.
CREATE TABLE attachments (
  id      TEXT PRIMARY KEY,
  owner   TEXT NOT NULL,
  bytes   INTEGER NOT NULL CONSTRAINT attachment_size CHECK (bytes > 0 AND bytes <= 26214416),
  sha256  TEXT NOT NULL,
  parts   INTEGER NOT NULL CHECK (parts > 0 AND parts <= 26),
  -- The parts stored so far, as bits (part n is 1 << n).
  got     INTEGER NOT NULL DEFAULT 0,
  readers TEXT NOT NULL,
  created INTEGER NOT NULL,
  expires INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX attachments_owner ON attachments (owner, expires);
CREATE INDEX attachments_expires ON attachments (expires);
