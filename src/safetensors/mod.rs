//! The safetensors format: strict parsing, alignment classification, layout planning and re-layout.

pub mod classify;
pub mod direct;
pub mod dtype;
pub mod error;
pub mod header;
pub mod plan;
pub mod pump;
pub mod read;
pub mod rewrite;

pub use classify::{Alignment, ShardAlignment, Verdict, classify};
pub use dtype::Dtype;
pub use error::HeaderError;
pub use header::{Header, HeaderMetadata, TensorInfo};
pub use plan::{LayoutPlan, Method};
