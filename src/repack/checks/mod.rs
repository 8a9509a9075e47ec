//! The checks a repaired bundle passes before it is published.

pub mod follow;
pub mod mlx;
pub mod verify;
