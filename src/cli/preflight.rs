//! The start-up checks of `serve`, `worker` and `repack`, and of `verify-runner`'s interpreter. `hubalign
//! doctor` prints them all with the environment they read, as `hf env` does.

use std::path::{Path, PathBuf};

use clap::Args;
use hubalign::hub::HubClient;
use hubalign::hub::config::token_origin;
use hubalign::preflight::{self, Finding, MlxCheck, Publishing, Report, Status};
use hubalign::repack::CheckAhead;
use hubalign::store::Store;

use super::worker_args::{Device, WorkerArgs};
use super::{Exit, UsageError};

/// The MLX check script, shipped inside the binary so an installed worker needs no source tree.
pub(super) const VERIFY_MLX: &str = include_str!("../../deploy/verify_mlx.py");

/// What the checks found, and what they opened on the way.
pub(super) struct Checked {
    /// Every finding.
    pub(super) report: Report,
    /// The token's user and the namespace the mirrors go to.
    pub(super) who: Option<(String, String)>,
    /// The store, opened and migrated.
    pub(super) store: Option<Store>,
    pub(super) work_dir: PathBuf,
    /// The MLX check script, written into the work directory.
    pub(super) mlx_script: PathBuf,
    /// The first job's MLX check, started beside the probe's when asked.
    pub(super) check_ahead: CheckAhead,
}

/// Runs every check a worker needs with `args`, each to its end whatever the others found.
/// With `start_check_ahead`, starts the first job's MLX check just before the probe's, so that both import
/// MLX at once.
pub(super) async fn check_worker(args: &WorkerArgs, hub: &HubClient, start_check_ahead: bool) -> Checked {
    let mut check_ahead = CheckAhead::none();
    let mut findings = Vec::new();
    let publishing = if args.pr { Publishing::PullRequests } else { Publishing::Mirrors };
    let (token, who) = preflight::token(hub, args.target_namespace.as_deref(), publishing).await;
    findings.push(token);
    let store = match args.store.open().await {
        Ok(store) => {
            let at = args.store.shown();
            findings.push(Finding::ok("store", format!("{at} ({:?}), migrated", store.backend())));
            match store.clock_skew().await {
                Ok(skew) => findings.push(preflight::clock(skew)),
                Err(e) => {
                    findings.push(Finding::unreachable(
                        preflight::CLOCK,
                        e.to_string(),
                        "check that the database answers",
                    ));
                }
            }
            Some(store)
        }
        // A location that cannot be a store is a setting to mend; one that does not answer now may answer later.
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            findings.push(Finding::fail("store", super::describe(&e), "check --db (or DATABASE_URL)"));
            None
        }
        Err(e) if matches!(e.downcast_ref(), Some(hubalign::store::StoreError::NewerSchema { .. })) => {
            let fix = "upgrade hubalign to the release that wrote the store, or give --db another store";
            findings.push(Finding::fail("store", super::describe(&e), fix));
            None
        }
        Err(e) => {
            findings.push(Finding::unreachable("store", super::describe(&e), "check that the database answers"));
            None
        }
    };
    let work_dir = match (&args.work_dir, args.store.default_work_dir()) {
        (Some(dir), _) => dir.clone(),
        (None, default) => {
            let dir = default.unwrap_or_else(|_| hubalign::store::default_db_path().with_extension("work"));
            // The default directory is ours, so make its parents too. A store elsewhere leaves the data
            // directory unmade.
            if let Some(parent) = dir.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            dir
        }
    };
    let work = preflight::work_dir(&work_dir);
    let work_ok = work.status != Status::Fail;
    findings.push(work);
    let mlx_script = work_dir.join("verify_mlx.py");
    // A worker runs the MLX check itself on the CPU, or with Metal on Apple silicon. Elsewhere, a Metal job
    // goes to the macOS runner.
    let device = match args.verify_device {
        Device::Cpu => Some("cpu"),
        Device::Metal if cfg!(all(target_os = "macos", target_arch = "aarch64")) => Some("gpu"),
        Device::Metal => None,
    };
    let python = match device {
        None => {
            let why = "--verify-device metal: the macOS runner runs the MLX check (`verify-runner` checks its own)";
            Finding::skipped("python", why)
        }
        Some(_) if !work_ok => Finding::skipped("python", "needs a work directory to run in"),
        // Renamed into place: an interpreter another worker starts from this directory meanwhile reads the old
        // script or the new one, never half of one.
        Some(device) => match hubalign::safe_fs::write_atomic(&mlx_script, VERIFY_MLX.as_bytes()) {
            Ok(()) => {
                if start_check_ahead {
                    check_ahead = CheckAhead::start(&args.python, &mlx_script, device, &work_dir);
                }
                let check = MlxCheck { python: args.python.clone(), script: mlx_script.clone(), device: device.into() };
                preflight::mlx(&check, &work_dir).await
            }
            Err(e) => Finding::fail(
                "python",
                format!("cannot write {}: {e}", mlx_script.display()),
                "give --work-dir a writable directory",
            ),
        },
    };
    findings.push(python);
    Checked { report: Report { findings }, who, store, work_dir, mlx_script, check_ahead }
}

/// Logs the warnings, and returns the failures as the error that stops a start. The command then exits 2 for
/// a setting to mend, and 4 when the failures are only things out of reach.
pub(super) fn stop_unless_passed(report: &Report) -> anyhow::Result<()> {
    for warning in report.findings.iter().filter(|f| f.status == Status::Warn) {
        tracing::warn!(check = warning.check, "{}", warning.detail);
    }
    if report.passed() {
        return Ok(());
    }
    Err(super::ListError {
        heading: "not started: every job would fail (`hubalign doctor` prints every check)".to_owned(),
        lines: report.failures_said(),
        // Out of reach for now is a failure (exit 4), not a mistake in the settings (exit 2).
        usage: !report.only_unreachable(),
    }
    .into())
}

/// Checks `verify-runner`'s interpreter: its own Python and device, in a scratch directory.
pub(super) async fn check_runner(python: &Path, script: &Path, device: &str, scratch: &Path) -> anyhow::Result<()> {
    let check = MlxCheck { python: python.to_owned(), script: script.to_owned(), device: device.to_owned() };
    let report = Report { findings: vec![preflight::mlx(&check, scratch).await] };
    stop_unless_passed(&report)
}

/// `hubalign doctor`'s arguments: a worker's, so that it checks exactly what `serve` and `worker` will.
#[derive(Args)]
pub(super) struct DoctorArgs {
    #[command(flatten)]
    worker: WorkerArgs,
    /// Print the findings as one JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

/// The environment the checks read, shown without secrets.
#[derive(serde::Serialize)]
struct Environment {
    hubalign: &'static str,
    platform: String,
    endpoint: String,
    token: String,
    hf_home: Option<String>,
    store: String,
    work_dir: String,
    python: String,
    verify_device: &'static str,
}

/// Runs `hubalign doctor`: every check, whether or not the others pass. Exits 0 when a worker with these
/// settings would start, 4 when it would not.
pub(super) fn run(args: &DoctorArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let w = &args.worker;
        let hub = w.bounds.client(super::hub_config(w.endpoint.clone(), w.token.clone())?)?;
        let mut checked = check_worker(w, &hub, false).await;
        checked.report = checked.report.strict();
        let environment = Environment {
            hubalign: env!("CARGO_PKG_VERSION"),
            platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
            endpoint: hub.endpoint().to_owned(),
            token: token_origin(w.token.clone()).map_or_else(|| "none".to_owned(), |o| format!("from {o} (not shown)")),
            hf_home: std::env::var("HF_HOME").ok(),
            store: match w.store.location() {
                Ok(Some(location)) => location.to_string(),
                Ok(None) => hubalign::store::default_db_path().display().to_string(),
                Err(e) => format!("(refused: {e})"),
            },
            work_dir: checked.work_dir.display().to_string(),
            python: w.python.display().to_string(),
            verify_device: hubalign::job::VerifyDevice::from(w.verify_device).as_str(),
        };
        if args.json {
            let doc = serde_json::json!({ "environment": environment, "checks": checked.report.findings });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            print_text(&environment, &checked.report)?;
        }
        Ok(if checked.report.passed() { Exit::Clean } else { Exit::Failure })
    })
}

fn print_text(environment: &Environment, report: &Report) -> anyhow::Result<()> {
    let escape = |s: &str| hubalign::untrusted::escape_control(s).into_owned();
    let fields = serde_json::to_value(environment)?;
    println!("environment:");
    if let Some(map) = fields.as_object() {
        for (key, value) in map {
            let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            println!("  {key:<14} {}", escape(&value));
        }
    }
    println!("checks:");
    for finding in &report.findings {
        let mark = match finding.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skipped => "skip",
        };
        println!("  [{mark}] {:<15} {}", finding.check, escape(&finding.detail));
        if let Some(fix) = &finding.fix {
            println!("         {:<15} fix: {}", "", escape(fix));
        }
    }
    let failed = report.failures().count();
    if failed == 0 {
        println!("a worker with these settings starts");
    } else {
        println!("{failed} check(s) failed: a worker with these settings does not start");
    }
    Ok(())
}
