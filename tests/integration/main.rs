//! All integration tests in one binary (one link instead of many).

mod api_schema;
pub mod audit;
mod card;
mod cli_fix;
mod cli_ops;
mod cli_scan;
mod dataset;
mod deploy;
mod docs;
mod findable;
mod fixtures;
mod hashing_aarch64;
mod hostile;
mod interop;
mod kernel_reads;
mod postgres;
mod properties;
mod queue;
mod rehearsal;
mod repack;
mod replicas;
mod selftest;
mod serve;
mod sim;
mod support;
mod terminal;
mod webhook;
