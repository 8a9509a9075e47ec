//! All integration tests in one binary (one link instead of many), in two tiers.
//!
//! Tier 1 (`cargo test`) needs only Rust. Tier 2 (the feature `system-tests`, which `bash tests/run.sh` turns
//! on with `--all-features`) adds the tests that drive what `tests/run.sh` installs: the Python venv with MLX
//! and the official clients, PostgreSQL, Chromium, strace, systemd-analyze, faketime, qemu and the deploy
//! linters. A tier-2 test is marked `#[cfg(feature = "system-tests")]`, or its whole module is.
// Tier 1 compiles the helpers that only tier-2 tests call.
#![cfg_attr(not(feature = "system-tests"), allow(dead_code, unused_imports))]

mod api_schema;
pub mod audit;
mod card;
mod cli_fix;
mod cli_ops;
mod cli_scan;
mod dataset;
mod deploy;
mod docs;
#[cfg(feature = "system-tests")]
mod findable;
mod fixtures;
#[cfg(feature = "system-tests")]
mod hashing_aarch64;
mod hostile;
#[cfg(feature = "system-tests")]
mod interop;
mod kernel_reads;
#[cfg(feature = "system-tests")]
mod next_step;
mod postgres;
mod properties;
mod queue;
#[cfg(feature = "system-tests")]
mod rehearsal;
mod repack;
#[cfg(feature = "system-tests")]
mod replicas;
mod rules;
mod selftest;
mod serve;
mod sim;
mod support;
mod terminal;
#[cfg(feature = "system-tests")]
mod webhook;
#[cfg(feature = "system-tests")]
mod wheel;
