//! `hubalign serve`: the scheduled audit, the repack workers, the dashboard and the APIs in one process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hubalign::audit::AuditOptions;
use hubalign::hub::listing::ListQuery;
use hubalign::serve::listener::Limits;
use hubalign::serve::scheduler::schedule::Schedule;
use hubalign::serve::{ServeConfig, WebhookConfig, serve};

use super::Exit;
use super::repack::{PolicyArgs, setup};
use super::worker_args::WorkerArgs;

#[derive(Args)]
pub(super) struct ServeArgs {
    /// A TOML file whose keys are these long flags without the dashes (see deploy/hubalign.toml); flags
    /// and environment variables win over it.
    #[arg(long, env = "HUBALIGN_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    worker: WorkerArgs,
    /// Address of the dashboard, the JSON API and /metrics: HOST:PORT, where HOST is an address or a name
    /// (`localhost:8080`, `[::1]:8080`, `0.0.0.0:8080`).
    #[arg(long, env = "HUBALIGN_LISTEN", default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    listen: String,
    /// Seconds from the start of one audit to the start of the next. The first audit starts at once, unless
    /// the store's last audit started less than SECS ago.
    #[arg(long, env = "HUBALIGN_INTERVAL", default_value_t = 86_400, value_name = "SECS")]
    interval: u64,
    /// Audit at the times of this cron expression instead, in UTC: five fields (`0 3 * * *`), six with
    /// seconds first, or `@daily`/`@hourly`. The first audit waits for the first of these times.
    #[arg(long, env = "HUBALIGN_CRON", value_name = "EXPR", conflicts_with = "interval")]
    cron: Option<String>,
    /// Repack workers.
    #[arg(long, env = "HUBALIGN_WORKERS", default_value_t = 1, value_name = "N")]
    workers: usize,
    /// Tag every audited repo must carry (repeatable).
    #[arg(long = "filter", value_name = "TAG", default_value = "mlx")]
    filters: Vec<String>,
    /// Only this namespace.
    #[arg(long, value_name = "NAMESPACE")]
    author: Option<String>,
    /// Repos probed at once by the audit.
    #[arg(long, default_value_t = 8, value_name = "N")]
    concurrency: usize,
    #[command(flatten)]
    policy: PolicyArgs,
    /// The macOS runners' token; without it their API is not served.
    #[arg(long, env = "HUBALIGN_RUNNER_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    runner_token: Option<String>,
    /// Most connections the dashboard's listener keeps open. At the limit, it closes the connection that has
    /// waited longest without sending a request.
    #[arg(long, env = "HUBALIGN_MAX_CONNECTIONS", default_value_t = 1024, value_name = "N")]
    max_connections: usize,
    /// Seconds a connection may take to send a complete request (after opening, or after its last answer)
    /// before it is closed.
    #[arg(long, env = "HUBALIGN_HEADER_TIMEOUT", default_value_t = 10, value_name = "SECS")]
    header_timeout: u64,
    /// The administrators' token. It enables `POST /api/admin/audit` (audit now) and
    /// `POST /api/admin/jobs/{id}/retry`, which answer only requests with `Authorization: Bearer <token>`.
    #[arg(long, env = "HUBALIGN_ADMIN_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Seconds the scheduler lease holds unrenewed. Replicas sharing a store (PostgreSQL, or one SQLite file)
    /// all serve pages and run workers. Only the lease's holder runs the scheduled audits. When it dies,
    /// another replica takes over within about this long.
    #[arg(long, env = "HUBALIGN_SCHEDULER_LEASE", default_value_t = 30, value_name = "SECS")]
    scheduler_lease: u64,
    /// Never take the scheduler lease. This replica serves the pages, the APIs and the webhook, and runs its
    /// workers. It leaves the audits to the replicas without this flag. An administrator's "audit now" sent
    /// to it waits in the store for them. Use it for replicas that only serve readers.
    #[arg(long, env = "HUBALIGN_NO_SCHEDULER")]
    no_scheduler: bool,
    /// The secret configured on the Hub's webhook. With it, serve answers `POST /api/hub/webhook`, which
    /// takes the secret in the `X-Webhook-Secret` header or a `?secret=` query parameter. The webhook reads
    /// again each repo a payload names; the scheduled audit stays the backstop. Without it, the webhook is
    /// not served.
    #[arg(long, env = "HUBALIGN_WEBHOOK_SECRET", value_name = "SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,
    /// After each audit, publish its public results to this dataset repo (NAMESPACE/NAME) as Parquet tables,
    /// as `hubalign dataset push` does. It commits only the files that changed, in one commit, and makes no
    /// commit if nothing changed.
    #[arg(long, env = "HUBALIGN_PUBLISH_DATASET", value_name = "REPO")]
    publish_dataset: Option<String>,
    /// After each audit, keep the mirror namespace's Collections in step with the public mirrors. There is
    /// one per source namespace ("Aligned MLX: NAMESPACE") and one for all ("Aligned MLX mirrors").
    #[arg(long, env = "HUBALIGN_COLLECTIONS")]
    collections: bool,
    /// After each audit, post one short note on each mirrored source's discussion tab, linking its public
    /// mirror. It never posts twice on a repo, nor on any repo of a namespace that closed a note.
    #[arg(long, env = "HUBALIGN_NOTE_SOURCES")]
    note_sources: bool,
    /// Notes on sources posted per audit at most (--note-sources); the rest wait for the next audit.
    #[arg(long, env = "HUBALIGN_MAX_NOTES", default_value_t = 20, value_name = "N")]
    max_notes: usize,
}

pub(super) fn run(args: &ServeArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let schedule = match &args.cron {
            Some(expr) => Schedule::cron(expr)?,
            None => Schedule::Every(Duration::from_secs(args.interval.max(1))),
        };
        // Bind first, so a busy address is reported before any Hub request and before the line that says
        // where it serves.
        let listener = std::net::TcpListener::bind(args.listen.as_str())
            .with_context(|| format!("cannot listen on {} (--listen, or HUBALIGN_LISTEN)", args.listen))?;
        let url = format!("http://{}/", listener.local_addr()?);
        if let Some(repo) = &args.publish_dataset {
            hubalign::untrusted::check_repo_id(repo)
                .map_err(|e| anyhow::anyhow!("--publish-dataset {repo}: {e}; give the dataset repo as NAMESPACE/NAME"))?;
        }
        let s = setup(&args.worker, false).await?;
        let publishing = args.publish_dataset.is_some() || args.collections || args.note_sources;
        if publishing && !s.hub.has_token() {
            anyhow::bail!(
                "--publish-dataset, --collections and --note-sources write to the Hub: give a token with write access (--token, HF_TOKEN)"
            );
        }
        // The dataset's namespace may differ from the mirrors', which the start-up checks judged. Report a
        // token that may not write there now, not after the first audit.
        if publishing {
            use hubalign::hub::identity::{Permission, WriteAccess};
            let who = s.hub.identity().await.context("asking the Hub who the token is")?;
            if let Some(repo) = &args.publish_dataset {
                let namespace = hubalign::untrusted::namespace_of(repo);
                if let WriteAccess::Refused(why) = who.may_write(namespace) {
                    anyhow::bail!("--publish-dataset {repo}: the token may not write to {namespace}: {why}");
                }
                // Check now, not after the first audit, that a dataset repo of that name is not someone else's.
                hubalign::dataset::push::check_destination((&s.hub, &s.store), repo)
                    .await
                    .map_err(|e| anyhow::anyhow!("--publish-dataset {repo}: {e}"))?;
            }
            // A fine-grained token holds collection and discussion rights apart from repo ones. Notes go to
            // sources in any namespace.
            let needs = [
                (args.collections, "--collections", who.may(Permission::CollectionWrite, &s.opts.target_namespace)),
                (args.note_sources, "--note-sources", who.may_everywhere(Permission::DiscussionWrite)),
            ];
            for (_, flag, access) in needs.iter().filter(|n| n.0) {
                if let WriteAccess::Refused(why) = access {
                    anyhow::bail!("{flag}: {why}; or leave {flag} off");
                }
            }
        }
        let config = ServeConfig {
            listener,
            limits: Limits {
                max_connections: args.max_connections.max(1),
                header_timeout: Duration::from_secs(args.header_timeout.max(1)),
                ..Limits::default()
            },
            schedule,
            workers: args.workers,
            audit: AuditOptions {
                query: ListQuery { filters: args.filters.clone(), author: args.author.clone(), search: None, limit: None },
                concurrency: args.concurrency,
                deadline: args.worker.bounds.deadline(),
                own_namespaces: vec![s.opts.target_namespace.clone()],
                ..AuditOptions::default()
            },
            policy: args.policy.policy(s.device, &s.opts.private_mirrors, s.opts.pull_request)?,
            repack: s.opts.clone(),
            runner_token: args.runner_token.clone(),
            admin_token: args.admin_token.clone(),
            scheduler_lease: Duration::from_secs(args.scheduler_lease.max(1)),
            schedules: !args.no_scheduler,
            after_audit: hubalign::serve::after_audit::AfterAuditConfig {
                dataset: args.publish_dataset.clone(),
                findable: (args.collections || args.note_sources).then(|| hubalign::findable::FindablePolicy {
                    owner: s.opts.target_namespace.clone(),
                    collections: args.collections,
                    notes: args.note_sources.then(|| hubalign::findable::notes::NotePolicy {
                        author: s.opts.bot_user.clone(),
                        max_per_pass: args.max_notes,
                    }),
                }),
                scratch: s.opts.work_dir.join("dataset"),
            },
            webhook: match args.webhook_secret.clone().filter(|s| !s.is_empty()) {
                Some(secret) => Some(WebhookConfig { secret, hub: args.worker.hub_client()? }),
                None => None,
            },
        };
        let workers = if args.workers == 1 { "1 worker".to_owned() } else { format!("{} workers", args.workers) };
        println!("hubalign serve: {url} (audit {}, {workers})", config.schedule.describe());
        serve(config, Arc::new(s.hub), s.store, super::stopped()).await?;
        Ok(Exit::Clean)
    })
}
