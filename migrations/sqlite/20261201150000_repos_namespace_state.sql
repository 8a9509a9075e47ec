-- A namespace's page lists its repos that are not audited (gated, private, failed, invalid listing entries)
-- without reading the others.
CREATE INDEX repos_namespace_state ON repos (namespace, state);
