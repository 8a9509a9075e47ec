//! hubalign: find safetensors shards that memory-mapping loaders must copy, and re-lay them so every tensor
//! maps in place, bit-identically.
//!
//! - [`safetensors`], strict parsing, alignment classification, layout planning, the streaming re-layout writer.
//! - [`bundle`], finding shards and bundles on disk (plain trees and Hugging Face caches).
//! - [`scan`], the audit of local files, as report data.
//! - [`fix`], repairing bundles in place or into a new directory, with the manifest.
//! - [`manifest`], the `MEI_ALIGN_MANIFEST.json` written beside repaired shards.
//! - [`untrusted`], the checks every id, commit and path from the Hub passes, and escaping for terminals.
//! - [`blocking`], how re-layout, hashing and checks stay off the async executor.

pub mod audit;
pub mod blocking;
pub mod bundle;
pub mod dataset;
pub(crate) mod error_text;
pub mod findable;
pub mod fix;
pub mod hashing;
pub mod hub;
pub(crate) mod io_error;
pub mod job;
pub mod manifest;
pub mod mirror_name;
pub mod preflight;
pub mod progress;
pub mod pull;
pub mod repack;
pub mod report;
pub mod safe_fs;
pub mod safetensors;
pub mod scan;
pub(crate) mod secret;
pub mod selftest;
pub mod serve;
pub(crate) mod sources;
pub mod store;
pub mod time;
pub mod untrusted;
pub mod webhook;
pub mod worker;
