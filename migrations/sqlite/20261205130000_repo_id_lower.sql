-- Repo ids are compared as the Hub compares them, in any case: a lookup by lower(id) uses this index.
CREATE INDEX repos_id_lower ON repos (lower(id));
