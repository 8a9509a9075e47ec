-- `--pr` bookkeeping: the pull request a job opened on its source (`pr_num`) and what became of it
-- (`pr_status`: open, then closed or merged once the Hub confirms a webhook's word). A closed one is the
-- owner's "no": in `--pr` mode the repo's later commits are not repaired again.
ALTER TABLE jobs ADD COLUMN pr_num INTEGER;
ALTER TABLE jobs ADD COLUMN pr_status TEXT;
-- The queue reads the declined repos apart from its candidates, only in `--pr` mode: a few rows.
CREATE INDEX jobs_declined ON jobs (repo_id) WHERE pr_status = 'closed';
