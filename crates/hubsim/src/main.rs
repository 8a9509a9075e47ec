//! Runs `hubsim`, which serves a directory of model repositories as a local Hugging Face Hub until
//! interrupted.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use hubsim::actions::{Action, ActionQuotas};
use hubsim::auth::TokenSpec;
use hubsim::faults::{Bucket, FaultConfig, Quota};
use hubsim::{SimConfig, start};

/// A local Hugging Face Hub for offline tests of any Hub client.
///
/// Serves `DIR/models/{namespace}/{name}/…` as model repositories. It offers the Hub's read API, downloads
/// (Git LFS and Xet), repo creation, preupload, LFS batch and NDJSON commits. So `huggingface_hub` and
/// `hf-hub` work against it unchanged with `HF_ENDPOINT` set to its address. Quotas, latency, 5xx, truncated
/// bodies and webhooks can be switched on. `GET /_sim/counters` says what was served.
#[derive(Parser)]
#[command(name = "hubsim", version)]
struct SimArgs {
    /// Directory holding `models/{namespace}/{name}/…`. Each repo may have a `.hubsim.json` sidecar with
    /// `private`, `gated`, `grantedUsers`, `disabled`, `downloads`, `likes`, `tags`, `library_name`,
    /// `license`.
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Where uploads and the Xet CAS are kept [default: DIR/.hubsim-store].
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8088)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Accept TOKEN for USER, who may write to their namespace and the ORGs listed (repeatable).
    #[arg(long = "token", value_name = "TOKEN:USER[:ORG,…][:read]")]
    tokens: Vec<TokenSpec>,
    /// Repositories per `/api/models` page (the Hub's is 1000); lower it to exercise pagination.
    #[arg(long, default_value_t = 1000)]
    page_size: usize,
    /// Entries per tree page.
    #[arg(long, default_value_t = 1000)]
    tree_page_size: usize,
    /// Requests per window and token in the `api` bucket (off by default; anonymous requests share one).
    #[arg(long, value_name = "N")]
    rate_limit_api: Option<u64>,
    /// Requests per window and token in the `resolvers` bucket (off by default).
    #[arg(long, value_name = "N")]
    rate_limit_resolvers: Option<u64>,
    /// Length of the fixed rate-limit window in seconds (the Hub's is 300).
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    rate_window: u64,
    /// Commits per user and action window (off by default). More are refused with the Hub's 429 for an action
    /// quota, which carries no rate headers.
    #[arg(long, value_name = "N")]
    commits_per_window: Option<u32>,
    /// Repo creations per user and action window (off by default).
    #[arg(long, value_name = "N")]
    repo_creations_per_window: Option<u32>,
    /// Discussions opened through `POST …/discussions` per user and action window (off by default). A pull
    /// request opened by its commit counts as a commit.
    #[arg(long, value_name = "N")]
    discussions_per_window: Option<u32>,
    /// Length of the action window in seconds (the Hub's is an hour).
    #[arg(long, default_value_t = 3600, value_name = "SECS")]
    action_window: u64,
    /// Refuse the first N repo creations with the Hub's 409 "another conflicting operation is in progress".
    #[arg(long, default_value_t = 0, value_name = "N")]
    create_conflicts: u32,
    /// Refuse the first N API requests with a 429 that carries no rate headers, as the CDN's edge does.
    #[arg(long, default_value_t = 0, value_name = "N")]
    edge_429s: u32,
    /// Latency added to every response, in milliseconds.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    latency_ms: u64,
    /// Share of requests answered with a random 500/502/503 (0 to 1).
    #[arg(long, default_value_t = 0.0, value_name = "RATE")]
    error_rate: f64,
    /// Share of successful bodies cut short mid-transfer (0 to 1).
    #[arg(long, default_value_t = 0.0, value_name = "RATE")]
    truncate_rate: f64,
    /// Cut every storage (file download) body after this many bytes, so files arrive only by resuming
    /// with ranges (0: never).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    storage_cut: u64,
    /// Answer ranged storage requests with the bytes from this many before the asked start, under the
    /// asked Content-Range: a lying CDN (0: honest).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    range_skew: u64,
    /// Send each storage (file download) answer at most this many MB per second, as a CDN limits each
    /// connection (0: as fast as it goes).
    #[arg(long, default_value_t = 0.0, value_name = "MB_PER_S")]
    storage_mbps: f64,
    /// Seed for the fault dice, so a faulty run can be replayed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Part size of multipart Git LFS uploads, in bytes.
    #[arg(long, default_value_t = 16 << 20, value_name = "BYTES")]
    lfs_part_size: u64,
    /// Serve large files from plain storage only: no embedded Xet CAS, so every client uploads by Git LFS.
    #[arg(long)]
    no_xet: bool,
    /// Also serve a synthetic population of N model repos generated from `--seed`, with no disk per repo. It
    /// has the Hub's mix of publishers, sizes, writers and layouts. `GET /_sim/population` gives its census.
    /// `POST /_sim/population/push` makes a commit, a new repo or a deletion, announced by webhook.
    #[arg(long, value_name = "N")]
    population: Option<u64>,
    /// Of the population, this many small repos in the `sample-*` namespaces list the sha256 of their
    /// bytes, so they can be downloaded and mirrored (the backfill sample).
    #[arg(long, default_value_t = 40, value_name = "N")]
    sample: u64,
    /// Hidden size of the sample's models (their shards grow with its square).
    #[arg(long, default_value_t = 256, value_name = "N")]
    sample_hidden: u64,
    /// POST the Hub's webhook payload to URL for every commit, create, delete and visibility change
    /// (repeatable). SECRET goes in `X-Webhook-Secret`. `POST /_sim/webhooks/replay` sends them all again,
    /// and `POST /_sim/webhooks/flood?n=N` sends the last one N times.
    #[arg(long = "webhook", value_name = "URL[#SECRET]")]
    webhooks: Vec<hubsim::webhooks::WebhookTarget>,
}

impl SimArgs {
    fn config(&self) -> SimConfig {
        let mut config = SimConfig::new(self.root.clone());
        config.listen = SocketAddr::new(self.bind, self.port);
        config.store = self.store.clone();
        config.tokens = self.tokens.clone();
        config.page_size = self.page_size.max(1);
        config.tree_page_size = self.tree_page_size.max(1);
        let window = Duration::from_secs(self.rate_window.max(1));
        for (bucket, limit) in [(Bucket::Api, self.rate_limit_api), (Bucket::Resolvers, self.rate_limit_resolvers)] {
            if let Some(requests) = limit {
                config.quotas.push((bucket, Quota { requests, window }));
            }
        }
        let actions = [
            (Action::Commit, self.commits_per_window),
            (Action::RepoCreate, self.repo_creations_per_window),
            (Action::Discussion, self.discussions_per_window),
        ];
        config.action_quotas = ActionQuotas {
            limits: actions.into_iter().filter_map(|(action, n)| Some((action, n?))).collect(),
            window: Duration::from_secs(self.action_window.max(1)),
        };
        config.lfs_part_size = self.lfs_part_size.max(1);
        config.xet = !self.no_xet;
        config.webhooks = self.webhooks.clone();
        config.population = self.population.map(|repos| {
            let mut population = hubsim::population::plan::PopulationConfig::new(self.seed, repos, self.sample);
            population.sample_hidden = self.sample_hidden;
            population
        });
        config.faults = FaultConfig {
            latency: Duration::from_millis(self.latency_ms),
            error_rate: self.error_rate.clamp(0.0, 1.0),
            truncate_rate: self.truncate_rate.clamp(0.0, 1.0),
            storage_cut: self.storage_cut,
            range_skew: self.range_skew,
            storage_rate: (self.storage_mbps.max(0.0) * 1e6) as u64,
            create_conflicts: self.create_conflicts,
            edge_429s: self.edge_429s,
            seed: self.seed,
            ..FaultConfig::default()
        };
        config
    }
}

fn main() -> ExitCode {
    let args = SimArgs::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hubsim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &SimArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let handle = start(args.config()).await.context("starting the simulator")?;
        let repos = handle.sim.repos().len();
        println!("hubsim: serving {repos} repositories from {} at {}", args.root.display(), handle.base_url);
        println!("  use it with:  HF_ENDPOINT={} (huggingface_hub, hf-hub, hubalign)", handle.base_url);
        println!("  storage:      {} (its own origin, as the Hub's CDN is)", handle.storage_url);
        println!("  counters:     {}/_sim/counters", handle.base_url);
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        handle.stop().await;
        Ok(())
    })
}
