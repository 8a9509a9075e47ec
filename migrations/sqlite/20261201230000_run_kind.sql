-- What started a run: the scheduled crawl of the whole listing, or a webhook's hint about one repo. Only
-- crawls count where "the last audit" matters (the schedule, the mirrors' recheck of sources a crawl no
-- longer lists, the trend, /metrics' last-audit figures); a webhook's run records which event caused it.
ALTER TABLE audit_runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'crawl';
