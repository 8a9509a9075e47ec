//! `hubalign repack` (one bundle by hand) and `hubalign worker` (the queue): the same pipeline.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use hubalign::hub::HubClient;
use hubalign::job::VerifyDevice;
use hubalign::job::{FailureKind, Job, JobState};
use hubalign::repack::metal::rendezvous::HubRunner;
use hubalign::repack::metal::runner;
use hubalign::repack::metal::{CheckSetup, Rendezvous, check_once};
use hubalign::repack::queue::lifecycle::reconcile_then_enqueue;
use hubalign::repack::queue::policy::{
    DEFAULT_MIN_DOWNLOADS, DEFAULT_MIN_LIKES, EnqueuePolicy, NameFilters, Names, Popularity, PrivateMirrors,
};
use hubalign::repack::{CheckAhead, RepackOptions, Repacker};
use hubalign::serve::Health;
use hubalign::serve::listener::Limits;
use hubalign::serve::runner_api::{self, RunnerApi};
use hubalign::serve::service::Service;
use hubalign::serve::workers::Workers;
use hubalign::store::mirrors::MirrorCaps;
use hubalign::untrusted;
use hubalign::worker::WhenIdle;
use hubalign::worker::{Heartbeat, Recorded};

use super::preflight;
use super::worker_args::WorkerArgs;
use super::{Exit, UsageError};

#[derive(Args)]
pub(super) struct RepackArgs {
    /// The source repository, `namespace/name`.
    #[arg(value_name = "REPO")]
    repo: String,
    /// The source commit [default: the head of `main`].
    #[arg(long, value_name = "SHA")]
    revision: Option<String>,
    #[command(flatten)]
    worker: WorkerArgs,
}

/// Which affected repos become jobs: shared by `worker` and `serve`.
#[derive(Args)]
pub(super) struct PolicyArgs {
    /// Only repos a copying loader duplicates at least this many GB of become jobs.
    #[arg(long, default_value_t = 0.0, value_name = "GB")]
    min_gb: f64,
    /// Only these publishers become jobs (repeatable; all when absent).
    #[arg(long = "include", value_name = "NS")]
    include: Vec<String>,
    /// Never these publishers (repeatable).
    #[arg(long = "skip", value_name = "NS")]
    skip: Vec<String>,
    /// A file of owners or repos that opted out, one per line (`#` starts a comment).
    #[arg(long, value_name = "FILE")]
    opt_out: Option<PathBuf>,
    /// The popularity floor: a source becomes a job once the Hub counts this many downloads of it over 30
    /// days, or `--min-likes` likes. The floor keeps a stranger's push, or a flood of them, from being
    /// republished.
    #[arg(long, default_value_t = DEFAULT_MIN_DOWNLOADS, value_name = "N")]
    min_downloads: i64,
    /// The popularity floor's likes, as `--min-downloads`.
    #[arg(long, default_value_t = DEFAULT_MIN_LIKES, value_name = "N")]
    min_likes: i64,
    /// A publisher whose repos need no popularity floor (repeatable).
    #[arg(long = "trusted-publisher", value_name = "NS", default_value = "mlx-community")]
    trusted_publishers: Vec<String>,
}

impl PolicyArgs {
    /// Builds the policy, reading the opt-out file.
    pub(super) fn policy(
        &self,
        device: VerifyDevice,
        private_mirrors: &PrivateMirrors,
        pull_requests: bool,
    ) -> anyhow::Result<EnqueuePolicy> {
        Ok(EnqueuePolicy {
            min_bytes: (self.min_gb * 1e9) as i64,
            include: self.include.iter().collect(),
            skip: self.skip.iter().collect(),
            opt_out: self.opt_out.as_ref().map(read_opt_out).transpose()?.unwrap_or_default(),
            verify_device: device,
            private_mirrors: private_mirrors.clone(),
            pull_requests,
            popularity: Popularity {
                min_downloads: self.min_downloads,
                min_likes: self.min_likes,
                trusted: self.trusted_publishers.iter().collect(),
            },
        })
    }
}

#[derive(Args)]
pub(super) struct WorkerLoopArgs {
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Run the jobs there are and exit, instead of polling for more.
    #[arg(long)]
    once: bool,
    /// Only run jobs. Leave queueing the audit's affected repos and checking the mirrors' sources to
    /// `serve`'s scheduler. Use it for many worker hosts beside `serve` replicas on one PostgreSQL store.
    #[arg(long)]
    drain_only: bool,
    /// Serve the macOS runners' API on this address: HOST:PORT, where HOST is an address or a name. Runners
    /// claim a job waiting for the Metal check there, fetch its shards and post the result.
    #[arg(long, value_name = "HOST:PORT", requires = "runner_token")]
    runner_listen: Option<String>,
    /// The token runners must present.
    #[arg(long, env = "HUBALIGN_RUNNER_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    runner_token: Option<String>,
    /// Serve `GET /healthz` on this address (HOST:PORT), answered as `serve` answers it. Use it for a probe
    /// such as Kubernetes or a load balancer.
    #[arg(long, env = "HUBALIGN_HEALTH_LISTEN", value_name = "HOST:PORT")]
    health_listen: Option<String>,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("rendezvous").required(true).args(["service", "db"]))]
pub(super) struct RunnerArgs {
    /// The service that serves the runner API (`hubalign worker --runner-listen`), for jobs staged on a
    /// worker.
    #[arg(long, value_name = "URL")]
    service: Option<String>,
    /// The runner token, with `--service` (the `--runner-token` of `worker` and `serve`).
    #[arg(long, env = "HUBALIGN_RUNNER_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    runner_token: Option<String>,
    /// Claim through this store instead: a `postgres://` URL, or the SQLite file on one machine. The runner
    /// then takes jobs that workers staged on the Hub (`--metal-handoff hub`) and downloads them from the
    /// Hub. Nothing needs to reach this runner.
    #[arg(long, value_name = "PATH|URL")]
    db: Option<hubalign::store::Location>,
    /// Hub endpoint, with `--db` [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Hub token that may read the target namespace's private repos, with `--db` [default: HF_TOKEN, else
    /// the token file under HF_HOME]; never logged. `--hub-token`, its former name, still works.
    #[arg(long, alias = "hub-token", value_name = "TOKEN")]
    token: Option<String>,
    /// Seconds a check may take before another runner may take the job, with `--db`.
    #[arg(long, default_value_t = 1800, value_name = "SECS")]
    lease_secs: u64,
    /// Python with `mlx` installed.
    #[arg(long, env = "HUBALIGN_PYTHON", default_value = "python3", value_name = "PYTHON")]
    python: PathBuf,
    /// Where MLX runs the check: `metal` (the GPU of Apple silicon), or `cpu` (standing in for it, in tests).
    /// These are the values of the workers' `--verify-device`. `--device gpu|cpu`, its former spelling,
    /// still works.
    #[arg(long, alias = "device", value_enum, default_value = "metal")]
    verify_device: RunnerDevice,
    /// This runner's name in the jobs' history.
    #[arg(long, default_value = "macos-runner")]
    name: String,
    /// Check the jobs there are and exit, instead of polling for more.
    #[arg(long)]
    once: bool,
}

/// Where the runner's MLX check runs.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum RunnerDevice {
    /// The Metal GPU.
    #[value(alias = "gpu")]
    Metal,
    /// The CPU.
    Cpu,
}

impl RunnerDevice {
    /// Returns the device as the check script names it.
    fn mlx(self) -> &'static str {
        match self {
            RunnerDevice::Metal => "gpu",
            RunnerDevice::Cpu => "cpu",
        }
    }
}

pub(super) struct Setup {
    pub(super) hub: HubClient,
    pub(super) store: hubalign::store::Store,
    pub(super) opts: RepackOptions,
    pub(super) device: VerifyDevice,
    /// The first job's MLX check, if the checks at start started it.
    pub(super) check_ahead: CheckAhead,
}

/// Runs the start-up checks (`preflight`), then builds what every job of this process shares. A failed check
/// stops here, before any job is claimed. Once all checks pass, jobs held for the operator are released.
/// With `start_check_ahead`, the checks start the first job's MLX check too (see `CheckAhead`).
pub(super) async fn setup(args: &WorkerArgs, start_check_ahead: bool) -> anyhow::Result<Setup> {
    if let Some(namespace) = &args.target_namespace {
        untrusted::check_namespace(namespace).map_err(|e| UsageError(format!("--target-namespace: {e}")))?;
    }
    let hub = args.bounds.client(super::hub_config(args.endpoint.clone(), args.token.clone())?)?;
    let mut checked = preflight::check_worker(args, &hub, start_check_ahead).await;
    let check_ahead = std::mem::replace(&mut checked.check_ahead, CheckAhead::none());
    match set_up(args, hub, checked).await {
        Ok(s) => Ok(Setup { check_ahead, ..s }),
        Err(e) => {
            check_ahead.end().await;
            Err(e)
        }
    }
}

/// Builds what every job shares once the checks at start have run, or says why they stop the start.
async fn set_up(args: &WorkerArgs, hub: HubClient, checked: preflight::Checked) -> anyhow::Result<Setup> {
    preflight::stop_unless_passed(&checked.report)?;
    let (Some((user, target_namespace)), Some(store)) = (checked.who, checked.store) else {
        bail!("the checks passed without naming the token's user or opening the store")
    };
    // `target_namespace` is `--target-namespace`, checked above, or the token's user, which `hub::identity`
    // checked as it read it.
    // Held jobs wait for the operator to mend the configuration. Only a worker whose interpreter was checked
    // releases them.
    if checked.report.passed_check("python") {
        let released = store.release_holds().await?;
        if released > 0 {
            tracing::info!(jobs = released, "the checks passed: jobs held for the operator are released");
        }
    }
    let (work_dir, mlx_script) = (checked.work_dir, checked.mlx_script);
    // Write this build's script if the checks did not run it, so a script left by an older build never runs.
    // If they did, it is there, and a check started ahead may still be reading it.
    if !checked.report.passed_check("python") {
        hubalign::safe_fs::write_atomic(&mlx_script, preflight::VERIFY_MLX.as_bytes())
            .with_context(|| format!("writing {}", mlx_script.display()))?;
    }
    let device = VerifyDevice::from(args.verify_device);
    let opts = RepackOptions {
        target_namespace: target_namespace.clone(),
        work_dir,
        python: args.python.clone(),
        mlx_script,
        alignment: args.alignment.unwrap_or_default(),
        worker: format!("{}-{}", super::hostname(), std::process::id()),
        lease: Duration::from_secs(args.lease_secs.max(1)),
        stop_grace: Duration::from_secs(args.stop_grace_secs),
        pull_request: args.pr,
        bot_user: user,
        max_bundle_bytes: (args.max_bundle_gb.max(0.0) * 1e9) as u64,
        private_mirrors: PrivateMirrors(args.private_mirrors.then(|| target_namespace.clone())),
        download_connections: args.download_connections.clamp(1, 64),
        metal_handoff: args.metal_handoff,
        caps: MirrorCaps { per_namespace: args.max_new_mirrors_per_namespace, total: args.max_new_mirrors },
    };
    Ok(Setup { hub, store, opts, device, check_ahead: CheckAhead::none() })
}

fn exit_for(job: &Job) -> Exit {
    match job.state {
        JobState::Published | JobState::Skipped | JobState::AwaitingMetalVerify => Exit::Clean,
        JobState::Queued if job.failure_kind == Some(FailureKind::NeedsOperator) => Exit::NeedsOperator,
        _ => Exit::Failure,
    }
}

pub(super) fn run_repack(args: &RepackArgs) -> anyhow::Result<Exit> {
    hubalign::blocking::run_as_batch("the repack command");
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        // Listen for signals from the start. SIGTERM or Ctrl-C lets the job in hand finish within the grace
        // period, then releases it.
        let mut signal = tokio::spawn(super::stop_signal());
        untrusted::check_repo_id(&args.repo).map_err(|e| UsageError(format!("REPO: {e}")))?;
        if let Some(rev) = &args.revision {
            untrusted::check_revision(rev).map_err(|e| UsageError(format!("--revision: {e}")))?;
        }
        // The job's MLX check starts with the checks at start, so that its import runs beside the probe's.
        let s = setup(&args.worker, true).await?;
        let ran = repack_one(args, &s, &mut signal).await;
        // The check started ahead ends before the process does, and its home goes with it: the job's
        // interpreter if the job stopped mid-check, or one no job took.
        s.check_ahead.end().await;
        ran
    })
}

/// Claims the job of `args.repo` at its commit and runs it with `s`, as `hubalign repack` does.
/// A first `signal` lets the job finish within the grace period, then releases it.
async fn repack_one(
    args: &RepackArgs,
    s: &Setup,
    signal: &mut tokio::task::JoinHandle<&'static str>,
) -> anyhow::Result<Exit> {
    // Any letter case names the repo, as on the Hub. Use the store's spelling if it knows the repo, else
    // the Hub's, so one repo is one job whatever the spelling typed.
    let (sha, hub_spelling) = match &args.revision {
        Some(sha) => (sha.clone(), None),
        None => {
            let info = s.hub.model_info(&args.repo).await?;
            let sha = info.sha.with_context(|| format!("{}: no head commit", args.repo))?;
            untrusted::check_commit(&sha)?;
            let spelled =
                info.id.filter(|id| id.eq_ignore_ascii_case(&args.repo) && untrusted::check_repo_id(id).is_ok());
            (sha, spelled)
        }
    };
    let repo = match s.store.repo_spelled(&args.repo).await? {
        Some(known) => known,
        None => hub_spelling.unwrap_or_else(|| args.repo.clone()),
    };
    let job = s.store.job_for(&repo, &sha, s.device).await?;
    if let Some(state) = Some(job.state).filter(|st| st.is_final()) {
        println!(
            "{}@{}: already {} ({})",
            repo,
            sha,
            state.as_str(),
            untrusted::escape_control(job.reason.as_deref().or(job.target_repo.as_deref()).unwrap_or("-"))
        );
        return Ok(exit_for(&job));
    }
    let Some(job) = s.store.claim_job(&s.opts.worker, s.opts.lease, Some(job.id)).await? else {
        bail!("{}@{}: the job is held by another worker or out of attempts", repo, sha);
    };
    let repacker = Repacker { hub: &s.hub, store: &s.store, opts: &s.opts, check_ahead: &s.check_ahead };
    // A heartbeat keeps the lease while the job runs, as a worker's does; a refused renewal stops the job.
    let recorded = Recorded::default();
    let (id, worker, lease) = (job.id, s.opts.worker.as_str(), s.opts.lease);
    let heartbeat = Heartbeat { store: &s.store, id, worker, lease, recorded: recorded.clone() };
    let work = async {
        tokio::select! {
            biased;
            ran = repacker.run(&job, &recorded) => ran,
            () = heartbeat.lost() => Ok(None),
        }
    };
    tokio::pin!(work);
    let ran = tokio::select! {
        ran = &mut work => ran,
        name = &mut *signal => {
            let name = name.unwrap_or("a stop signal");
            let grace = s.opts.stop_grace;
            eprintln!(
                "{name}: the job may finish within {} s; then it is released (a second signal releases it now)",
                grace.as_secs()
            );
            let outlived = tokio::select! {
                ran = tokio::time::timeout(grace, &mut work) => ran.ok(),
                _ = super::stop_signal() => None,
            };
            match outlived {
                Some(ran) => ran,
                None => {
                    let why = format!("{name} stopped `hubalign repack` before the job ended");
                    let released = s.store.release_job(job.id, &s.opts.worker, &why).await?;
                    println!(
                        "{}@{}: stopped by {name}; {}",
                        repo,
                        sha,
                        if released { "released: the next run takes it up where it was" } else { "another worker holds it" }
                    );
                    return Ok(Exit::Interrupted);
                }
            }
        }
    };
    let Some(_) = ran? else {
        bail!("{}@{}: another worker took the job over (this one's lease ran out)", repo, sha);
    };
    if let Some(bytes) = hubalign::blocking::peak_rss() {
        tracing::info!(job.id = job.id, rss.peak_bytes = bytes, "worker memory");
    }
    let done = s.store.job_for(&repo, &sha, s.device).await?;
    let needs_operator = done.failure_kind == Some(FailureKind::NeedsOperator);
    println!(
        "{}@{}: {}{}",
        repo,
        sha,
        if needs_operator { "needs the operator" } else { done.state.as_str() },
        done.target_repo
            .as_deref()
            .map(|t| format!(" → {t}"))
            .or(done.reason.as_deref().map(|r| format!(": {}", untrusted::escape_control(r))))
            .unwrap_or_default()
    );
    Ok(exit_for(&done))
}

fn read_opt_out(path: &PathBuf) -> anyhow::Result<Names> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect())
}

pub(super) fn run_worker(args: &WorkerLoopArgs) -> anyhow::Result<Exit> {
    hubalign::blocking::run_as_batch("the worker command");
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let s = setup(&args.worker, false).await?;
        let policy = args.policy.policy(s.device, &s.opts.private_mirrors, s.opts.pull_request)?;
        // Run `serve`'s service with the audit, the pages and the webhooks off.
        let (store, hub) = (s.store.clone(), Arc::new(s.hub));
        let health = Arc::new(Health::of(hub.clone()));
        let mut service = Service::new(health.clone());
        if let (Some(addr), Some(token)) = (args.runner_listen.as_deref(), args.runner_token.clone()) {
            let api = Arc::new(RunnerApi {
                store: s.store.clone(),
                work_dir: s.opts.work_dir.clone(),
                token,
                lease: s.opts.lease,
            });
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--runner-listen)"))?;
            println!("runner API on http://{}", listener.local_addr()?);
            service.http(listener, runner_api::router(api), Limits::default());
        }
        if let Some(addr) = args.health_listen.as_deref() {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--health-listen)"))?;
            println!("health on http://{}/healthz", listener.local_addr()?);
            let router = hubalign::serve::health_router(s.store.clone(), health.clone());
            service.http(listener, router, Limits::default());
        }
        // Queue the audit's affected repos and check the mirrors' sources now, then every 30 s beside the
        // loop. A failure now is the operator's to mend, so it stops the command at once.
        if !args.drain_only {
            queue_and_reconcile(&store, &hub, &policy).await?;
        }
        if !args.once && !args.drain_only {
            service.upkeep(hub.clone(), store.clone(), policy, Duration::from_secs(30));
        }
        let workers = Workers {
            hub,
            store,
            opts: s.opts,
            idle: Duration::from_secs(30),
            jobs_on: tokio::runtime::Handle::current(),
            on_panic: None,
        };
        let when_idle = if args.once { WhenIdle::Stop } else { WhenIdle::Wait };
        service.worker("the worker", workers.worker(""), when_idle);
        // SIGTERM, which systemd and Kubernetes send to stop, acts as Ctrl-C: the job in hand finishes, then
        // the worker stops.
        let summaries = service.run(super::stopped(), true).await;
        let summary = summaries.first().copied().unwrap_or_default();
        println!(
            "{} jobs: {} failed, {} panicked, {} taken over by another worker, {} need the operator, {} released at the stop",
            summary.claimed, summary.failed, summary.panicked, summary.lost, summary.needs_operator, summary.released
        );
        Ok(if summary.needs_operator > 0 {
            Exit::NeedsOperator
        } else if summary.failed + summary.panicked > 0 {
            Exit::Failure
        } else {
            Exit::Clean
        })
    })
}

/// Makes private the mirrors whose source stopped being public, following renamed sources. Then queues the
/// affected repos by policy, and prints the mirrors made private.
async fn queue_and_reconcile(
    store: &hubalign::store::Store,
    hub: &HubClient,
    policy: &EnqueuePolicy,
) -> anyhow::Result<()> {
    let pass = reconcile_then_enqueue(hub, store, NameFilters { policy, author: None }).await;
    for hidden in pass.hidden? {
        println!("{}: {}", hidden.target, untrusted::escape_control(&hidden.reason));
    }
    pass.queued?;
    Ok(())
}

pub(super) fn run_runner(args: &RunnerArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        if args.service.is_some() && args.runner_token.is_none() {
            let why = if args.token.is_some() {
                "--service needs the runner token: --runner-token (or HUBALIGN_RUNNER_TOKEN); --token is the Hub's \
                 token, as in every other command"
            } else {
                "--service needs the runner token: --runner-token (or HUBALIGN_RUNNER_TOKEN)"
            };
            return Err(UsageError(why.into()).into());
        }
        let device = args.verify_device.mlx();
        let work = tempfile::Builder::new().prefix("hubalign-runner-").tempdir()?;
        let script = work.path().join("verify_mlx.py");
        std::fs::write(&script, preflight::VERIFY_MLX)?;
        preflight::check_runner(&args.python, &script, device, work.path()).await?;
        let setup =
            CheckSetup { python: args.python.clone(), script, device: device.to_owned(), work: work.path().to_owned() };
        match (&args.service, &args.runner_token, &args.db) {
            (Some(service), Some(token), _) => {
                let way = runner::ApiRendezvous {
                    service: service.trim_end_matches('/').to_owned(),
                    token: token.clone(),
                    runner: args.name.clone(),
                    http: reqwest::Client::new(),
                };
                check_until_idle(&way, &setup, args.once).await
            }
            (Some(_), None, _) => Err(UsageError("--service needs the runner token: --runner-token".into()).into()),
            (None, _, db) => {
                let db = db.as_ref().ok_or_else(|| UsageError("--service or --db is required".into()))?;
                let store = hubalign::store::Store::open_location(db).await.with_context(|| format!("opening {db}"))?;
                let config = super::hub_config(args.endpoint.clone(), args.token.clone())?;
                let hub = HubClient::new(config, hubalign::hub::retry::RetryPolicy::default())?;
                let way = HubRunner {
                    store: &store,
                    hub: &hub,
                    name: &args.name,
                    lease: Duration::from_secs(args.lease_secs.max(1)),
                    max_bytes: hubalign::repack::DEFAULT_MAX_BUNDLE_BYTES,
                };
                check_until_idle(&way, &setup, args.once).await
            }
        }
    })
}

/// Checks jobs through `way`, one after another. When nothing waits, it sleeps a minute and asks again; with
/// `once`, it returns instead.
async fn check_until_idle<R: Rendezvous>(way: &R, setup: &CheckSetup, once: bool) -> anyhow::Result<Exit>
where
    R::Error: std::error::Error + Send + Sync + 'static,
{
    let mut failed = 0;
    loop {
        match check_once(way, setup).await? {
            Some((job, passed)) => {
                println!("job {job}: Metal check {}", if passed { "passed" } else { "failed" });
                failed += u32::from(!passed);
            }
            None if once => return Ok(if failed > 0 { Exit::Failure } else { Exit::Clean }),
            None => tokio::time::sleep(Duration::from_secs(60)).await,
        }
    }
}
