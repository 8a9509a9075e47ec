//! Holds what hubalign's tests and benchmarks share and the product must not ship.
//!
//! - [`scratch`]: a throwaway PostgreSQL server per test process, so the store's suites run on the real
//!   thing.
//! - [`synth`]: shards laid out as MLX's writer lays them out, for property tests and multi-GiB benchmarks.

pub mod scratch;
pub mod synth;
