//! Runs the Xet side. It embeds HF's own local CAS server (`xet-client`'s `simulation` feature) in the
//! simulator. It ingests the directory's large files on the server side. It keeps the sha256 → Xet hash index
//! that commits need. It reconstructs byte ranges for the storage bridge.
//!
//! The CAS listens on a loopback port of its own. Clients reach it through the storage origin, which forwards
//! `/v1`, `/v2` and `/simulation`. The CAS builds the URLs it hands out from the `Host` header, so they come
//! back through the same door. That lets the simulator count what Xet uploads send it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axum::body::Body;
use thiserror::Error;
use xet_client::cas_client::{Client, DeletionControlableClient, DirectAccessClient, LocalClient, LocalServer};
use xet_core_structures::merklehash::MerkleHash;
use xet_data::processing::configurations::TranslatorConfig;
use xet_data::processing::{FileDownloadSession, FileUploadSession, Sha256Policy, XetFileInfo};
use xet_runtime::core::XetContext;

/// A failure inside the Xet machinery, with what was being done.
#[derive(Debug, Error)]
#[error("xet {op}: {detail}")]
pub struct XetError {
    /// What was being done.
    pub op: &'static str,
    /// The underlying error, as the Xet crates phrase it.
    pub detail: String,
}

fn xet_err<E: std::fmt::Display>(op: &'static str) -> impl FnOnce(E) -> XetError {
    move |e| XetError { op, detail: e.to_string() }
}

/// A Xet file: its hash and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XetObject {
    /// The Xet file hash (hex).
    pub xet_hash: String,
    /// Size in bytes.
    pub size: u64,
}

/// The embedded CAS and what the Hub knows about it.
pub struct XetCas {
    ctx: XetContext,
    store: Arc<LocalClient>,
    /// The CAS's own listener, `http://127.0.0.1:port`. Clients are given the storage origin instead.
    pub direct_url: String,
    work_dir: PathBuf,
    by_sha256: RwLock<HashMap<String, XetObject>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for XetCas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XetCas").field("direct_url", &self.direct_url).finish_non_exhaustive()
    }
}

impl XetCas {
    /// Opens or creates the CAS under `dir` and serves it on a loopback port. It must run on a multi-thread
    /// tokio runtime, which the Xet crates then share.
    pub async fn start(dir: &Path) -> Result<XetCas, XetError> {
        let ctx = XetContext::default().map_err(xet_err("context"))?;
        let store = LocalClient::new(ctx.clone(), dir.join("cas")).await.map_err(xet_err("open store"))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(xet_err("bind"))?;
        let port = listener.local_addr().map_err(xet_err("bind"))?.port();
        let server = LocalServer::from_client(
            store.clone() as Arc<dyn DirectAccessClient>,
            Some(store.clone() as Arc<dyn DeletionControlableClient>),
            "127.0.0.1".into(),
            port,
        );
        let (stop, stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if let Err(e) = server.serve_until_stopped(listener, stopped).await {
                tracing::error!(error = %e, "xet CAS stopped");
            }
        });
        let cas = XetCas {
            ctx,
            store,
            direct_url: format!("http://127.0.0.1:{port}"),
            work_dir: dir.join("sessions"),
            by_sha256: RwLock::new(HashMap::new()),
            _stop: stop,
        };
        cas.reindex().await?;
        Ok(cas)
    }

    /// Chunks, deduplicates and stores local files in the CAS, as the Hub's migration to Xet does. Returns
    /// each file's Xet hash.
    pub async fn ingest(&self, paths: &[PathBuf]) -> Result<Vec<XetObject>, XetError> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let config = TranslatorConfig::test_server_config(&self.ctx, &self.direct_url, &self.work_dir)
            .map_err(xet_err("configure upload"))?
            .disable_progress_aggregation();
        let session = FileUploadSession::new(Arc::new(config)).await.map_err(xet_err("start upload"))?;
        let infos = session
            .upload_files(paths.iter().map(|p| (p.clone(), Sha256Policy::Compute)))
            .await
            .map_err(xet_err("upload"))?;
        session.finalize().await.map_err(xet_err("finalize upload"))?;
        let mut out = Vec::new();
        let mut index = self.by_sha256.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for info in infos {
            let object = XetObject { size: info.file_size.unwrap_or(0), xet_hash: info.hash };
            if let Some(sha) = info.sha256 {
                index.insert(sha, object.clone());
            }
            out.push(object);
        }
        Ok(out)
    }

    /// Rebuilds the sha256 index from every file entry in the stored shards, where uploaders record each
    /// file's sha256. It picks up what clients uploaded since.
    pub async fn reindex(&self) -> Result<(), XetError> {
        let entries =
            DeletionControlableClient::list_file_shard_entries(&*self.store).await.map_err(xet_err("list files"))?;
        let mut found = HashMap::new();
        for (file_hash, _) in entries {
            let info =
                Client::get_file_reconstruction_info(&*self.store, &file_hash).await.map_err(xet_err("file info"))?;
            if let Some((info, _)) = info
                && let Some(ext) = &info.metadata_ext
            {
                found.insert(ext.sha256.hex(), XetObject { xet_hash: file_hash.hex(), size: info.file_size() });
            }
        }
        self.by_sha256.write().unwrap_or_else(std::sync::PoisonError::into_inner).extend(found);
        Ok(())
    }

    /// The Xet file with this content, looking again at the shards if it is not indexed yet.
    pub async fn lookup(&self, sha256: &str) -> Result<Option<XetObject>, XetError> {
        if let Some(hit) = self.cached(sha256) {
            return Ok(Some(hit));
        }
        self.reindex().await?;
        Ok(self.cached(sha256))
    }

    /// The indexed Xet file with this content, without touching the store.
    pub fn cached(&self, sha256: &str) -> Option<XetObject> {
        self.by_sha256.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(sha256).cloned()
    }

    /// A body reconstructing `len` bytes of the file from `start`, chunk by chunk, straight from the store.
    pub async fn stream(&self, object: &XetObject, start: u64, len: u64) -> Result<Body, XetError> {
        let session = FileDownloadSession::from_client(&self.ctx, self.store.clone() as Arc<dyn Client>, None);
        let info = XetFileInfo::new(object.xet_hash.clone(), object.size);
        let (_, stream) =
            session.download_stream_range(&info, start..start + len).await.map_err(xet_err("reconstruct"))?;
        let chunks = futures_util::stream::unfold(stream, |mut s| async move {
            match s.next().await {
                Ok(Some(bytes)) => Some((Ok::<_, std::io::Error>(bytes), s)),
                Ok(None) => None,
                Err(e) => Some((Err(std::io::Error::other(e.to_string())), s)),
            }
        });
        Ok(Body::from_stream(chunks))
    }

    /// Whether the CAS holds a file with this Xet hash (for sanity checks in tests).
    pub async fn contains(&self, xet_hash: &str) -> bool {
        match MerkleHash::from_hex(xet_hash) {
            Ok(h) => matches!(Client::get_file_reconstruction_info(&*self.store, &h).await, Ok(Some(_))),
            Err(_) => false,
        }
    }
}
