-- The audit store on PostgreSQL: the same tables, columns and meaning as the SQLite migrations leave, in one
-- step (no PostgreSQL store predates it). Integers are BIGINT (sizes pass 2^31), flags BOOLEAN, times TEXT
-- (RFC 3339, as on SQLite) and unix seconds. The sums that triggers keep are kept exact under concurrent
-- writers: each recompute of a repo's row locks that repo's row in `repos` first.

CREATE TABLE audit_runs (
    id                     BIGSERIAL PRIMARY KEY,
    started_at             TEXT   NOT NULL,
    finished_at            TEXT,
    status                 TEXT   NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
    endpoint               TEXT   NOT NULL,
    query                  TEXT   NOT NULL,
    repos_listed           BIGINT NOT NULL DEFAULT 0,
    repos_probed           BIGINT NOT NULL DEFAULT 0,
    shards_probed          BIGINT NOT NULL DEFAULT 0,
    api_requests           BIGINT NOT NULL DEFAULT 0,
    resolver_requests      BIGINT NOT NULL DEFAULT 0,
    bytes_read             BIGINT NOT NULL DEFAULT 0,
    rate_limited           BIGINT NOT NULL DEFAULT 0,
    retries                BIGINT NOT NULL DEFAULT 0,
    errors                 BIGINT NOT NULL DEFAULT 0,
    error                  TEXT,
    invalid_listings       BIGINT NOT NULL DEFAULT 0,
    repos_affected_after   BIGINT,
    bytes_duplicated_after BIGINT
);

CREATE TABLE repos (
    id               TEXT PRIMARY KEY,
    namespace        TEXT    NOT NULL,
    listed_sha       TEXT,
    audited_sha      TEXT,
    last_modified    TEXT,
    private          BOOLEAN NOT NULL DEFAULT FALSE,
    gated            BOOLEAN NOT NULL DEFAULT FALSE,
    disabled         BOOLEAN NOT NULL DEFAULT FALSE,
    -- ok | gated | disabled | vanished | moved | error | invalid_listing
    state            TEXT    NOT NULL DEFAULT 'pending',
    last_listed_run  BIGINT REFERENCES audit_runs (id),
    last_audited_run BIGINT REFERENCES audit_runs (id),
    last_audited_at  TEXT,
    last_error       TEXT,
    -- 1 once the repo was ever affected (an integer, as on SQLite, whose partial index matches `= 1` only)
    was_affected     BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX repos_namespace ON repos (namespace);
CREATE INDEX repos_pending ON repos (listed_sha, audited_sha);
CREATE INDEX repos_namespace_state ON repos (namespace, state);
CREATE INDEX repos_was_affected ON repos (namespace) WHERE was_affected = 1;

CREATE TABLE shards (
    repo_id            TEXT   NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    path               TEXT   NOT NULL,
    sha                TEXT   NOT NULL,
    size               BIGINT NOT NULL,
    header_len         BIGINT,
    data_start         BIGINT,
    data_start_mod8    BIGINT,
    tensors            BIGINT,
    misaligned_tensors BIGINT,
    misaligned_bytes   BIGINT,
    verdict            TEXT   NOT NULL CHECK (verdict IN ('aligned', 'header_pad', 'relayout', 'invalid')),
    writer             TEXT,
    error              TEXT,
    PRIMARY KEY (repo_id, path)
);
CREATE INDEX shards_verdict ON shards (verdict);
CREATE INDEX shards_repo_bytes ON shards (repo_id, misaligned_bytes);

CREATE TABLE repo_history (
    id               BIGSERIAL PRIMARY KEY,
    repo_id          TEXT    NOT NULL,
    run_id           BIGINT  NOT NULL REFERENCES audit_runs (id),
    at               TEXT    NOT NULL,
    sha              TEXT,
    state            TEXT    NOT NULL,
    affected         BOOLEAN NOT NULL,
    misaligned_bytes BIGINT  NOT NULL
);
CREATE INDEX repo_history_repo ON repo_history (repo_id, id);

CREATE TABLE jobs (
    id               BIGSERIAL PRIMARY KEY,
    repo_id          TEXT   NOT NULL,
    source_sha       TEXT   NOT NULL,
    state            TEXT   NOT NULL DEFAULT 'queued' CHECK (state IN (
                         'queued', 'downloading', 'relaying', 'verifying', 'awaiting_metal_verify',
                         'publishing', 'published', 'failed', 'skipped')),
    reason           TEXT,
    target_repo      TEXT,
    published_commit TEXT,
    verify_device    TEXT   NOT NULL DEFAULT 'metal',
    verification     TEXT,
    attempts         BIGINT NOT NULL DEFAULT 0,
    max_attempts     BIGINT NOT NULL DEFAULT 5,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    not_before       BIGINT NOT NULL DEFAULT 0,
    misaligned_bytes BIGINT NOT NULL DEFAULT 0,
    created_at       TEXT   NOT NULL,
    updated_at       TEXT   NOT NULL,
    bytes_downloaded BIGINT NOT NULL DEFAULT 0,
    bytes_uploaded   BIGINT NOT NULL DEFAULT 0,
    finished_at      TEXT,
    UNIQUE (repo_id, source_sha)
);
CREATE INDEX jobs_claimable ON jobs (state, not_before);
CREATE INDEX jobs_repo ON jobs (repo_id);

CREATE TABLE job_events (
    id     BIGSERIAL PRIMARY KEY,
    job_id BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at     TEXT   NOT NULL,
    state  TEXT   NOT NULL,
    detail TEXT
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE mirrors (
    target_repo   TEXT    PRIMARY KEY,
    source_repo   TEXT    NOT NULL UNIQUE,
    created_at    TEXT    NOT NULL,
    private       BOOLEAN NOT NULL DEFAULT FALSE,
    hidden_reason TEXT,
    hidden_at     TEXT
);

-- Per-repo sums over shards, for audited repos: what the publisher and affected reports aggregate.
CREATE VIEW repo_sums_live AS
SELECT r.id AS repo, r.namespace, r.audited_sha AS sha,
       COUNT(s.path) FILTER (WHERE s.verdict = 'aligned')    AS shards_aligned,
       COUNT(s.path) FILTER (WHERE s.verdict = 'header_pad') AS shards_header_pad,
       COUNT(s.path) FILTER (WHERE s.verdict = 'relayout')   AS shards_relayout,
       COUNT(s.path) FILTER (WHERE s.verdict = 'invalid')    AS shards_invalid,
       CAST(COALESCE(SUM(s.misaligned_tensors), 0) AS BIGINT) AS misaligned_tensors,
       CAST(COALESCE(SUM(s.misaligned_bytes), 0) AS BIGINT)   AS misaligned_bytes
FROM repos r LEFT JOIN shards s ON s.repo_id = r.id
WHERE r.state = 'ok' AND r.audited_sha IS NOT NULL
GROUP BY r.id, r.namespace;

CREATE TABLE repo_sums (
    repo               TEXT   PRIMARY KEY,
    namespace          TEXT   NOT NULL,
    sha                TEXT   NOT NULL,
    shards_aligned     BIGINT NOT NULL,
    shards_header_pad  BIGINT NOT NULL,
    shards_relayout    BIGINT NOT NULL,
    shards_invalid     BIGINT NOT NULL,
    misaligned_tensors BIGINT NOT NULL,
    misaligned_bytes   BIGINT NOT NULL
);
-- Every shard written rewrites its repo's row here and its namespace's row below: room in each page for the
-- new versions (HOT updates) and a vacuum after every thousand dead rows keep these small tables small.
ALTER TABLE repo_sums SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
CREATE INDEX repo_sums_namespace ON repo_sums (namespace, misaligned_bytes);
CREATE INDEX repo_sums_bytes ON repo_sums (misaligned_bytes);

CREATE TABLE namespace_sums (
    namespace          TEXT   PRIMARY KEY,
    repos_audited      BIGINT NOT NULL,
    repos_affected     BIGINT NOT NULL,
    shards_aligned     BIGINT NOT NULL,
    shards_header_pad  BIGINT NOT NULL,
    shards_relayout    BIGINT NOT NULL,
    shards_invalid     BIGINT NOT NULL,
    misaligned_tensors BIGINT NOT NULL,
    misaligned_bytes   BIGINT NOT NULL
);
ALTER TABLE namespace_sums SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

-- Recomputes one repo's row from its shards. Two transactions writing the same repo's shards take turns (the
-- row lock lasts to each one's commit), and the second reads the first's committed shards, so the row is
-- exact. A row lock rather than an advisory one: row locks live in the rows, so a transaction that writes
-- 50,000 repos (an import, a listing) does not fill the server's lock table.
CREATE FUNCTION refresh_repo_sums(repo_id TEXT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM repos WHERE id = repo_id FOR UPDATE;
    DELETE FROM repo_sums WHERE repo = repo_id;
    INSERT INTO repo_sums SELECT * FROM repo_sums_live WHERE repo = repo_id;
END $$;

CREATE FUNCTION repo_sums_after_shard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM refresh_repo_sums(OLD.repo_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND (TG_OP = 'INSERT' OR NEW.repo_id IS DISTINCT FROM OLD.repo_id) THEN
        PERFORM refresh_repo_sums(NEW.repo_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER repo_sums_shard AFTER INSERT OR UPDATE OR DELETE ON shards
    FOR EACH ROW EXECUTE FUNCTION repo_sums_after_shard();

CREATE FUNCTION repo_sums_after_repo() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM refresh_repo_sums(OLD.id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND (TG_OP = 'INSERT' OR NEW.id IS DISTINCT FROM OLD.id) THEN
        PERFORM refresh_repo_sums(NEW.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER repo_sums_repo_write AFTER INSERT OR DELETE ON repos
    FOR EACH ROW EXECUTE FUNCTION repo_sums_after_repo();
CREATE TRIGGER repo_sums_repo_update AFTER UPDATE OF id, namespace, state, audited_sha ON repos
    FOR EACH ROW EXECUTE FUNCTION repo_sums_after_repo();

-- Per-namespace sums, kept by triggers on repo_sums: rows there are only inserted and deleted, so adding on
-- insert and subtracting on delete keeps the sums exact (the upsert and the update are each atomic).
CREATE FUNCTION namespace_sums_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO namespace_sums VALUES (NEW.namespace, 1, CASE WHEN NEW.misaligned_bytes > 0 THEN 1 ELSE 0 END,
            NEW.shards_aligned, NEW.shards_header_pad, NEW.shards_relayout, NEW.shards_invalid,
            NEW.misaligned_tensors, NEW.misaligned_bytes)
        ON CONFLICT (namespace) DO UPDATE SET
            repos_audited = namespace_sums.repos_audited + 1,
            repos_affected = namespace_sums.repos_affected + excluded.repos_affected,
            shards_aligned = namespace_sums.shards_aligned + excluded.shards_aligned,
            shards_header_pad = namespace_sums.shards_header_pad + excluded.shards_header_pad,
            shards_relayout = namespace_sums.shards_relayout + excluded.shards_relayout,
            shards_invalid = namespace_sums.shards_invalid + excluded.shards_invalid,
            misaligned_tensors = namespace_sums.misaligned_tensors + excluded.misaligned_tensors,
            misaligned_bytes = namespace_sums.misaligned_bytes + excluded.misaligned_bytes;
    ELSE
        UPDATE namespace_sums SET
            repos_audited = repos_audited - 1,
            repos_affected = repos_affected - CASE WHEN OLD.misaligned_bytes > 0 THEN 1 ELSE 0 END,
            shards_aligned = shards_aligned - OLD.shards_aligned,
            shards_header_pad = shards_header_pad - OLD.shards_header_pad,
            shards_relayout = shards_relayout - OLD.shards_relayout,
            shards_invalid = shards_invalid - OLD.shards_invalid,
            misaligned_tensors = misaligned_tensors - OLD.misaligned_tensors,
            misaligned_bytes = misaligned_bytes - OLD.misaligned_bytes
        WHERE namespace = OLD.namespace;
        DELETE FROM namespace_sums WHERE namespace = OLD.namespace AND repos_audited = 0;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER namespace_sums_follow AFTER INSERT OR DELETE ON repo_sums
    FOR EACH ROW EXECUTE FUNCTION namespace_sums_follow();
