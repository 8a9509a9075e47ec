-- When a job ended (published, failed or skipped), for the API and the dashboard; NULL while it runs.
ALTER TABLE jobs ADD COLUMN finished_at TEXT;
UPDATE jobs SET finished_at = updated_at WHERE state IN ('published', 'failed', 'skipped');
