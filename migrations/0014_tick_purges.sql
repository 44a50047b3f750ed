-- The tick's purges, every minute, read whole tables that grow with traffic (issue 12 §5, D1
-- rows): nothing ordered them by age.
--
-- The outbox's purge looks for finished envelopes older than seven days, twice (jobs, then
-- envelopes). A house sending 5,000 envelopes a day keeps ~35,000, so ~100 M rows read a day,
-- twenty times a Free plan's allowance. With `outbox_created` it reads the rows it removes and
-- the old ones still waiting to be sent (deferred, up to 30 days), for one more row written per
-- envelope sent.
--
-- The card cache's purge drops cards past their five minutes from a table of up to 10,000 rows;
-- with `card_cache_fetched` it reads what it drops, for one more row written per card fetched
-- (at most one per sender every five minutes).
-- The email bridge's outgoing mail is forgotten seven days after it finished; the partial index
-- `email_out_finished` is written once, when an email is sent or fails.
CREATE INDEX outbox_created ON outbox (created_at);
CREATE INDEX card_cache_fetched ON card_cache (fetched_at);
CREATE INDEX email_out_finished ON email_out (finished_at) WHERE state != 'pending';

-- The authority's hourly counts (`libro_uses`, one row per money movement under a `max_per_hour`)
-- are pruned after their hour; `libro_uses_at` orders them by subject first, so the prune read
-- every row through it. `libro_uses_expiry` is one more row written per movement counted.
CREATE INDEX libro_uses_expiry ON libro_uses (at);

-- Approvals decided or expired are forgotten after a while: `libro_pending_done` finds them by
-- age (written once, when an approval is decided or expires), and `libro_pending_approvers_of`
-- finds an approval's approvers, which the table's key (approver first) could not.
CREATE INDEX libro_pending_done ON libro_pending (updated) WHERE state <> 'pending';
CREATE INDEX libro_pending_approvers_of ON libro_pending_approvers (pending);
