//! `hubalign jobs`: the repack queue for the operator. `list` filters jobs as `/api/jobs` does. `retry` puts
//! back one job, or every failed job a filter picks, and each job's history says the command retried it.

use clap::{Args, Subcommand};
use hubalign::job::{FailureKind, Job, JobState};
use hubalign::store::jobs::JobFilter;
use hubalign::untrusted::escape_control;

use super::output::json_lines;
use super::store_args::StoreArgs;
use super::{Exit, UsageError};

/// The most jobs one `retry --failed` puts back (run it again for more).
const MAX_RETRY: i64 = 10_000;

#[derive(Args)]
pub(super) struct JobsArgs {
    #[command(subcommand)]
    command: JobsCommand,
}

#[derive(Subcommand)]
enum JobsCommand {
    /// List the jobs, newest first: id, repo, state, attempts, last change and reason.
    List(ListArgs),
    /// Put failed (or skipped) jobs back in the queue with their attempts reset: the given ids, or with
    /// `--failed` every failed job the filters pick.
    Retry(RetryArgs),
}

/// Which jobs.
#[derive(Args)]
struct Filters {
    /// Only jobs of this source repo (`namespace/name`).
    #[arg(long, value_name = "REPO")]
    repo: Option<String>,
    /// Only jobs whose last failure was of this kind: transient, permanent or needs_operator.
    #[arg(long, value_name = "KIND")]
    failure_kind: Option<FailureKind>,
}

#[derive(Args)]
struct ListArgs {
    /// Only jobs in this state: queued, downloading, relaying, verifying, awaiting_metal_verify, publishing,
    /// published, failed or skipped.
    #[arg(long, value_name = "STATE")]
    state: Option<JobState>,
    #[command(flatten)]
    filters: Filters,
    /// At most this many.
    #[arg(long, default_value_t = 50, value_name = "N")]
    limit: i64,
    /// One JSON object per job and line (the `/api/jobs` fields) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["ids", "failed"]))]
struct RetryArgs {
    /// The jobs' ids (see `hubalign jobs list`).
    #[arg(value_name = "ID")]
    ids: Vec<i64>,
    /// Every failed job the filters pick.
    #[arg(long, conflicts_with = "ids")]
    failed: bool,
    #[command(flatten)]
    filters: Filters,
    #[command(flatten)]
    store: StoreArgs,
}

/// Runs `hubalign jobs`.
pub(super) fn run(args: &JobsArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match &args.command {
            JobsCommand::List(list) => {
                let store = list.store.open_existing().await?;
                if !(1..=100_000).contains(&list.limit) {
                    return Err(UsageError("--limit must be 1 to 100000".into()).into());
                }
                let filter = JobFilter {
                    state: list.state,
                    repo: list.filters.repo.clone(),
                    failure_kind: list.filters.failure_kind,
                };
                let jobs = store.jobs_page(&filter, list.limit, 0).await?;
                if list.json {
                    json_lines(&jobs)?;
                } else {
                    print_table(&jobs);
                }
                Ok(Exit::Clean)
            }
            JobsCommand::Retry(retry) => {
                let store = retry.store.open_existing().await?;
                let ids = if retry.failed {
                    let filter = JobFilter {
                        state: Some(JobState::Failed),
                        repo: retry.filters.repo.clone(),
                        failure_kind: retry.filters.failure_kind,
                    };
                    store.jobs_page(&filter, MAX_RETRY, 0).await?.iter().map(|j| j.id).collect()
                } else {
                    retry.ids.clone()
                };
                let mut refused = 0;
                for id in &ids {
                    match store.retry_job(*id, "`hubalign jobs retry`").await? {
                        Some(true) => println!("job {id}: queued again"),
                        Some(false) => {
                            refused += 1;
                            eprintln!("job {id}: neither failed, skipped nor held for the operator; left as it is");
                        }
                        None => {
                            refused += 1;
                            eprintln!("job {id}: no such job");
                        }
                    }
                }
                if ids.is_empty() {
                    println!("no failed job matches");
                }
                Ok(if refused > 0 { Exit::Failure } else { Exit::Clean })
            }
        }
    })
}

fn print_table(jobs: &[Job]) {
    if jobs.is_empty() {
        println!("no jobs");
        return;
    }
    println!("{:>7}  {:<40}  {:<22}  {:>8}  {:<20}  reason", "id", "repo", "state", "attempts", "updated");
    for job in jobs {
        let state = match job.failure_kind {
            Some(FailureKind::NeedsOperator) if job.state == JobState::Queued => "queued (held)".to_owned(),
            _ => job.state.as_str().to_owned(),
        };
        let reason: String = escape_control(job.reason.as_deref().unwrap_or("")).chars().take(100).collect();
        println!(
            "{:>7}  {:<40}  {:<22}  {:>8}  {:<20}  {}",
            job.id,
            escape_control(&job.repo_id),
            state,
            format!("{}/{}", job.attempts, job.max_attempts),
            job.updated_at,
            reason
        );
    }
}
