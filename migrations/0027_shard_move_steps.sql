-- A mailbox move in steps (issue 36 §3; docs/decisions/0060-mailbox-shards.md, "Moves in
-- steps"): the move under way keeps, on the primary, where it came from, how far its copy got
-- (`cursor`: the last envelope id copied, in id order; NULL until the source is frozen), how many
-- envelope rows it copied, and the lease of the step working it (milliseconds; 0: none), so that
-- each request or tick advances it by a bounded step from where the last one stopped.
ALTER TABLE shard_moves ADD COLUMN from_shard INTEGER;
ALTER TABLE shard_moves ADD COLUMN cursor TEXT;
ALTER TABLE shard_moves ADD COLUMN copied INTEGER NOT NULL DEFAULT 0;
ALTER TABLE shard_moves ADD COLUMN lease INTEGER NOT NULL DEFAULT 0;
-- A target's copy is sealed (1) by the step that finishes it, just before the flip: the move's
-- copy writes there are guarded on 0, so a step that lost its lease writes nothing onto the
-- live mailbox.
ALTER TABLE shard_incoming ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1));
-- Where the copy of the rest stands once the rows are (`phase`: 1 acknowledgments, 2 lists,
-- 3 markers, 4 done; `mark`: the last key copied in it, a JSON array), or, before the source's
-- hand-offs are all settled, the last one's rowid: each step copies a bounded part.
ALTER TABLE shard_moves ADD COLUMN phase INTEGER NOT NULL DEFAULT 0;
ALTER TABLE shard_moves ADD COLUMN mark TEXT;
-- When the tick steps the move next (seconds): each step puts it behind the others, a failed one
-- further (one failing move never holds the others up). The hand-offs of a moving mailbox wait
-- for its end (made due then), never taken up by the settle meanwhile.
ALTER TABLE shard_moves ADD COLUMN next_try INTEGER NOT NULL DEFAULT 0;
