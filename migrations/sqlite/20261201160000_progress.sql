-- What the dashboard tells over time: each run's Hub-wide figures when it ended, and which repos were ever
-- affected (so one that is not any more was fixed upstream).
ALTER TABLE audit_runs ADD COLUMN repos_affected_after INTEGER;
ALTER TABLE audit_runs ADD COLUMN bytes_duplicated_after INTEGER;
ALTER TABLE repos ADD COLUMN was_affected INTEGER NOT NULL DEFAULT 0;
UPDATE repos SET was_affected = 1 WHERE id IN (SELECT repo_id FROM repo_history WHERE affected = 1);
-- Runs recorded before this migration: each repo's newest history row up to the run says where it stood.
UPDATE audit_runs SET
    repos_affected_after = (
        SELECT COUNT(*) FROM repo_history h
        WHERE h.affected = 1 AND h.id = (SELECT MAX(h2.id) FROM repo_history h2 WHERE h2.repo_id = h.repo_id AND h2.run_id <= audit_runs.id)),
    bytes_duplicated_after = (
        SELECT COALESCE(SUM(h.misaligned_bytes), 0) FROM repo_history h
        WHERE h.affected = 1 AND h.id = (SELECT MAX(h2.id) FROM repo_history h2 WHERE h2.repo_id = h.repo_id AND h2.run_id <= audit_runs.id))
WHERE status != 'running';
-- The overview counts fixed-upstream repos per namespace from the few once affected, not from every repo.
CREATE INDEX repos_was_affected ON repos (namespace) WHERE was_affected = 1;
