-- The audit store: what each crawl did, what each repo is, what each shard needs, and when that changed.
-- Repos carry the sha they were last listed at and the sha they were last audited at; a repo whose two
-- differ is pending, which is what makes an interrupted crawl resumable.

CREATE TABLE audit_runs (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at        TEXT    NOT NULL,
    finished_at       TEXT,
    status            TEXT    NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
    endpoint          TEXT    NOT NULL,
    query             TEXT    NOT NULL,
    repos_listed      INTEGER NOT NULL DEFAULT 0,
    repos_probed      INTEGER NOT NULL DEFAULT 0,
    shards_probed     INTEGER NOT NULL DEFAULT 0,
    api_requests      INTEGER NOT NULL DEFAULT 0,
    resolver_requests INTEGER NOT NULL DEFAULT 0,
    bytes_read        INTEGER NOT NULL DEFAULT 0,
    rate_limited      INTEGER NOT NULL DEFAULT 0,
    retries           INTEGER NOT NULL DEFAULT 0,
    errors            INTEGER NOT NULL DEFAULT 0,
    error             TEXT
);

CREATE TABLE repos (
    id               TEXT PRIMARY KEY,
    namespace        TEXT    NOT NULL,
    listed_sha       TEXT,
    audited_sha      TEXT,
    last_modified    TEXT,
    private          INTEGER NOT NULL DEFAULT 0,
    gated            INTEGER NOT NULL DEFAULT 0,
    disabled         INTEGER NOT NULL DEFAULT 0,
    -- ok | gated | disabled | vanished | moved | error
    state            TEXT    NOT NULL DEFAULT 'pending',
    last_listed_run  INTEGER REFERENCES audit_runs (id),
    last_audited_run INTEGER REFERENCES audit_runs (id),
    last_audited_at  TEXT,
    last_error       TEXT
);
CREATE INDEX repos_namespace ON repos (namespace);
CREATE INDEX repos_pending ON repos (listed_sha, audited_sha);

CREATE TABLE shards (
    repo_id            TEXT    NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    path               TEXT    NOT NULL,
    sha                TEXT    NOT NULL,
    size               INTEGER NOT NULL,
    header_len         INTEGER,
    data_start         INTEGER,
    data_start_mod8    INTEGER,
    tensors            INTEGER,
    misaligned_tensors INTEGER,
    misaligned_bytes   INTEGER,
    verdict            TEXT    NOT NULL CHECK (verdict IN ('aligned', 'header_pad', 'relayout', 'invalid')),
    writer             TEXT,
    error              TEXT,
    PRIMARY KEY (repo_id, path)
);
CREATE INDEX shards_verdict ON shards (verdict);

-- One row each time a repo's audited state changes (new commit, or affected ↔ not), so the store can say
-- when a repo became affected or was fixed.
CREATE TABLE repo_history (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id          TEXT    NOT NULL,
    run_id           INTEGER NOT NULL REFERENCES audit_runs (id),
    at               TEXT    NOT NULL,
    sha              TEXT,
    state            TEXT    NOT NULL,
    affected         INTEGER NOT NULL,
    misaligned_bytes INTEGER NOT NULL
);
CREATE INDEX repo_history_repo ON repo_history (repo_id, id);

-- Per-repo sums over shards, for audited repos: what the publisher and affected reports aggregate.
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
GROUP BY r.id;
