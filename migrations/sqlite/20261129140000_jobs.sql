-- The repack queue: one job per (source repo, source commit). A worker claims a job with a lease in one
-- short transaction, works outside any transaction, and records each step in another; a crashed worker's
-- job is claimed again once its lease expires, up to max_attempts with growing backoff.

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id          TEXT    NOT NULL,
    source_sha       TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'queued' CHECK (state IN (
                         'queued', 'downloading', 'relaying', 'verifying', 'awaiting_metal_verify',
                         'publishing', 'published', 'failed', 'skipped')),
    reason           TEXT,
    target_repo      TEXT,
    published_commit TEXT,
    verify_device    TEXT    NOT NULL DEFAULT 'metal',
    verification     TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 5,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    not_before       INTEGER NOT NULL DEFAULT 0,
    misaligned_bytes INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    UNIQUE (repo_id, source_sha)
);
CREATE INDEX jobs_claimable ON jobs (state, not_before);

-- Every state a job passed through, with when and why.
CREATE TABLE job_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at      TEXT    NOT NULL,
    state   TEXT    NOT NULL,
    detail  TEXT
);
CREATE INDEX job_events_job ON job_events (job_id, id);
