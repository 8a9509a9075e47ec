//! The Hub simulator, judged by the official clients and by direct HTTP checks.

mod http;
mod hub_writes;
#[cfg(feature = "system-tests")]
mod oracle;
mod pacing;
#[cfg(feature = "system-tests")]
mod python_client;
mod recorded;
mod rust_client;
mod strict;
pub(crate) mod world;
