-- Group repo_sums by namespace too (it depends on the repo id alone, so no row changes): SQLite then pushes a
-- namespace filter into the view and a namespace page reads that namespace's repos, not the whole store.
DROP VIEW repo_sums;
CREATE VIEW repo_sums AS
SELECT r.id AS repo, r.namespace, r.audited_sha AS sha,
       COALESCE(SUM(s.verdict = 'aligned'), 0)    AS shards_aligned,
       COALESCE(SUM(s.verdict = 'header_pad'), 0) AS shards_header_pad,
       COALESCE(SUM(s.verdict = 'relayout'), 0)   AS shards_relayout,
       COALESCE(SUM(s.verdict = 'invalid'), 0)    AS shards_invalid,
       COALESCE(SUM(s.misaligned_tensors), 0)     AS misaligned_tensors,
       COALESCE(SUM(s.misaligned_bytes), 0)       AS misaligned_bytes
FROM repos r LEFT JOIN shards s ON s.repo_id = r.id
WHERE r.state = 'ok' AND r.audited_sha IS NOT NULL
GROUP BY r.id, r.namespace;
