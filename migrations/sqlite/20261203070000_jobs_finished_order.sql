-- The newest finished jobs whatever their state, for the health check and the overview's alarm ("the last
-- jobs all failed"): read from this index's end, not by sorting every finished job.
CREATE INDEX jobs_finished ON jobs (finished_at, id);
