-- Per-repo sums become a table that triggers keep current, so the pages that aggregate the whole store (the
-- overview, /api/publishers, /metrics) read one row per repo instead of summing every shard on each request.
-- Triggers rather than application code keep it right for every writer, including bulk loads.
DROP VIEW repo_sums;

CREATE VIEW repo_sums_live AS
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

CREATE TABLE repo_sums (
    repo               TEXT    PRIMARY KEY,
    namespace          TEXT    NOT NULL,
    sha                TEXT    NOT NULL,
    shards_aligned     INTEGER NOT NULL,
    shards_header_pad  INTEGER NOT NULL,
    shards_relayout    INTEGER NOT NULL,
    shards_invalid     INTEGER NOT NULL,
    misaligned_tensors INTEGER NOT NULL,
    misaligned_bytes   INTEGER NOT NULL
);
INSERT INTO repo_sums SELECT * FROM repo_sums_live;
CREATE INDEX repo_sums_namespace ON repo_sums (namespace, misaligned_bytes);
CREATE INDEX repo_sums_bytes ON repo_sums (misaligned_bytes);

CREATE TRIGGER repo_sums_shard_insert AFTER INSERT ON shards BEGIN
    DELETE FROM repo_sums WHERE repo = NEW.repo_id;
    INSERT INTO repo_sums SELECT * FROM repo_sums_live WHERE repo = NEW.repo_id;
END;
CREATE TRIGGER repo_sums_shard_delete AFTER DELETE ON shards BEGIN
    DELETE FROM repo_sums WHERE repo = OLD.repo_id;
    INSERT INTO repo_sums SELECT * FROM repo_sums_live WHERE repo = OLD.repo_id;
END;
CREATE TRIGGER repo_sums_shard_update AFTER UPDATE ON shards BEGIN
    DELETE FROM repo_sums WHERE repo IN (OLD.repo_id, NEW.repo_id);
    INSERT INTO repo_sums SELECT * FROM repo_sums_live WHERE repo IN (OLD.repo_id, NEW.repo_id);
END;
CREATE TRIGGER repo_sums_repo_insert AFTER INSERT ON repos BEGIN
    DELETE FROM repo_sums WHERE repo = NEW.id;
    INSERT INTO repo_sums SELECT * FROM repo_sums_live WHERE repo = NEW.id;
END;
CREATE TRIGGER repo_sums_repo_update AFTER UPDATE OF id, namespace, state, audited_sha ON repos BEGIN
    DELETE FROM repo_sums WHERE repo IN (OLD.id, NEW.id);
    INSERT INTO repo_sums SELECT * FROM repo_sums_live WHERE repo IN (OLD.id, NEW.id);
END;
CREATE TRIGGER repo_sums_repo_delete AFTER DELETE ON repos BEGIN
    DELETE FROM repo_sums WHERE repo = OLD.id;
END;
