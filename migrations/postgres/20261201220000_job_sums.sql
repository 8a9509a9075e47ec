-- Jobs per state, with the bytes they moved and how many wait for the operator, kept by a trigger as the repo
-- sums are: the dashboard and /metrics read these few rows instead of counting and summing every job. Each
-- state's figures are spread over 8 rows by job id, so concurrent writers seldom wait on one row; a change
-- of state updates its two rows in the order of their names, so two writers never wait on each other in a
-- cycle.
CREATE TABLE job_sums (
    state            TEXT    NOT NULL,
    stripe           INTEGER NOT NULL,
    jobs             BIGINT  NOT NULL DEFAULT 0,
    bytes_downloaded BIGINT  NOT NULL DEFAULT 0,
    bytes_uploaded   BIGINT  NOT NULL DEFAULT 0,
    needing_operator BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (state, stripe)
) WITH (fillfactor = 50, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0);

INSERT INTO job_sums (state, stripe, jobs, bytes_downloaded, bytes_uploaded, needing_operator)
SELECT state, CAST(id % 8 AS INTEGER), COUNT(*), SUM(bytes_downloaded), SUM(bytes_uploaded),
       SUM(CASE WHEN failure_kind = 'needs_operator' THEN 1 ELSE 0 END)
FROM jobs GROUP BY state, id % 8;

CREATE FUNCTION job_sums_add(p_state TEXT, p_stripe INTEGER, p_sign BIGINT, p_down BIGINT, p_up BIGINT,
                             p_kind TEXT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_sums AS s (state, stripe, jobs, bytes_downloaded, bytes_uploaded, needing_operator)
    VALUES (p_state, p_stripe, p_sign, p_sign * p_down, p_sign * p_up,
            CASE WHEN p_kind = 'needs_operator' THEN p_sign ELSE 0 END)
    ON CONFLICT (state, stripe) DO UPDATE SET
        jobs = s.jobs + EXCLUDED.jobs,
        bytes_downloaded = s.bytes_downloaded + EXCLUDED.bytes_downloaded,
        bytes_uploaded = s.bytes_uploaded + EXCLUDED.bytes_uploaded,
        needing_operator = s.needing_operator + EXCLUDED.needing_operator;
END $$;

CREATE FUNCTION job_sums_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM job_sums_add(NEW.state, CAST(NEW.id % 8 AS INTEGER), 1, NEW.bytes_downloaded, NEW.bytes_uploaded, NEW.failure_kind);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM job_sums_add(OLD.state, CAST(OLD.id % 8 AS INTEGER), -1, OLD.bytes_downloaded, OLD.bytes_uploaded, OLD.failure_kind);
    ELSIF OLD.state <= NEW.state THEN
        PERFORM job_sums_add(OLD.state, CAST(OLD.id % 8 AS INTEGER), -1, OLD.bytes_downloaded, OLD.bytes_uploaded, OLD.failure_kind);
        PERFORM job_sums_add(NEW.state, CAST(NEW.id % 8 AS INTEGER), 1, NEW.bytes_downloaded, NEW.bytes_uploaded, NEW.failure_kind);
    ELSE
        PERFORM job_sums_add(NEW.state, CAST(NEW.id % 8 AS INTEGER), 1, NEW.bytes_downloaded, NEW.bytes_uploaded, NEW.failure_kind);
        PERFORM job_sums_add(OLD.state, CAST(OLD.id % 8 AS INTEGER), -1, OLD.bytes_downloaded, OLD.bytes_uploaded, OLD.failure_kind);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER job_sums_keep AFTER INSERT OR DELETE OR UPDATE OF state, bytes_downloaded, bytes_uploaded, failure_kind
    ON jobs FOR EACH ROW EXECUTE FUNCTION job_sums_keep();
