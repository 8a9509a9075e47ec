//! `hubalign demo`: runs the whole mission offline. It lays out a simulated Hub with bundles made by the real
//! writers and runs the service against it. It waits for the first audit and republishing, prints the
//! report, and leaves the dashboard running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, FromArgMatches};
use hubsim::{self as sim, SimConfig};

use super::Exit;

/// The demo's publishing account on the simulated Hub.
const DEMO_TOKEN: &str = "hf_demo_token:hubalign-demo";

/// Demo repos: (repo id, fixture under tests/fixtures, what it shows, gated).
const REPOS: &[(&str, &str, &str, bool)] = &[
    ("mlx-community/Tiny-Llama-4bit", "mlx_lm/q4", "header padding", false),
    ("mlx-community/Tiny-Llama-8bit", "mlx_lm/q8", "header padding", false),
    ("mlx-community/Tiny-Llama-bf16", "mlx_lm/bf16", "header padding", false),
    ("lmstudio-community/Tiny-Sharded-4bit", "mlx_lm/sharded", "four shards", false),
    ("lmstudio-community/Tiny-OddVocab-4bit", "mlx_lm/q4_oddvocab", "a reorder", false),
    ("tinyorg/Tiny-Aligned", "numpy/aligned.safetensors", "already aligned", false),
    ("tinyorg/Tiny-Broken", "malformed/gap.safetensors", "malformed (a gap)", false),
    ("gatedco/Tiny-Gated-4bit", "mlx_lm/mixed", "gated", true),
];

#[derive(Args)]
pub(super) struct DemoArgs {
    /// Port of the dashboard.
    #[arg(long, default_value_t = 8080, value_name = "P")]
    port: u16,
    /// Where the simulated Hub, the database and the work directory go (reused when run again).
    #[arg(long, default_value = "hubalign-demo", value_name = "DIR")]
    data_dir: PathBuf,
    /// The store: a SQLite file or a `postgres://` URL [default: DIR/hubalign.db].
    #[arg(long, value_name = "PATH|URL")]
    db: Option<String>,
    /// Python with `mlx` for the MLX load check [default: target/py-venv, built by tests/python/setup-venv.sh
    /// when missing].
    #[arg(long, env = "HUBALIGN_PYTHON", value_name = "PYTHON")]
    python: Option<PathBuf>,
}

pub(super) fn run(args: &DemoArgs) -> anyhow::Result<Exit> {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = checkout.join("tests/fixtures");
    if !fixtures.is_dir() {
        bail!("the demo's bundles come from {}; run it from a hubalign checkout", fixtures.display());
    }
    let hub_root = args.data_dir.join("hub");
    build_world(&fixtures, &hub_root)?;
    let python = find_python(checkout, args.python.as_deref())?;

    let sim_runtime = tokio::runtime::Runtime::new()?;
    let mut config = SimConfig::new(hub_root.clone());
    config.tokens = vec![DEMO_TOKEN.parse()?];
    let hub = sim_runtime.block_on(sim::start(config)).context("starting the simulated Hub")?;
    println!("simulated Hub: {} ({} repos under {})", hub.base_url, REPOS.len(), hub_root.display());

    let db = args.db.clone().unwrap_or_else(|| args.data_dir.join("hubalign.db").to_string_lossy().into_owned());
    let work_dir = args.data_dir.join("hubalign.work").to_string_lossy().into_owned();
    let listen = format!("127.0.0.1:{}", args.port);
    let token = DEMO_TOKEN.split(':').next().unwrap_or_default();
    let argv = [
        "--endpoint",
        &hub.base_url,
        "--token",
        token,
        "--db",
        &db,
        "--work-dir",
        &work_dir,
        "--verify-device",
        "cpu",
        "--python",
        &python.to_string_lossy(),
        "--listen",
        &listen,
        "--interval",
        "3600",
    ];
    let serve_args: super::serve::ServeArgs = parse_args("serve", &argv)?;
    let report_args: super::report::ReportArgs = parse_args("report", &["--by-publisher", "--db", &db])?;
    std::thread::spawn(move || {
        if let Err(e) = wait_for_first_cycle(&listen) {
            eprintln!("demo: {e:#}");
            return;
        }
        println!("\nFirst audit and republishing done. By publisher:\n");
        if let Err(e) = super::report::run(&report_args) {
            eprintln!("demo: report: {e:#}");
        }
        println!("\nDashboard: http://{listen}/   (Ctrl-C stops the demo)");
    });
    let exit = super::serve::run(&serve_args);
    sim_runtime.block_on(hub.stop());
    exit
}

/// Parses a subcommand's arguments the way its command line would.
fn parse_args<T: Args + FromArgMatches>(name: &'static str, argv: &[&str]) -> anyhow::Result<T> {
    let command = T::augment_args(clap::Command::new(name));
    let matches = command.try_get_matches_from(std::iter::once(name).chain(argv.iter().copied()))?;
    Ok(T::from_arg_matches(&matches)?)
}

/// Lays the fixtures out as `models/{namespace}/{name}/` with the sidecar the simulator reads.
fn build_world(fixtures: &Path, hub_root: &Path) -> anyhow::Result<()> {
    for (id, fixture, _, gated) in REPOS {
        let dir = hub_root.join("models").join(id);
        if dir.is_dir() {
            continue;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let src = fixtures.join(fixture);
        if src.is_dir() {
            for entry in std::fs::read_dir(&src).with_context(|| format!("reading {}", src.display()))? {
                let path = entry?.path();
                if path.is_file() {
                    let name = path.file_name().unwrap_or_default();
                    std::fs::copy(&path, dir.join(name)).with_context(|| format!("copying {}", path.display()))?;
                }
            }
        } else {
            std::fs::copy(&src, dir.join("model.safetensors")).with_context(|| format!("copying {}", src.display()))?;
        }
        let gating = if *gated { r#","gated":"manual""# } else { "" };
        // As popular as the conversions it stands for, so the popularity floor lets them through.
        let sidecar = format!(r#"{{"library_name":"mlx","license":"apache-2.0","downloads":2500,"likes":12{gating}}}"#);
        std::fs::write(dir.join(sim::ingest::SIDECAR), sidecar)?;
    }
    Ok(())
}

/// Returns a Python that imports `mlx.core`: the given one, else the test venv, built on first use.
fn find_python(checkout: &Path, given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let has_mlx = |p: &Path| Command::new(p).args(["-c", "import mlx.core"]).output().is_ok_and(|o| o.status.success());
    if let Some(p) = given {
        if has_mlx(p) {
            return Ok(p.to_owned());
        }
        bail!("{} cannot import mlx.core (pip install 'mlx[cpu]')", p.display());
    }
    let venv = checkout.join("target/py-venv/bin/python");
    if !has_mlx(&venv) {
        let script = checkout.join("tests/python/setup-venv.sh");
        println!("setting up the MLX check's Python (one-off, a few minutes): {}", script.display());
        let status =
            Command::new("bash").arg(&script).status().with_context(|| format!("running {}", script.display()))?;
        if !status.success() || !has_mlx(&venv) {
            bail!("{} did not produce a Python with mlx; pass --python", script.display());
        }
    }
    Ok(venv)
}

/// Polls the service's API until an audit finished and every job it queued has settled.
fn wait_for_first_cycle(listen: &str) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let get = |path: &str| {
            let request = client.get(format!("http://{listen}{path}"));
            async move { request.send().await?.error_for_status()?.json::<Vec<serde_json::Value>>().await }
        };
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (Ok(runs), Ok(jobs)) = (get("/api/runs").await, get("/api/jobs").await) else { continue };
            let audited = runs.iter().any(|r| r["status"] == "finished");
            let settled = jobs.iter().all(|j| matches!(j["state"].as_str(), Some("published" | "failed" | "skipped")));
            if audited && !jobs.is_empty() && settled {
                return Ok(());
            }
        }
    })
}
