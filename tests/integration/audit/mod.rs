//! `hubalign audit` against the simulator: completeness, agreement with `scan`, access states, faults,
//! interruption and incremental runs.

mod crawl;
mod faults;
pub mod world;
