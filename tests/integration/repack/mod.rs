//! The repack worker against the simulator: audit → jobs → repack → verify (MLX on the CPU) → publish, judged
//! by the official client; refusals; a worker killed at each step.

#[cfg(feature = "system-tests")]
mod ahead;
#[cfg(feature = "system-tests")]
mod disk;
#[cfg(feature = "system-tests")]
mod memory;
#[cfg(feature = "system-tests")]
mod overlap;
pub(crate) mod pipeline;
mod preflight;
#[cfg(feature = "system-tests")]
mod pull_request;
#[cfg(feature = "system-tests")]
mod recovery;
#[cfg(feature = "system-tests")]
mod runner;
#[cfg(feature = "system-tests")]
mod segments;
mod upload_share;
