//! `hubalign audit`: crawl the Hub's MLX repositories into the store.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hubalign::audit::{AuditEvent, AuditOptions, audit_until};
use hubalign::hub::listing::ListQuery;
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::{HubClient, HubConfig};
use hubalign::safetensors::Alignment;
use hubalign::untrusted;

use super::Exit;
use super::output::{bytes, count, progress};
use super::store_args::StoreArgs;

#[derive(Args)]
pub(super) struct AuditArgs {
    /// Hub endpoint [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Hub token [default: HF_TOKEN, else the token file under HF_HOME]; never logged.
    #[arg(long, value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
    /// Tag every listed repo must carry (repeatable).
    #[arg(long = "filter", value_name = "TAG", default_value = "mlx")]
    filters: Vec<String>,
    /// Only this namespace.
    #[arg(long, value_name = "NAMESPACE")]
    author: Option<String>,
    /// Only repos whose id contains this.
    #[arg(long, value_name = "TEXT")]
    search: Option<String>,
    /// Stop after listing this many repos.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Repos probed at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    concurrency: usize,
    /// Bytes asked for by each shard's first range request; a second, exact one follows only for longer headers.
    #[arg(long, default_value_t = hubalign::hub::probe::DEFAULT_PROBE_BYTES, value_name = "BYTES")]
    probe_bytes: u64,
    /// Probe every listed repo, also those already audited at their current commit.
    #[arg(long)]
    force: bool,
    /// Judge verdicts against a data start on this many bytes (a power of two up to 16384). Without it a
    /// shard is aligned when no tensor needs a copy, wherever its data starts.
    #[arg(long, value_name = "BYTES")]
    alignment: Option<Alignment>,
    /// The namespace mirrors are published to (repeatable): its repos are mirrors, never audited or counted
    /// as sources. Repos tagged `aligned-safetensors` never are, wherever they live.
    #[arg(long = "target-namespace", env = "HUBALIGN_TARGET_NAMESPACE", value_name = "NAMESPACE")]
    target_namespaces: Vec<String>,
    #[command(flatten)]
    bounds: HubBounds,
}

/// How long the Hub may hold a run: shared by `audit`, `worker` and `serve`.
#[derive(Args, Clone, Copy)]
pub(super) struct HubBounds {
    /// The longest wait the Hub may ask for (`Retry-After`, a `RateLimit` reset). A longer wait ends the run as
    /// interrupted, naming the wait, and the next run resumes.
    #[arg(long, env = "HUBALIGN_MAX_WAIT", default_value_t = hubalign::hub::DEFAULT_MAX_WAIT.as_secs(), value_name = "SECS")]
    pub max_wait: u64,
    /// The longest an audit may run. An audit that reaches it ends as interrupted, and the next run resumes.
    #[arg(long, env = "HUBALIGN_DEADLINE", default_value_t = hubalign::audit::DEFAULT_DEADLINE.as_secs(), value_name = "SECS")]
    pub deadline: u64,
}

impl HubBounds {
    /// Builds the client with the wait bound applied.
    pub(super) fn client(&self, config: HubConfig) -> anyhow::Result<HubClient> {
        Ok(HubClient::new(config, RetryPolicy::default())?.with_max_wait(Duration::from_secs(self.max_wait)))
    }

    /// Returns the audit's deadline.
    pub(super) fn deadline(&self) -> Duration {
        Duration::from_secs(self.deadline.max(1))
    }
}

pub(super) fn run(args: &AuditArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let config = super::hub_config(args.endpoint.clone(), args.token.clone())?;
        let store = args.store.open().await?;
        let client = args.bounds.client(config)?;
        let opts = AuditOptions {
            query: ListQuery {
                filters: args.filters.clone(),
                author: args.author.clone(),
                search: args.search.clone(),
                limit: args.limit,
            },
            concurrency: args.concurrency,
            probe_bytes: args.probe_bytes,
            force: args.force,
            alignment: args.alignment.unwrap_or_default(),
            deadline: args.bounds.deadline(),
            started_by: Some(format!("hubalign audit on {}", super::hostname())),
            own_namespaces: args.target_namespaces.clone(),
        };
        let bar = progress(0, "{spinner} {pos}/{len} repos, eta {eta} {wide_msg}");
        tracing::info!(endpoint = %client.endpoint(), store = %args.store.shown(), "audit started");
        let mut shards = 0u64;
        // Without a terminal (a log file, a pipe, systemd), log a progress line at most every 10 s instead of
        // drawing the bar.
        let mut said = std::time::Instant::now();
        let mut events = |event: AuditEvent| {
            match event {
                AuditEvent::Listed { pending, .. } => bar.set_length(pending),
                AuditEvent::Recorded { shards: n, .. } => {
                    shards += n;
                    bar.inc(1);
                }
            }
            let s = client.stats.snapshot();
            let line = format!(
                "{shards} shards, {} API + {} resolver requests, {} read",
                s.api_requests,
                s.resolver_requests,
                bytes(s.bytes_read)
            );
            if bar.is_hidden() && said.elapsed() >= hubalign::progress::every() {
                said = std::time::Instant::now();
                let eta = bar.eta().as_secs();
                tracing::info!(
                    repos.done = bar.position(),
                    repos.of = bar.length().unwrap_or(0),
                    eta_s = eta,
                    "audit progress: {line}"
                );
            }
            bar.set_message(line);
        };
        // Ctrl-C or SIGTERM ends the run as interrupted, with what it did recorded. Each repo is recorded in one
        // transaction, so every recorded repo is complete, and the next run resumes after them.
        let pressed = std::sync::atomic::AtomicBool::new(false);
        let ctrl_c = async {
            let signal = super::stop_signal().await;
            pressed.store(true, std::sync::atomic::Ordering::Relaxed);
            format!("stopped by {signal}; repos recorded so far are kept, and `hubalign audit` again continues")
        };
        let outcome = audit_until(&client, &store, &opts, &mut events, ctrl_c).await;
        bar.finish_and_clear();
        let summary = outcome?;
        let s = summary.stats;
        tracing::info!(
            run = summary.run_id,
            repos.probed = s.repos_probed,
            shards = s.shards_probed,
            interrupted = summary.interrupted.is_some(),
            "audit ended"
        );
        if let Some(reason) = &summary.interrupted {
            eprintln!("interrupted: {}", untrusted::escape_control(reason));
        }
        println!(
            "audit run {}: listed {}, probed {} ({}) with {} API and {} resolver requests, {} read, \
             {} waited out, {}, {} failed, {} skipped.",
            summary.run_id,
            count(s.repos_listed, "repo", "repos"),
            s.repos_probed,
            count(s.shards_probed, "shard", "shards"),
            s.api_requests,
            s.resolver_requests,
            bytes(s.bytes_read),
            count(s.rate_limited, "rate-limited answer", "rate-limited answers"),
            count(s.retries, "retry", "retries"),
            count(s.errors, "repo", "repos"),
            count(s.invalid_listings, "invalid listing entry", "invalid listing entries")
        );
        let states = store.states().await?;
        let line: Vec<String> = states.iter().map(|c| format!("{} {}", c.repos, c.state)).collect();
        println!("store: {}. See `hubalign report --by-publisher`.", line.join(", "));
        Ok(if pressed.load(std::sync::atomic::Ordering::Relaxed) {
            Exit::Interrupted
        } else if s.errors > 0 || summary.interrupted.is_some() {
            Exit::Failure
        } else {
            Exit::Clean
        })
    })
}
