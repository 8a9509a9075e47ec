//! Reads and rewrites the safetensors format. It parses headers strictly, classifies alignment, plans a
//! layout and rewrites a shard.

pub(crate) mod classify;
pub(crate) mod direct;
pub(crate) mod dtype;
pub(crate) mod error;
pub mod header;
pub mod plan;
pub(crate) mod pump;
pub mod read;
pub mod rewrite;

pub use classify::{Alignment, ShardAlignment, Verdict, classify};
pub use dtype::Dtype;
pub use error::HeaderError;
pub use header::{Header, HeaderMetadata, TensorInfo};
pub use plan::{LayoutPlan, Method};
