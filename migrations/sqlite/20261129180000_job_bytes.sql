-- What each job moved over the network, summed over its attempts, for /metrics and the job history.
ALTER TABLE jobs ADD COLUMN bytes_downloaded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN bytes_uploaded INTEGER NOT NULL DEFAULT 0;
