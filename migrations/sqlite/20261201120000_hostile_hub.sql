-- Listing entries the gate refused are stored under their escaped id with state 'invalid_listing'; each run
-- counts them.
ALTER TABLE audit_runs ADD COLUMN invalid_listings INTEGER NOT NULL DEFAULT 0;

-- Each source's one mirror, chosen once and kept: a mirror name another source holds is never reused, and a
-- mirror whose source stopped being public (private, gated, disabled, gone) is made private, saying why.
CREATE TABLE mirrors (
    target_repo   TEXT    PRIMARY KEY,
    source_repo   TEXT    NOT NULL UNIQUE,
    created_at    TEXT    NOT NULL,
    -- 1 when the mirror is (or must stay) private: its source is private (an operator's own namespace) or
    -- stopped being public.
    private       INTEGER NOT NULL DEFAULT 0,
    -- Why it was made private after publication, and when.
    hidden_reason TEXT,
    hidden_at     TEXT
);

-- Mirrors published before this table: the newest published job of each target names its source.
INSERT OR IGNORE INTO mirrors (target_repo, source_repo, created_at)
SELECT j.target_repo, j.repo_id, j.updated_at FROM jobs j
WHERE j.state = 'published' AND j.target_repo IS NOT NULL AND j.target_repo NOT LIKE '%/discussions/%'
  AND j.id = (SELECT MAX(k.id) FROM jobs k WHERE k.target_repo = j.target_repo AND k.state = 'published');
