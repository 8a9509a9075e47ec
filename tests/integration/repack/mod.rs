//! The repack worker against the simulator: audit → jobs → repack → verify (MLX on the CPU) → publish, judged
//! by the official client; refusals; a worker killed at each step.

mod ahead;
mod disk;
mod follow;
mod memory;
mod overlap;
pub(crate) mod pipeline;
mod preflight;
mod pull_request;
mod recovery;
mod runner;
mod segments;
mod upload_share;
