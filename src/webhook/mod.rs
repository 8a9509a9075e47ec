//! Hub webhooks as hints: a push, a deletion, a move or a visibility change in a watched namespace tells the
//! service which repo to read again now, rather than at the next scheduled crawl. Payloads are parsed
//! strictly ([`payload`]) and wait in a bounded queue with one entry per repo ([`queue`]).

pub mod payload;
pub mod queue;
