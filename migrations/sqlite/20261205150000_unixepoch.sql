-- SQLite has unixepoch() built in (3.38 and later; the bundled library is newer). PostgreSQL gets a function
-- of that name in its migration of this version, so that one statement text reads the database's clock on
-- both backends.
SELECT unixepoch();
