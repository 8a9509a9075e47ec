//! The Hub simulator, judged by the official clients and by direct HTTP checks.

mod http;
mod pacing;
mod python_client;
mod rust_client;
pub(crate) mod world;
