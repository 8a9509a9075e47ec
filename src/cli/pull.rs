//! `hubalign pull`: fetches a Hub model whose every tensor maps in place, instead of `hf download`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use hubalign::pull::{Destination, PullOptions, Pulled, cache, pull};
use hubalign::safetensors::{Alignment, Verdict};
use hubalign::scan::next_step::DEFAULT_MIRRORS;
use hubalign::untrusted::escape_control;

use super::{Exit, UsageError};

#[derive(Args)]
pub(super) struct PullArgs {
    /// The model repo on the Hub, `namespace/name`.
    #[arg(value_name = "REPO")]
    repo: String,
    /// Put the files in DIR instead of the Hugging Face cache. huggingface_hub keeps that cache in
    /// HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub.
    #[arg(long, value_name = "DIR")]
    local_dir: Option<PathBuf>,
    /// Look for the aligned mirror under this namespace (repeatable; the first that has one wins).
    #[arg(long = "mirrors", value_name = "NAMESPACE", default_value = DEFAULT_MIRRORS)]
    mirrors: Vec<String>,
    /// The source's branch or commit. A revision other than main skips the mirror and repairs the source.
    #[arg(long, default_value = "main", value_name = "REVISION")]
    revision: String,
    /// Put each data section on this many bytes (a power of two up to 16384). This skips the mirror, which is
    /// padded to 8, and repairs the source instead.
    #[arg(long, value_name = "BYTES")]
    alignment: Option<Alignment>,
    /// Hub endpoint [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Hub token [default: HF_TOKEN, else the token file under HF_HOME]; never logged.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// The largest model to download.
    #[arg(long, default_value_t = hubalign::repack::DEFAULT_MAX_BUNDLE_BYTES as f64 / 1e9, value_name = "GB")]
    max_bundle_gb: f64,
}

pub(super) fn run(args: &PullArgs) -> anyhow::Result<Exit> {
    hubalign::untrusted::check_repo_id(&args.repo).map_err(|e| UsageError(format!("REPO {:?}: {e}", args.repo)))?;
    for ns in &args.mirrors {
        hubalign::untrusted::check_namespace(ns).map_err(|e| UsageError(format!("--mirrors {ns:?}: {e}")))?;
    }
    let into = match &args.local_dir {
        Some(dir) => Destination::LocalDir(dir.clone()),
        None => Destination::Cache(cache::hub_cache_dir().ok_or_else(|| {
            UsageError("no Hugging Face cache folder: set HF_HUB_CACHE or HF_HOME, or give --local-dir".into())
        })?),
    };
    let config = super::hub_config(args.endpoint.clone(), args.token.clone())?;
    let hub = hubalign::hub::HubClient::new(config, hubalign::hub::retry::RetryPolicy::default())?;
    let opts = PullOptions {
        repo: args.repo.clone(),
        revision: args.revision.clone(),
        mirrors: args.mirrors.clone(),
        into,
        alignment: args.alignment.unwrap_or_default(),
        max_bytes: (args.max_bundle_gb.max(0.0) * 1e9) as u64,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let pulled = runtime.block_on(pull(&hub, &opts)).with_context(|| format!("pulling {}", args.repo))?;
    drop(runtime);
    let (dir, load_as) = match &pulled {
        Pulled::Mirror { mirror, commit, dir } => {
            println!("Downloaded the aligned mirror {} at {commit}", escape_control(mirror));
            let load_as = if args.local_dir.is_some() { dir.display().to_string() } else { mirror.clone() };
            (dir, load_as)
        }
        Pulled::Repaired { commit, dir, already_aligned } => {
            let what = if *already_aligned { "it needed no repair" } else { "repaired it as it streamed" };
            println!("Downloaded {} at {commit}; {what}", escape_control(&args.repo));
            (dir, dir.display().to_string())
        }
    };
    println!("Files: {}", escape_control(&dir.display().to_string()));
    // Check each shard: every tensor must map in place.
    let bundles = hubalign::bundle::discover(std::slice::from_ref(dir)).context("finding the pulled shards")?;
    let report = hubalign::scan::scan(&bundles, opts.alignment, &mut |_| {});
    let worst = report.worst();
    println!(
        "{} checked: {}",
        super::output::count(report.totals.shards, "shard", "shards"),
        if worst == Verdict::Aligned { "every tensor maps in place" } else { "some still need a copy" }
    );
    println!("Load it with: mlx_lm.load({})", hubalign::untrusted::python_string(&load_as));
    Ok(if worst == Verdict::Aligned { Exit::Clean } else { Exit::Misaligned })
}
