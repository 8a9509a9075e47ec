-- The dashboard's drill-downs: a repo's jobs, and a namespace's repos in order of what they duplicate.
CREATE INDEX jobs_repo ON jobs (repo_id);
CREATE INDEX shards_repo_bytes ON shards (repo_id, misaligned_bytes);
