-- Per-namespace sums, kept by triggers on repo_sums (which triggers on repos and shards keep in turn), so the
-- publisher table and the store-wide totals read one row per namespace. repo_sums rows are only ever
-- inserted and deleted, so adding on insert and subtracting on delete keeps the sums exact.
CREATE TABLE namespace_sums (
    namespace          TEXT    PRIMARY KEY,
    repos_audited      INTEGER NOT NULL,
    repos_affected     INTEGER NOT NULL,
    shards_aligned     INTEGER NOT NULL,
    shards_header_pad  INTEGER NOT NULL,
    shards_relayout    INTEGER NOT NULL,
    shards_invalid     INTEGER NOT NULL,
    misaligned_tensors INTEGER NOT NULL,
    misaligned_bytes   INTEGER NOT NULL
);
INSERT INTO namespace_sums
SELECT namespace, COUNT(*), SUM(misaligned_bytes > 0), SUM(shards_aligned), SUM(shards_header_pad),
       SUM(shards_relayout), SUM(shards_invalid), SUM(misaligned_tensors), SUM(misaligned_bytes)
FROM repo_sums GROUP BY namespace;

CREATE TRIGGER namespace_sums_add AFTER INSERT ON repo_sums BEGIN
    INSERT INTO namespace_sums VALUES (NEW.namespace, 1, NEW.misaligned_bytes > 0, NEW.shards_aligned,
        NEW.shards_header_pad, NEW.shards_relayout, NEW.shards_invalid, NEW.misaligned_tensors, NEW.misaligned_bytes)
    ON CONFLICT (namespace) DO UPDATE SET
        repos_audited = repos_audited + 1,
        repos_affected = repos_affected + excluded.repos_affected,
        shards_aligned = shards_aligned + excluded.shards_aligned,
        shards_header_pad = shards_header_pad + excluded.shards_header_pad,
        shards_relayout = shards_relayout + excluded.shards_relayout,
        shards_invalid = shards_invalid + excluded.shards_invalid,
        misaligned_tensors = misaligned_tensors + excluded.misaligned_tensors,
        misaligned_bytes = misaligned_bytes + excluded.misaligned_bytes;
END;
CREATE TRIGGER namespace_sums_subtract AFTER DELETE ON repo_sums BEGIN
    UPDATE namespace_sums SET
        repos_audited = repos_audited - 1,
        repos_affected = repos_affected - (OLD.misaligned_bytes > 0),
        shards_aligned = shards_aligned - OLD.shards_aligned,
        shards_header_pad = shards_header_pad - OLD.shards_header_pad,
        shards_relayout = shards_relayout - OLD.shards_relayout,
        shards_invalid = shards_invalid - OLD.shards_invalid,
        misaligned_tensors = misaligned_tensors - OLD.misaligned_tensors,
        misaligned_bytes = misaligned_bytes - OLD.misaligned_bytes
    WHERE namespace = OLD.namespace;
    DELETE FROM namespace_sums WHERE namespace = OLD.namespace AND repos_audited = 0;
END;
