//! `hf-hub` 1.x (HF's Rust client) against the simulator.
