//! The queue's policy: what may be mirrored and how visibly, and mirrors that follow their sources.

pub mod lifecycle;
pub mod policy;
