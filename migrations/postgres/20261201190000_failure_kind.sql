-- What a job's last failure meant (transient, permanent, needs_operator): the queue retries, gives up, or
-- holds the job for the operator by it, and the dashboard and metrics show jobs waiting for the operator.
ALTER TABLE jobs ADD COLUMN failure_kind TEXT;
