-- The Hub objects hubalign made, besides its mirrors (kept in `mirrors`): the public dataset repo and the
-- Collections. The service writes only into what it finds here, or what carries its marker (then recorded).
CREATE TABLE hub_objects (
    -- 'dataset' or 'collection'.
    kind        TEXT NOT NULL,
    -- The dataset's repo id or the collection's slug, lower-cased: the Hub compares them so.
    object_id   TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (kind, object_id)
);
