-- What a job carries between its steps (the MLX check's record, the bundle staged on the Hub for the Metal
-- check) is read back as typed documents through sqlx's `Json<T>`, which PostgreSQL stores and checks as
-- JSONB. Every value written before was a JSON document serialized by the same types.
ALTER TABLE jobs
    ALTER COLUMN verification TYPE JSONB USING verification::jsonb,
    ALTER COLUMN staged TYPE JSONB USING staged::jsonb;
