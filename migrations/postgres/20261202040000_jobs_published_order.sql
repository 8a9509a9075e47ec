-- The newest publications first: the webhook lag (`/metrics`, the overview) walks them from the newest and
-- stops at the first a webhook's re-read led to, instead of joining every published job to its history.
CREATE INDEX jobs_published ON jobs (state, finished_at, id);
-- Runs of one kind in order: the first webhook run (before which no publication was led by one) and the
-- newest crawls, without walking the runs of the other kind.
CREATE INDEX audit_runs_kind ON audit_runs (kind, id);
