-- The one note a mirrored source gets on its discussion tab (serve --note-sources), and who said no: a note
-- closed by anyone but hubalign opts its whole namespace out of further notes.
CREATE TABLE source_notes (
    source_repo  TEXT PRIMARY KEY,
    namespace    TEXT NOT NULL,
    mirror_repo  TEXT NOT NULL,
    -- The discussion's number on the source; 0 while a process that claimed the source posts it (two
    -- processes never both post); -1 when the source refused the note for good (discussions disabled, the
    -- repo gone): it is never asked again.
    num          BIGINT NOT NULL,
    posted_at    TEXT NOT NULL,
    -- When the Hub was last asked whether the note is still open: statuses are checked oldest-asked first.
    checked_at   TEXT,
    -- TRUE once the note was seen closed: the namespace said no.
    declined     BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX source_notes_namespace ON source_notes (namespace);
