-- Which `serve` replica runs the scheduled audits: the holder of the `scheduler` lease, renewed while it lives
-- and taken over by another replica once it lapses. `requested_at` is an administrator's "audit now", for
-- whichever replica leads. Each run records which replica started it.
CREATE TABLE leases (
    name         TEXT    PRIMARY KEY,
    holder       TEXT    NOT NULL,
    expires_at   INTEGER NOT NULL,
    requested_at INTEGER
);
ALTER TABLE audit_runs ADD COLUMN started_by TEXT;
