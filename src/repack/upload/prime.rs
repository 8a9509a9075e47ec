//! Primes Xet deduplication before a mirror's upload.
//!
//! An uploader asks the CAS which stored chunks it may reference only for a sample of its chunks. The
//! sample holds the first chunk of each file, and chunks whose hash is 0 mod 1,024 (about one per 64 MiB).
//! Padding a header changes a shard's first chunk. So on its own, the upload sends everything up to its first
//! sampled chunk, tens of MB per shard.
//! The worker holds the source shards, whose first chunks are always in the sample. So it asks the CAS the
//! same question for each of them, with the mirror's write token. Each answer is a shard file listing the
//! source's chunks. The worker stores it in the Xet shard cache, which the upload session reads when it
//! starts. The upload then references the source's chunks from its first unchanged chunk on.

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use xet_client::cas_types::Key;
use xet_core_structures::merklehash::MerkleHash;
use xet_core_structures::metadata_shard::shard_format::current_timestamp;
use xet_core_structures::metadata_shard::streaming_shard::MDBMinimalShard;
use xet_core_structures::metadata_shard::{MDBShardFile, MDBShardInfo, get_shard_file_cache};
use xet_data::deduplication::Chunker;
use xet_data::processing::configurations::{SessionContext, TranslatorConfig};
use xet_runtime::core::XetContext;

use crate::hub::commit::{WriteTo, XetToken};
use crate::hub::{HubClient, read_capped};
use crate::repack::error::RepackError;

/// Largest global-dedup answer read: a shard's chunk list is a few MB even for the largest files.
const DEDUP_SHARD_CAP: usize = 64 << 20;

/// A CAS write token for a write `to` a repo.
pub(crate) async fn write_token(hub: &HubClient, to: WriteTo<'_>) -> Result<XetToken, RepackError> {
    hub.xet_write_token(to).await.map_err(|e| RepackError::hub(format_args!("{to}: Xet write token"), e))
}

/// What priming found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Primed {
    /// Source files asked about.
    pub asked: usize,
    /// Of those, files the CAS knew (their chunk lists are now cached for the upload).
    pub found: usize,
}

/// Caches the CAS's chunk lists of each of `sources` for the upload to `target`.
/// It uses the write token the upload already holds, so priming costs no request to the Hub's API.
/// A failure only costs deduplication, so it is logged, never raised into the job.
pub(crate) async fn prime_with(token: &XetToken, target: &str, sources: &[PathBuf]) -> Primed {
    let outcome = try_prime(token, sources.to_vec()).await;
    log_outcome(target, sources.len(), outcome)
}

/// The bytes of a file's start that hold its first content-defined chunk, whatever follows.
/// That chunk is at most 128 KiB.
const PRIME_HEAD: usize = 256 << 10;

/// Why priming stopped: the step, and its error. The upload then goes on without priming.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
struct PrimeError {
    what: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// Makes a [`PrimeError`] of what failed in `what`.
fn failed<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    what: impl std::fmt::Display,
) -> impl FnOnce(E) -> PrimeError {
    let what = what.to_string();
    move |e| PrimeError { what, source: e.into() }
}

fn log_outcome(target: &str, sources: usize, outcome: Result<Primed, PrimeError>) -> Primed {
    match outcome {
        Ok(p) => {
            tracing::info!(repo.id = %target, asked = p.asked, found = p.found, "primed Xet deduplication");
            p
        }
        Err(e) => {
            tracing::warn!(repo.id = %target, error = %e, "priming Xet deduplication failed; uploading without");
            Primed { asked: sources, found: 0 }
        }
    }
}

async fn try_prime(token: &XetToken, sources: Vec<PathBuf>) -> Result<Primed, PrimeError> {
    let ctx = XetContext::default().map_err(failed("Xet context"))?;
    // The same path hf-hub's upload session computes for this CAS.
    let session = SessionContext {
        endpoint: token.cas_url.clone(),
        auth: None,
        custom_headers: None,
        repo_paths: vec![String::new()],
        session_id: None,
        cache_root: None,
    };
    // Making the configuration makes directories, as does the cache's: both on a batch thread.
    let cache_dir = {
        let ctx = ctx.clone();
        let made = crate::blocking::run("Xet's cache directories", move || -> Result<PathBuf, PrimeError> {
            let dir = TranslatorConfig::new(&ctx, session).map_err(failed("Xet cache"))?.shard_cache_directory;
            std::fs::create_dir_all(&dir).map_err(failed(dir.display()))?;
            Ok(dir)
        });
        made.await.map_err(failed("Xet cache"))??
    };
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().map_err(failed("HTTP client"))?;
    let mut primed = Primed::default();
    for path in sources {
        primed.asked += 1;
        let what = path.display().to_string();
        let hash = crate::blocking::run("the first chunk's hash", move || first_chunk_hash(&path)).await;
        let hash = hash.map_err(failed("the first chunk's hash"))?.map_err(failed(what))?;
        let key = Key { prefix: ctx.config.data.default_prefix.clone(), hash };
        let response = http
            .get(format!("{}/v1/chunks/{key}", token.cas_url))
            .bearer_auth(&token.access_token)
            .send()
            .await
            .map_err(failed("global dedup query"))?;
        if !response.status().is_success() {
            continue;
        }
        let shard = read_capped(response, DEDUP_SHARD_CAP).await.map_err(failed("global dedup shard"))?;
        let (dir, common) = (cache_dir.clone(), ctx.common.clone());
        let cached = crate::blocking::run("caching a dedup shard", move || -> Result<(), PrimeError> {
            let shard = with_expiry(&shard).map_err(failed("global dedup shard"))?;
            MDBShardFile::write_out_from_reader(&dir, &mut Cursor::new(&shard), &get_shard_file_cache(&common))
                .map_err(failed(format_args!("caching a dedup shard in {}", dir.display())))?;
            Ok(())
        });
        cached.await.map_err(failed("caching a dedup shard"))??;
        primed.found += 1;
    }
    Ok(primed)
}

/// Stamps the shard to expire in a day, unless it already expires more than an hour from now.
/// The session's scan of its cache skips shards whose expiry has passed.
/// An unstamped shard reads as expired at time 0. The uploader's own global-dedup answers skip that scan.
fn with_expiry(shard: &[u8]) -> Result<Vec<u8>, PrimeError> {
    let footer = MDBShardInfo::load_from_reader(&mut Cursor::new(shard)).map_err(failed("its footer"))?;
    if footer.metadata.shard_key_expiry > current_timestamp() + 3600 {
        return Ok(shard.to_vec());
    }
    let minimal = MDBMinimalShard::from_reader(&mut Cursor::new(shard), false, true).map_err(failed("reading it"))?;
    let mut out = Vec::with_capacity(shard.len());
    let expiry = SystemTime::now() + Duration::from_secs(86_400);
    minimal
        .serialize_xorb_subset_with_expiry(&mut out, Some(expiry), Some(current_timestamp()), |_| true)
        .map_err(failed("stamping its expiry"))?;
    Ok(out)
}

/// The Xet hash of a file's first content-defined chunk (at most 128 KiB in).
fn first_chunk_hash(path: &Path) -> std::io::Result<MerkleHash> {
    let mut head = Vec::with_capacity(PRIME_HEAD);
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    file.take(PRIME_HEAD as u64).read_to_end(&mut head)?;
    first_chunk_of(&head, head.len() as u64 == len)
}

/// The Xet hash of the first content-defined chunk of a file that starts with `head`.
/// `whole` says the file also ends there.
fn first_chunk_of(head: &[u8], whole: bool) -> std::io::Result<MerkleHash> {
    let mut chunker = Chunker::default();
    let chunks = chunker.next_block(head, whole);
    chunks.first().map(|c| c.hash).ok_or_else(|| std::io::Error::other("empty file"))
}
