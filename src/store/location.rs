//! Where a store lives, as `--db` or `DATABASE_URL` give it. It is a SQLite file, a PostgreSQL server
//! (`postgres://…`), or SQLite in memory for tests. A SQLite file is a path, `sqlite:PATH` or
//! `sqlite://PATH`, as sqlx reads `DATABASE_URL`. Any other scheme is refused: `mysql://host/db` taken for a
//! file name would make a directory called `mysql:` and a store nobody asked for.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A store's location, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A SQLite database in memory (`sqlite::memory:`), gone with the process.
    Memory,
    /// A PostgreSQL server's URL (`postgres://` or `postgresql://`).
    Postgres(String),
}

/// Why a location was refused. Each variant says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// A URL whose scheme is neither SQLite's nor PostgreSQL's.
    #[error(
        "`{scheme}:` is not a store hubalign can use: give a SQLite file (a path, or sqlite:PATH) or a PostgreSQL \
         server (postgres://user@host/db)"
    )]
    Scheme {
        /// The scheme given.
        scheme: String,
    },
    /// `sqlite:` with no path after it.
    #[error("`{0}` names no file: write sqlite:PATH (sqlite:/srv/hubalign/hubalign.db) or the path alone")]
    NoPath(String),
    /// `sqlite:PATH?options`, with options that hubalign sets itself (WAL, synchronous, foreign keys).
    #[error("`{0}`: hubalign sets the SQLite options itself; give the path without `?…`")]
    Options(String),
}

impl FromStr for Location {
    type Err = LocationError;

    fn from_str(given: &str) -> Result<Location, LocationError> {
        if given.starts_with("postgres://") || given.starts_with("postgresql://") {
            return Ok(Location::Postgres(given.to_owned()));
        }
        if given == "sqlite::memory:" || given == "sqlite://:memory:" {
            return Ok(Location::Memory);
        }
        if let Some(rest) = given.strip_prefix("sqlite://").or_else(|| given.strip_prefix("sqlite:")) {
            if rest.contains('?') {
                return Err(LocationError::Options(given.to_owned()));
            }
            if rest.is_empty() {
                return Err(LocationError::NoPath(given.to_owned()));
            }
            return Ok(Location::Sqlite(PathBuf::from(rest)));
        }
        if let Some(scheme) = url_scheme(given) {
            return Err(LocationError::Scheme { scheme: scheme.to_owned() });
        }
        Ok(Location::Sqlite(PathBuf::from(given)))
    }
}

/// Returns the scheme of `text` if it reads as a URL: `scheme://…`, with the scheme as RFC 3986 spells one.
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then_some(scheme)
}

/// Shows the location without a PostgreSQL password, so it may go in messages and logs.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Memory => f.write_str("sqlite::memory:"),
            Location::Postgres(url) => f.write_str(&super::redact_url(url)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Location, LocationError> {
        text.parse()
    }

    #[test]
    fn sqlite_urls_name_the_file_they_say_as_sqlx_reads_them() {
        for (given, file) in [
            ("sqlite:/srv/hubalign/x.db", "/srv/hubalign/x.db"),
            ("sqlite:///srv/hubalign/x.db", "/srv/hubalign/x.db"),
            ("sqlite:x.db", "x.db"),
            ("sqlite://x.db", "x.db"),
            ("/srv/hubalign/x.db", "/srv/hubalign/x.db"),
            ("relative/x.db", "relative/x.db"),
            // A colon without `//` is a file name, as it is to the shell.
            ("odd:name.db", "odd:name.db"),
        ] {
            assert_eq!(parsed(given), Ok(Location::Sqlite(file.into())), "{given}");
        }
        assert_eq!(parsed("sqlite::memory:"), Ok(Location::Memory));
    }

    #[test]
    fn postgres_urls_are_servers_and_other_schemes_are_refused_with_what_is_accepted() {
        for url in ["postgres://u@h/db", "postgresql://u:pw@h:5432/db?sslmode=require"] {
            assert_eq!(parsed(url), Ok(Location::Postgres(url.to_owned())));
        }
        for (url, scheme) in [("mysql://u@h/db", "mysql"), ("postgress://h/db", "postgress"), ("file:///x.db", "file")]
        {
            let refused = parsed(url).unwrap_err();
            assert_eq!(refused, LocationError::Scheme { scheme: scheme.to_owned() });
            assert!(refused.to_string().contains("sqlite:PATH") && refused.to_string().contains("postgres://"));
        }
        assert_eq!(parsed("sqlite:"), Err(LocationError::NoPath("sqlite:".into())));
        assert!(matches!(parsed("sqlite:x.db?mode=ro"), Err(LocationError::Options(_))));
    }

    #[test]
    fn a_server_is_shown_without_its_password() {
        let shown = parsed("postgres://hubalign:s3cret@db/hubalign").unwrap().to_string();
        assert!(!shown.contains("s3cret") && shown.contains("db/hubalign"), "{shown}");
    }
}
