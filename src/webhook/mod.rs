//! Hub webhooks as hints. A push, a deletion, a move or a visibility change in a watched namespace names a
//! repo. The service reads that repo again now, rather than at the next scheduled crawl. Payloads are parsed
//! strictly ([`payload`]) and wait in a bounded queue with one entry per repo ([`queue`]).

pub mod payload;
pub mod queue;
