//! `hubalign findable`: one pass of what `serve` does after each audit to make mirrors findable.

use anyhow::Context;
use clap::Args;
use hubalign::findable::{collections, notes};

use super::Exit;
use super::store_args::StoreArgs;

#[derive(Args)]
pub(super) struct FindableArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The namespace the mirrors are published to and the collections live in.
    #[arg(long, value_name = "NAMESPACE")]
    target_namespace: String,
    /// Keep the target namespace's Collections in step with the public mirrors.
    #[arg(long)]
    collections: bool,
    /// Post the notes on mirrored sources that are due: one per source, ever, and none in a namespace that
    /// closed a note.
    #[arg(long)]
    note_sources: bool,
    /// Notes posted at most by this pass.
    #[arg(long, default_value_t = 20, value_name = "N")]
    max_notes: usize,
    /// Hub endpoint [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Hub token [default: HF_TOKEN, else the token file under HF_HOME]; never logged.
    #[arg(long, value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the Hub and the store, and print what the collections pass would create, add and remove;
    /// change nothing. Notes are not posted in a dry run.
    #[arg(long)]
    dry_run: bool,
}

pub(super) fn run(args: &FindableArgs) -> anyhow::Result<Exit> {
    hubalign::untrusted::check_namespace(&args.target_namespace)
        .map_err(|e| anyhow::anyhow!("--target-namespace {}: {e}", args.target_namespace))?;
    if !args.collections && !args.note_sources {
        eprintln!("nothing to do: give --collections, --note-sources or both");
        return Ok(Exit::Usage);
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let config = super::hub_config(args.endpoint.clone(), args.token.clone())?;
    let hub = hubalign::hub::HubClient::new(config, hubalign::hub::retry::RetryPolicy::default())?;
    if !hub.has_token() {
        anyhow::bail!(
            "collections and notes are written to the Hub: give a token with write access (--token, HF_TOKEN)"
        );
    }
    runtime.block_on(async {
        let store = args.store.open_existing().await?;
        let mut failed = 0;
        if args.collections {
            // Report and count a failure of the collections pass, then still try the notes, as `serve` does.
            let mode = if args.dry_run { collections::Mode::DryRun } else { collections::Mode::Apply };
            let done = match collections::sync(&hub, &store, &args.target_namespace, mode).await {
                Ok(done) => done,
                Err(e) => {
                    eprintln!("collections of {}: {:#}", args.target_namespace, anyhow::Error::from(e));
                    collections::CollectionsSynced { failed: vec![(args.target_namespace.clone(), String::new())], ..Default::default() }
                }
            };
            for line in &done.planned {
                println!("would {line}");
            }
            for refused in &done.refused {
                eprintln!("refused: {refused}");
            }
            let verb = if args.dry_run { "would be " } else { "" };
            eprintln!(
                "collections of {}: {} {verb}created, {} items {verb}added, {} {verb}removed, {} mirrors gone from the Hub, {} refused as not ours, {} failed",
                args.target_namespace,
                done.created,
                done.added,
                done.removed,
                done.gone.len(),
                done.refused.len(),
                done.failed.len()
            );
            failed += done.failed.len() + done.refused.len();
        }
        if args.note_sources && args.dry_run {
            eprintln!("notes on sources: not posted in a dry run");
        } else if args.note_sources {
            let author = hub.whoami().await.context("asking the Hub who the token is (the notes' author)")?;
            let policy = notes::NotePolicy { author, max_per_pass: args.max_notes };
            let done = notes::post(&hub, &store, &policy).await?;
            eprintln!(
                "notes on sources: {} posted, {} found already there, {} refused for good, {} namespaces closed one, {} failed",
                done.posted.len(),
                done.found,
                done.refused.len(),
                done.declined.len(),
                done.failed.len()
            );
            failed += done.failed.len();
        }
        anyhow::Ok(if failed == 0 { Exit::Clean } else { Exit::Failure })
    })
}
