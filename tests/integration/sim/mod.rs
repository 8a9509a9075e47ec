//! The Hub simulator, judged by the official clients and by direct HTTP checks.

mod http;
mod hub_writes;
mod oracle;
mod pacing;
mod python_client;
mod recorded;
mod rust_client;
mod strict;
pub(crate) mod world;
