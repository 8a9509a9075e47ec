//! Argument parsing, logging set-up and exit codes; one module per subcommand.

mod audit;
mod config_file;
mod dataset;
#[cfg(feature = "demo")]
mod demo;
mod findable;
mod fix;
mod healthcheck;
mod jobs;
mod output;
mod preflight;
mod pull;
mod repack;
mod report;
mod scan;
mod selftest;
mod serve;
mod store_args;
mod store_cmd;
mod webhook;
mod worker_args;

use clap::{Parser, Subcommand};

/// A mistake in how the command was called, such as a missing choice or a database that does not exist.
/// It prints once like any error and exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub String);

/// An error made of several lines, such as the start-up checks that failed. It prints its heading, then
/// each line on a line of its own, escaped. It exits with code 2 for a mistake in the settings, else 4.
#[derive(Debug, thiserror::Error)]
#[error("{heading}: {}", lines.join("; "))]
pub(crate) struct ListError {
    /// What the list is.
    pub heading: String,
    /// Its items.
    pub lines: Vec<String>,
    /// A mistake in the settings (exit 2), not a failure (exit 4).
    pub usage: bool,
}

/// Exit codes, shared by every subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Exit {
    /// Nothing to report: everything aligned (or fixed).
    Clean = 0,
    /// Misaligned shards found (scan) or left (fix dry run).
    Misaligned = 1,
    /// Bad arguments.
    Usage = 2,
    /// Invalid shards or bundles found; they were not rewritten.
    Invalid = 3,
    /// The run failed (I/O, refused operation, a shard that could not be rewritten).
    Failure = 4,
    /// A job needs the operator, for example because the Hub refused the token or the disk is full. The job
    /// went back to the queue without spending an attempt. No other job will succeed until the operator acts.
    NeedsOperator = 5,
    /// Stopped by Ctrl-C (128 + SIGINT, as shells report it), after recording what was done.
    Interrupted = 130,
}

#[derive(Parser)]
#[command(
    name = "hubalign",
    version,
    about = "Find safetensors shards that mmap loaders must copy, and re-lay them so every tensor maps in place.",
    long_about = "Find safetensors shards that mmap loaders must copy, and re-lay them so every tensor maps in place.\n\n\
        A tensor can be memory-mapped without a copy only if its file offset (8 + header length + begin) is a \
        multiple of its element width. MLX's writer pads nothing, so most MLX shards fail that test and loaders \
        copy most of the model into anonymous memory. hubalign pads the header with spaces (payload byte for \
        byte) or, where that cannot help, reorders tensors widest-first, always keeping every tensor's bytes.\n\n\
        If you load MLX models: `hubalign scan ~/.cache/huggingface/hub` names the next step for each affected \
        model. That is the aligned mirror to download (`hf download MIRROR`), or the repair to run (`hubalign \
        fix SNAPSHOT --out DIR`, then `mlx_lm.load(\"DIR\")`). `hubalign pull REPO` fetches a model that maps, \
        in place of `hf download`. In the measurement that started this project (a 95 GB bundle), aligning put \
        all 2,999 tensors on the zero-copy path instead of 1,224. The memory a copying loader duplicates went \
        from 59.3 GB to 0.\n\n\
        Exit codes: 0 clean, 1 misaligned shards found, 2 usage error (or a check at start failed), 3 invalid \
        shards found, 4 failure, 5 a repack job needs the operator (a refused token, a full disk), 130 stopped \
        by Ctrl-C."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log as JSON lines instead of text (logs go to stderr; RUST_LOG sets the level).
    #[arg(long, global = true)]
    log_json: bool,
    /// More log lines: -v adds debug, -vv trace (RUST_LOG, when set, decides instead).
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,
    /// Fewer: -q logs errors only and draws no progress bar (as HF_HUB_DISABLE_PROGRESS_BARS=1 does).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    quiet: u8,
}

#[derive(Subcommand)]
enum Command {
    /// Audit local shards: which tensors a zero-copy loader would have to copy.
    ///
    /// Reads only headers: exactly 8 + N bytes per shard. PATH may be a .safetensors file, a bundle
    /// directory, a tree of bundles, or a Hugging Face cache such as ~/.cache/huggingface/hub. In a cache,
    /// scan follows the snapshots/ symlinks and sees each shard once.
    ///
    /// Verdicts: aligned (nothing to do), header_pad (padding the header fixes every tensor; payload
    /// unchanged), relayout (tensors must be reordered), invalid (breaks the safetensors format; never
    /// rewritten).
    ///
    /// For each affected model in a Hugging Face cache, scan names the next step. If the Hub lists an aligned
    /// mirror under --mirrors, the step is `hf download MIRROR`. Otherwise it is `hubalign fix SNAPSHOT --out
    /// DIR`, which writes a copy outside the cache, and scan says how to load that copy with mlx-lm. The
    /// lookup costs one Hub request per affected model. With HF_HUB_OFFLINE=1, scan makes no request and
    /// says it did not look.
    ///
    /// Exit codes: 0 all aligned, 1 something misaligned, 3 something invalid, 4 failure.
    Scan(scan::ScanArgs),
    /// Fetch a Hub model whose every tensor maps in place: what to type instead of `hf download`.
    ///
    /// If an aligned mirror exists (under --mirrors), it is downloaded into the Hugging Face cache as `hf
    /// download` would put it, or into --local-dir. Otherwise the source is downloaded and its shards
    /// repaired as they stream, into --local-dir or NAME-aligned in the working directory. Pull checks each
    /// file against the Hub's hash, and each shard's alignment at the end. A pull cut short resumes when run
    /// again.
    ///
    /// Exit codes: 0 aligned, 1 something still misaligned, 2 usage, 4 failure.
    Pull(pull::PullArgs),
    /// Repair shards so every tensor is aligned, in place or into a new directory.
    ///
    /// Where padding the header with spaces suffices, the payload is copied byte for byte; otherwise
    /// tensors are reordered widest-first with no gaps. Names, dtypes, shapes, metadata and every tensor's
    /// bytes are kept. Each result goes to a temporary file beside its destination. Fix syncs, re-parses and
    /// checks that file before it renames it into place, so an interrupted or failed run leaves the originals
    /// intact. Invalid shards are never rewritten. A MEI_ALIGN_MANIFEST.json with every hash is written into
    /// each repaired bundle.
    ///
    /// Exit codes: 0 done, 1 dry run found work, 3 invalid shards left alone, 4 failure.
    Fix(fix::FixArgs),
    /// Crawl the Hub's MLX repositories and record, per shard, what mmap loaders would copy.
    ///
    /// Lists repositories with full listings: each request returns a page of up to 1,000 repos with their
    /// commit and file names. Then reads each changed repo's shard headers with one range request per shard.
    /// A header longer than --probe-bytes takes a second request. Requests are paced per rate-limit bucket
    /// from the Hub's RateLimit headers; 429s are waited out; transient failures are retried with backoff.
    /// Gated, disabled and vanished repos are recorded as such. Run again after an interruption (Ctrl-C,
    /// kill -9), the audit resumes and skips repos already audited at their listed commit.
    Audit(audit::AuditArgs),
    /// Report what the audit store knows: by publisher, by writer, per repo, affected repos, every shard.
    ///
    /// JSON prints one object per row per line; the fields are those of the table, in full.
    Report(report::ReportArgs),
    /// Build the audit's public dataset: Parquet tables of repos, shards, mirrors and publishers, with a card.
    ///
    /// The dataset holds only what the Hub shows anyone. A private, gated or disabled repo never appears and
    /// does not count in its publisher's sums. `dataset write --out DIR` writes a day's snapshot as the
    /// dataset repo holds it.
    Dataset(dataset::DatasetArgs),
    /// Make the public mirrors findable now, as `serve` does after each audit.
    ///
    /// `--collections` makes the target namespace's Collections hold exactly the public mirrors of public
    /// sources: one Collection per source namespace, and one for all. `--note-sources` posts the notes on
    /// sources that are due.
    ///
    /// Exits 4 if a collection or a note failed. The others are still done, and the next pass tries the
    /// failed one again.
    Findable(findable::FindableArgs),
    /// Repair one repository by hand and publish its `-aligned` mirror: the worker's pipeline for one job.
    ///
    /// Downloads the bundle at the commit and checks every file against the Hub's hash. Re-lays every shard,
    /// then verifies the result: a strict parse, alignment, every tensor hash-equal to the source, and a
    /// memory-mapped typed view of every tensor. The index must name only the mirror's shards and their
    /// tensors, and an MLX load of every shard must match bit for bit. Publishes
    /// {target namespace}/{name}-aligned with a model card and MEI_ALIGN_MANIFEST.json, first private, then
    /// public. Running it again for the same commit does nothing.
    Repack(repack::RepackArgs),
    /// Run repack jobs: queue the audit's affected repos (by policy) and work through them.
    ///
    /// With --runner-listen it also serves the macOS runners' API. Runners claim jobs waiting for the Metal
    /// check there and post the results back. SIGTERM or Ctrl-C stops it after the job in hand.
    Worker(repack::WorkerLoopArgs),
    /// The macOS runner: claim jobs waiting for the Metal load check from the service, run it, post the result.
    ///
    /// Fetches each claimed job's staged output shards and manifest, not the source. The check judges the
    /// output by the manifest's digests. Runs the worker's own MLX check (deploy/verify_mlx.py, built in) on
    /// the Metal GPU and posts its record. A pass sends the job on to be published; a failure fails it.
    /// deploy/metal-verify.yml runs this on a GitHub Actions macos-14 runner.
    VerifyRunner(repack::RunnerArgs),
    /// Run the service: the scheduled audit, repack workers, the dashboard, the JSON API and /metrics.
    ///
    /// Runs one audit at a time, every --interval seconds. The next audit resumes an interrupted one and
    /// does not probe stored repos again. After each audit the affected repos are queued by policy and the
    /// workers take them. The dashboard shows the affected namespaces in a chart, with drill-downs to repos,
    /// shards and jobs. /api/* serves the report schemas as JSON. With --runner-token, serve also serves the
    /// macOS runners' API. SIGTERM or Ctrl-C stops it after the jobs in hand.
    Serve(serve::ServeArgs),
    /// Run the whole mission offline: a simulated Hub, the service against it, and the dashboard.
    ///
    /// Lays out a simulated Hub with small MLX bundles made by the real writers (tests/fixtures). Its
    /// namespaces hold some aligned bundles, some needing header padding, one needing a reorder, one malformed
    /// and one gated. Starts `serve` against it with SQLite in --data-dir. Waits for the first audit and
    /// republishing, with the MLX load check on the CPU. Prints `report --by-publisher` and the dashboard's
    /// address, and keeps serving until Ctrl-C. Run it again and it reuses the data directory. Built with
    /// `--features demo` only: the service itself links no simulator code.
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
    /// Says how to get the demo, as a usage error, in a build without the `demo` feature.
    #[cfg(not(feature = "demo"))]
    #[command(hide = true)]
    Demo(NoDemo),
    /// Move a store's records between backends: `export` writes them as JSON Lines, `import` reads them into
    /// an empty store (SQLite or PostgreSQL).
    Store(store_cmd::StoreCmdArgs),
    /// The repack queue: list jobs (by state, repo, failure kind) and retry failed ones.
    ///
    /// `jobs list --state failed` shows what failed and why. `jobs retry ID…` or `jobs retry --failed
    /// [--failure-kind K] [--repo R]` puts failed jobs back in the queue and resets their attempts. Each
    /// job's history says who retried it. The admin API's `POST /api/admin/jobs/{id}/retry` does the same
    /// for one job.
    Jobs(jobs::JobsArgs),
    /// Check what every job needs, as `serve`, `worker` and `repack` do at start, and print every finding.
    ///
    /// Takes the worker's flags and environment variables, so it checks exactly what a worker with them will
    /// use. The Hub must accept the token and let it write to the target namespace. The store must open and
    /// be migrated, and the work directory must be writable with room. The Python must import MLX and pass
    /// the worker's own MLX check on a probe bundle (with --verify-device cpu). Prints the environment it
    /// read, never the token.
    ///
    /// Exit codes: 0 a worker with these settings starts, 4 a check failed (each says its fix).
    Doctor(preflight::DoctorArgs),
    /// Ask a running service's /healthz and exit 0 on a 2xx answer: a container's HEALTHCHECK.
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Print a shell's completion script for hubalign (bash, zsh, fish, elvish, powershell):
    /// `hubalign completions bash > /etc/bash_completion.d/hubalign`.
    Completions {
        /// The shell to write completions for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Try every write the service makes, once, against a Hub, before the first real job.
    ///
    /// Works in --namespace: the token's user, or an organisation it may write to. Creates a private
    /// throwaway repo, uploads a small shard through Xet and commits it on the head it read. Checks that the
    /// Hub refuses a commit on a moved branch. Opens a pull request (create_pr=1) and a discussion. Puts the
    /// repo in a private collection. Makes the repo public, then private again. Deletes the repo and the
    /// collection at the end, whatever failed. Run it against https://hub-ci.huggingface.co (the Hub's
    /// staging instance) or huggingface.co.
    ///
    /// Exit codes: 0 every step passed, 2 usage (no token, a bad namespace), 4 a step failed (each says why).
    Selftest(selftest::SelftestArgs),
    /// Manage the Hub webhooks that point publishers' pushes at `serve --webhook-secret`.
    ///
    /// `create --url URL --watch org:NAME --watch user:NAME` registers one webhook and prints its id. One
    /// webhook may watch any users and organisations. `list` and `delete ID` manage the token's user's
    /// webhooks.
    Webhook(webhook::WebhookArgs),
}

/// Takes any arguments to `hubalign demo` in a build without the demo, so the command can say how to get it.
#[cfg(not(feature = "demo"))]
#[derive(clap::Args)]
struct NoDemo {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _rest: Vec<std::ffi::OsString>,
}

/// Parses arguments, runs the subcommand and maps the outcome to an exit code.
pub(crate) fn run() -> std::process::ExitCode {
    let argv = match config_file::expand(std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            return std::process::ExitCode::from(Exit::Usage as u8);
        }
    };
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            let code = if e.use_stderr() { Exit::Usage } else { Exit::Clean };
            return std::process::ExitCode::from(code as u8);
        }
    };
    // Long-running commands log what they do: audit start and end, each job step, each publish. Local tools
    // log only warnings. RUST_LOG, when set, overrides both.
    let talkative = match &cli.command {
        Command::Audit(_)
        | Command::Pull(_)
        | Command::Repack(_)
        | Command::Worker(_)
        | Command::Serve(_)
        | Command::VerifyRunner(_) => true,
        #[cfg(feature = "demo")]
        Command::Demo(_) => true,
        _ => false,
    };
    let level = match (cli.quiet, cli.verbose, talkative) {
        (1.., _, _) => "error",
        (0, 2.., _) => "warn,hubalign=trace",
        (0, 1, _) => "warn,hubalign=debug",
        (0, 0, true) => "warn,hubalign=info",
        (0, 0, false) => "warn",
    };
    output::set_progress_bars(cli.quiet == 0 && !hubalign::hub::config::env_flag("HF_HUB_DISABLE_PROGRESS_BARS"));
    init_tracing(cli.log_json, level);
    let result = match &cli.command {
        Command::Scan(args) => scan::run(args),
        Command::Fix(args) => fix::run(args),
        Command::Pull(args) => pull::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Report(args) => report::run(args),
        Command::Dataset(args) => dataset::run(args),
        Command::Findable(args) => findable::run(args),
        Command::Selftest(args) => selftest::run(args),
        Command::Repack(args) => repack::run_repack(args),
        Command::Worker(args) => repack::run_worker(args),
        Command::VerifyRunner(args) => repack::run_runner(args),
        Command::Serve(args) => serve::run(args),
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::run(args),
        #[cfg(not(feature = "demo"))]
        Command::Demo(_) => Err(UsageError(
            "this hubalign is the production build, which links no simulator: the demo runs from a checkout with \
             `cargo run --features demo -- demo`"
                .into(),
        )
        .into()),
        Command::Store(args) => store_cmd::run(args),
        Command::Webhook(args) => webhook::run(args),
        Command::Doctor(args) => preflight::run(args),
        Command::Jobs(args) => jobs::run(args),
        Command::Healthcheck(args) => healthcheck::run(args),
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "hubalign",
                &mut std::io::stdout(),
            );
            Ok(Exit::Clean)
        }
    };
    let code = result.unwrap_or_else(|e| {
        if let Some(list) = e.downcast_ref::<ListError>() {
            eprintln!("error: {}", hubalign::untrusted::escape_control(&list.heading));
            for line in &list.lines {
                eprintln!("  {}", hubalign::untrusted::escape_control(line));
            }
            return if list.usage { Exit::Usage } else { Exit::Failure };
        }
        eprintln!("error: {}", describe(&e));
        if e.downcast_ref::<UsageError>().is_some() { Exit::Usage } else { Exit::Failure }
    });
    std::process::ExitCode::from(code as u8)
}

/// Resolves with the signal's name at the first SIGINT (Ctrl-C) or SIGTERM. systemd and Kubernetes send
/// SIGTERM to stop a service. The long-running commands then finish or record the work in hand, and stop.
/// A signal that cannot be waited for never resolves, rather than stopping at once.
pub(crate) async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = interrupt => "Ctrl-C",
        () = terminate => "SIGTERM",
    }
}

/// [`stop_signal`], for a service that needs no name.
pub(crate) async fn stopped() {
    stop_signal().await;
}

/// Returns this machine's name for the history, as in `hubalign audit on HOST` or a worker's `HOST-PID`.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Resolves the Hub's settings from the flags and the environment. Returns a usage error under
/// `HF_HUB_OFFLINE`.
pub(crate) fn hub_config(endpoint: Option<String>, token: Option<String>) -> anyhow::Result<hubalign::hub::HubConfig> {
    hubalign::hub::HubConfig::resolve(endpoint, token).map_err(|e| UsageError(e.to_string()).into())
}

/// Formats an error with its causes, each said once. It skips a cause the text already ends with, such as
/// an I/O error that the wrapping error quotes. It escapes the result, because errors quote the Hub and
/// local files, and none of that may drive the terminal.
fn describe(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    hubalign::untrusted::escape_control(&text).into_owned()
}

fn init_tracing(json: bool, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    // Colours only for a terminal: a log file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(output::LogWriter).with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Adds to `found` each argument of `command` and its subcommands that `--help` shows with no help text,
    /// and each value listed with help beside one listed without.
    fn undescribed(command: &clap::Command, path: &str, found: &mut Vec<String>) {
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            let name = format!("{path} {}", arg.get_id());
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                found.push(name.clone());
            }
            let values = arg.get_possible_values();
            let shown: Vec<_> = values.iter().filter(|v| !v.is_hide_set()).collect();
            if shown.iter().any(|v| v.get_help().is_some()) {
                found.extend(
                    shown.iter().filter(|v| v.get_help().is_none()).map(|v| format!("{name}={}", v.get_name())),
                );
            }
        }
        for sub in command.get_subcommands() {
            undescribed(sub, &format!("{path} {}", sub.get_name()), found);
        }
    }

    /// clap prints an argument's doc comment as its help, so a doc removed there empties a line of `--help`.
    #[test]
    fn every_argument_and_listed_value_says_what_it_is_in_help() {
        let mut found = Vec::new();
        undescribed(&super::Cli::command(), "hubalign", &mut found);
        assert!(found.is_empty(), "no help text: {found:?}");
    }
}
