-- The database's clock in unix seconds, by SQLite's name for it, so that one statement text reads the
-- database's clock on both backends. Leases, backoffs and run times are stamped and compared with it, never
-- with a process's clock. clock_timestamp(), not now(): now() stands still for a whole transaction.
CREATE OR REPLACE FUNCTION unixepoch() RETURNS BIGINT
    LANGUAGE sql VOLATILE
    AS $$ SELECT floor(extract(epoch FROM clock_timestamp()))::bigint $$;
