//! hubsim is a local Hugging Face Hub that serves `DIR/models/{namespace}/{name}/…` as model repositories. It
//! is faithful enough that the official clients (`huggingface_hub`, `hf-hub`) work against it unchanged.
//!
//! - [`model`]: repositories as commits, branches and PR refs.
//! - [`ingest`]: reading repositories from the directory.
//! - [`read`], [`resolve`]: the read API and downloads (redirect to a range-capable storage bridge).
//! - [`write`](mod@write): repo creation, settings, preupload, LFS batch and uploads, the NDJSON commit.
//! - [`auth`], [`error`]: tokens and access; errors as the Hub sends them.
//! - [`faults`], [`counters`]: rate limits, injected faults, and what was served.
//! - [`population`]: a synthetic Hub of any size generated from a seed, with pushes during a run.

pub mod actions;
pub mod auth;
pub mod card;
pub mod clock;
pub mod collections;
pub mod counters;
pub mod digests;
pub mod error;
pub mod faults;
mod history;
pub mod ingest;
pub mod io_error;
pub mod journal;
pub mod kind;
pub mod model;
pub mod moves;
pub mod population;
pub mod query;
pub mod read;
pub mod resolve;
mod server;
pub mod webhooks;
pub mod write;
pub mod xet;
mod xet_api;

use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use axum::body::Body;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use self::auth::{Accounts, TokenSpec};
use self::counters::Counters;
use self::faults::{Bucket, FaultConfig, Faults, Quota, RateLimiter};
use self::model::{Repo, RepoMap};
use crate::io_error::PathIoError;

/// How to run the simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The directory with `models/{namespace}/{name}/…`.
    pub root: PathBuf,
    /// Where uploaded content is kept (default: `{root}/.hubsim-store`).
    pub store: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Accepted tokens.
    pub tokens: Vec<TokenSpec>,
    /// Items per `/api/models` page (the Hub's is 1000).
    pub page_size: usize,
    /// Items per tree page.
    pub tree_page_size: usize,
    /// Fixed-window quotas per bucket; none by default.
    pub quotas: Vec<(Bucket, Quota)>,
    /// Quotas per user on commits, repo creations and discussions; none by default.
    pub action_quotas: actions::ActionQuotas,
    /// Injected faults; none by default.
    pub faults: FaultConfig,
    /// Run the embedded Xet CAS: large files become Xet-backed and Xet-aware clients upload through it.
    pub xet: bool,
    /// Part size of multipart LFS uploads; objects larger than one part are uploaded in parts.
    pub lfs_part_size: u64,
    /// Where the Hub's webhook payloads go, for every change the simulator makes.
    pub webhooks: Vec<webhooks::WebhookTarget>,
    /// A synthetic population served beside the directory's repos.
    pub population: Option<population::plan::PopulationConfig>,
}

impl SimConfig {
    /// Defaults for a directory: loopback, a free port, Hub page sizes, no limits, no faults.
    pub fn new(root: PathBuf) -> SimConfig {
        SimConfig {
            root,
            store: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tokens: Vec::new(),
            page_size: 1000,
            tree_page_size: 1000,
            quotas: Vec::new(),
            action_quotas: actions::ActionQuotas::default(),
            faults: FaultConfig::default(),
            xet: true,
            lfs_part_size: 16 << 20,
            webhooks: Vec::new(),
            population: None,
        }
    }
}

/// Why the simulator could not start or ingest.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SimError {
    /// Reading the directory or the store failed.
    #[error(transparent)]
    Io(#[from] PathIoError),
    /// The embedded Xet CAS failed.
    #[error(transparent)]
    Xet(#[from] xet::XetError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

/// The simulator's shared state.
#[derive(Debug)]
pub struct Sim {
    /// `http://host:port` of the Hub, for absolute URLs in `Link` headers.
    pub base_url: String,
    /// `http://host:port` of the storage side (CDN, S3), which `resolve` redirects to.
    pub storage_url: String,
    /// The configuration.
    pub config: SimConfig,
    /// Accepted tokens.
    pub accounts: Accounts,
    repos: RwLock<RepoMap>,
    /// Dataset repositories, kept apart from the models as on the Hub.
    datasets: RwLock<RepoMap>,
    /// sha256 → file holding that content (source files in place, uploads in the store).
    blobs: RwLock<HashMap<String, PathBuf>>,
    /// Where uploads go.
    pub store: PathBuf,
    /// What was served.
    pub counters: Counters,
    /// Rate limits.
    pub limiter: RateLimiter,
    /// Quotas on actions per user.
    pub actions: actions::ActionLimiter,
    /// What clients asked of the API.
    pub journal: journal::Journal,
    /// Injected faults.
    pub faults: Faults,
    /// The embedded Xet CAS, when enabled.
    pub xet: Option<xet::XetCas>,
    /// The webhook payloads it sends.
    pub webhooks: webhooks::Webhooks,
    /// Repos renamed, whose old names redirect.
    pub moves: moves::Moves,
    /// Collections, by id.
    pub collections: collections::Collections,
    /// Files of the synthetic population, by oid, generated when read.
    synthetic: RwLock<HashMap<String, Arc<population::content::SyntheticFile>>>,
    /// The synthetic population, when there is one.
    pub population: Option<population::pushes::PopulationState>,
}

/// The simulator as handlers share it.
pub type Shared = Arc<Sim>;

impl Sim {
    /// Read access to the repositories.
    pub fn repos(&self) -> RwLockReadGuard<'_, RepoMap> {
        self.repos.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Write access to the repositories; hold it only for in-memory changes.
    pub fn repos_mut(&self) -> RwLockWriteGuard<'_, RepoMap> {
        self.repos.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Read access to the repositories of `kind`.
    pub fn repos_of(&self, kind: kind::RepoKind) -> RwLockReadGuard<'_, RepoMap> {
        match kind {
            kind::RepoKind::Model => self.repos(),
            kind::RepoKind::Dataset => self.datasets.read().unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }

    /// Write access to the repositories of `kind`; hold it only for in-memory changes.
    pub fn repos_of_mut(&self, kind: kind::RepoKind) -> RwLockWriteGuard<'_, RepoMap> {
        match kind {
            kind::RepoKind::Model => self.repos_mut(),
            kind::RepoKind::Dataset => self.datasets.write().unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }

    /// Records that `path` holds the content with this sha256.
    pub fn add_blob(&self, sha256: String, path: PathBuf) {
        self.blobs.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(sha256, path);
    }

    /// Records a synthetic file under its oid.
    pub fn add_synthetic(&self, oid: String, file: Arc<population::content::SyntheticFile>) {
        self.synthetic.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(oid, file);
    }

    fn synthetic_file(&self, oid: &str) -> Option<Arc<population::content::SyntheticFile>> {
        self.synthetic.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(oid).cloned()
    }

    fn blob_path(&self, sha256: &str) -> Option<PathBuf> {
        self.blobs.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(sha256).cloned()
    }

    /// Size of stored content, if known: a file on disk, or a Xet file.
    pub fn content_size(&self, sha256: &str) -> Option<u64> {
        if let Some(file) = self.synthetic_file(sha256) {
            return Some(file.size);
        }
        if let Some(meta) = self.blob_path(sha256).and_then(|p| std::fs::metadata(p).ok()) {
            return Some(meta.len());
        }
        self.xet.as_ref().and_then(|x| x.cached(sha256)).map(|o| o.size)
    }

    /// A body streaming `len` bytes of the content from `start`: from disk when the simulator holds the file,
    /// otherwise reconstructed from the Xet CAS.
    pub async fn content_stream(&self, sha256: &str, start: u64, len: u64) -> std::io::Result<Body> {
        if let Some(file) = self.synthetic_file(sha256) {
            if file.unverifiable(start, len) {
                self.counters.update(|c| c.unverifiable_payload_reads += 1);
            }
            return Ok(file.stream(start, len));
        }
        if let Some(path) = self.blob_path(sha256) {
            let mut file = tokio::fs::File::open(path).await?;
            file.seek(std::io::SeekFrom::Start(start)).await?;
            return Ok(Body::from_stream(tokio_util::io::ReaderStream::with_capacity(file.take(len), 256 * 1024)));
        }
        let object = self.xet.as_ref().and_then(|x| x.cached(sha256).map(|o| (x, o)));
        let Some((xet, object)) = object else {
            return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("no object {sha256}")));
        };
        xet.stream(&object, start, len).await.map_err(std::io::Error::other)
    }

    /// How an `lfsFile` with this oid is stored, if its content was uploaded: to the Xet CAS, or by Git LFS.
    pub async fn lfs_storage(&self, sha256: &str, size: u64) -> Result<Option<model::Storage>, xet::XetError> {
        if let Some(xet) = &self.xet
            && let Some(object) = xet.lookup(sha256).await?
            && object.size == size
        {
            return Ok(Some(model::Storage::Xet { xet_hash: object.xet_hash }));
        }
        Ok((self.content_size(sha256) == Some(size)).then_some(model::Storage::Lfs))
    }

    /// Re-reads the directory. New repositories appear, and a repository whose files changed gets a new
    /// commit on `main`; old commits stay addressable. Large files are ingested into the Xet CAS first, so
    /// they are Xet-backed as on today's Hub. Returns the ids that changed.
    pub async fn rescan(&self) -> Result<Vec<String>, SimError> {
        let root = self.config.root.clone();
        let disk = tokio::task::spawn_blocking(move || ingest::scan_root(&root)).await.map_err(|e| PathIoError {
            path: self.config.root.clone(),
            op: "scan",
            source: std::io::Error::other(e),
        })??;
        if let Some(xet) = &self.xet {
            let mut todo: Vec<PathBuf> = disk
                .iter()
                .flat_map(|r| &r.files)
                .filter(|f| ingest::is_lfs_path(&f.rel, f.size) && f.size > 0 && xet.cached(&f.sha256).is_none())
                .map(|f| f.abs.clone())
                .collect();
            todo.sort();
            todo.dedup();
            xet.ingest(&todo).await?;
        }
        let xet_hash = |sha: &str| self.xet.as_ref().and_then(|x| x.cached(sha)).map(|o| o.xet_hash);
        let mut changed = Vec::new();
        for found in disk {
            for f in &found.files {
                self.add_blob(f.sha256.clone(), f.abs.clone());
            }
            let mut repos = self.repos_mut();
            match repos.get_mut(&found.id) {
                Some(repo) => {
                    let head = repo.head().map(|c| (c.sha.clone(), c.files.clone()));
                    let commit = found.commit(head.as_ref().map(|(sha, _)| sha.clone()), &xet_hash);
                    if head.as_ref().is_none_or(|(_, files)| *files != commit.files) {
                        let refs = json_ref("refs/heads/main", head.as_ref().map(|(sha, _)| sha.as_str()), &commit.sha);
                        self.webhooks.send(
                            "repo.content",
                            "update",
                            &found.id,
                            found.meta.private,
                            Some(&commit.sha),
                            refs,
                        );
                        repo.refs.insert("main".into(), commit.sha.clone());
                        repo.commits.insert(commit.sha.clone(), commit);
                        changed.push(found.id.clone());
                    }
                    repo.meta = found.meta;
                }
                // A repo moved away keeps its files on disk; its old name only redirects.
                None if self.moves.new_name(&found.id).is_some() => {}
                None => {
                    let commit = found.commit(None, &xet_hash);
                    self.webhooks.send("repo", "create", &found.id, found.meta.private, Some(&commit.sha), json!({}));
                    changed.push(found.id.clone());
                    repos.insert(found.id.clone(), Repo::new(found.id, found.meta, commit));
                }
            }
        }
        Ok(changed)
    }
}

/// Builds `updatedRefs` for one ref moved from `old` to `new`. With no `old`, the ref was created.
pub(crate) fn json_ref(name: &str, old: Option<&str>, new: &str) -> serde_json::Value {
    json!({"updatedRefs": [{"ref": name, "oldSha": old, "newSha": new}]})
}

/// A running simulator.
#[derive(Debug)]
pub struct SimHandle {
    /// Where the Hub listens.
    pub addr: SocketAddr,
    /// `http://addr`: the endpoint clients use (`HF_ENDPOINT`).
    pub base_url: String,
    /// The storage side's own origin.
    pub storage_url: String,
    /// The shared state (counters, repos).
    pub sim: Shared,
    shutdown: Option<tokio::sync::watch::Sender<bool>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl SimHandle {
    /// Stops serving and waits for the server to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

/// Ingests the directory, binds the Hub and its storage origin, and starts serving on the current runtime.
pub async fn start(config: SimConfig) -> Result<SimHandle, SimError> {
    let hub = bind(config.listen).await?;
    let storage = bind(SocketAddr::new(config.listen.ip(), 0)).await?;
    let addr = hub.local_addr().map_err(|source| SimError::Bind { addr: config.listen, source })?;
    let storage_addr = storage.local_addr().map_err(|source| SimError::Bind { addr: config.listen, source })?;
    let base_url = format!("http://{addr}");
    let storage_url = format!("http://{storage_addr}");
    let store = config.store.clone().unwrap_or_else(|| config.root.join(".hubsim-store"));
    std::fs::create_dir_all(&store).map_err(PathIoError::at(&store, "create directory"))?;
    let (population, made) = match config.population.clone() {
        Some(config) => {
            let (state, made) = make_population(config).await;
            (Some(state), Some(made))
        }
        None => (None, None),
    };
    let sim = Arc::new(Sim {
        base_url: base_url.clone(),
        storage_url: storage_url.clone(),
        accounts: Accounts::new(&config.tokens),
        repos: RwLock::new(RepoMap::default()),
        datasets: RwLock::new(RepoMap::default()),
        blobs: RwLock::new(HashMap::new()),
        store: store.clone(),
        counters: Counters::default(),
        limiter: RateLimiter::new(config.quotas.clone()),
        actions: actions::ActionLimiter::new(config.action_quotas.clone()),
        journal: journal::Journal::default(),
        faults: Faults::new(config.faults),
        xet: if config.xet { Some(xet::XetCas::start(&store.join("xet")).await?) } else { None },
        webhooks: webhooks::Webhooks::new(config.webhooks.clone()),
        moves: moves::Moves::default(),
        collections: collections::Collections::default(),
        synthetic: RwLock::default(),
        population,
        config,
    });
    sim.rescan().await?;
    if let Some(made) = made {
        add_population(&sim, made);
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    let tasks = vec![
        serve(hub, server::hub_router(Arc::clone(&sim)), rx.clone()),
        serve(storage, server::storage_router(Arc::clone(&sim)), rx),
    ];
    tracing::info!(url = %base_url, storage = %storage_url, "hub simulator listening");
    Ok(SimHandle { addr, base_url, storage_url, sim, shutdown: Some(tx), tasks })
}

/// Makes the population on every core, off the runtime: its state, and its repos with their files.
async fn make_population(
    config: population::plan::PopulationConfig,
) -> (population::pushes::PopulationState, Vec<population::Made>) {
    let started = std::time::Instant::now();
    let made = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || population::make_all(&config)).await.unwrap_or_default()
    };
    let plans = made.iter().filter_map(|m| m.files.first().map(|(_, f)| Arc::clone(&f.plan))).collect();
    tracing::info!(repos = made.len(), seconds = started.elapsed().as_secs_f64(), "population made");
    (population::pushes::PopulationState::new(config, plans), made)
}

/// Adds the population's repos, files and renames to `sim`.
fn add_population(sim: &Sim, made: Vec<population::Made>) {
    let mut renames = Vec::new();
    let mut repos = sim.repos_mut();
    for m in made {
        if let Some((_, file)) = m.files.first()
            && let Some(old) = &file.plan.renamed_from
        {
            renames.push((old.clone(), file.plan.id.clone()));
        }
        for (oid, file) in m.files {
            sim.add_synthetic(oid, file);
        }
        repos.insert(m.repo.id.clone(), m.repo);
    }
    drop(repos);
    for (old, new) in renames {
        sim.moves.record(&old, &new);
    }
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, SimError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|source| SimError::Bind { addr, source })
}

fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|stop| *stop).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, "simulator server stopped");
        }
    })
}
