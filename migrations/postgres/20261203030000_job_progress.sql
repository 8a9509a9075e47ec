-- What a job's last finished step left in its directory (the download's files, the staged bundle), recorded
-- with the state it moves to, so that a later attempt on the same worker takes up the work from there. A typed
-- document (`job::payload::Progress`) read through sqlx's `Json<T>`, stored as JSONB.
ALTER TABLE jobs ADD COLUMN progress JSONB;
