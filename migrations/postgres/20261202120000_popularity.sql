-- What the listing says of a repo's popularity (the Hub's downloads over the last 30 days, and likes), for
-- the popularity floor a source must reach before it is mirrored.
ALTER TABLE repos ADD COLUMN downloads BIGINT NOT NULL DEFAULT 0;
ALTER TABLE repos ADD COLUMN likes BIGINT NOT NULL DEFAULT 0;
