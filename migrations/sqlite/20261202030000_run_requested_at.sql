-- When the webhook payload behind a webhook's run arrived (the earliest of the payloads its queued hint
-- stands for): the lag to the mirror's publication counts from there, its wait in the queue included.
-- NULL for crawls, which nothing requests.
ALTER TABLE audit_runs ADD COLUMN requested_at TEXT;
