//! `hubalign selftest`: tries every write path once against a Hub, on throwaway objects it then deletes.

use anyhow::Context;
use clap::Args;

use super::Exit;
use super::output::{self, Format};

#[derive(Args)]
pub(super) struct SelftestArgs {
    /// The namespace the throwaway repo and collection are made in: the token's user, or an organisation it
    /// may write to.
    #[arg(long, value_name = "NAMESPACE")]
    namespace: String,
    /// How the steps are printed (table or JSON lines; CSV is the table's columns).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Hub endpoint [default: HF_ENDPOINT, else https://huggingface.co]; https://hub-ci.huggingface.co is
    /// the Hub's public staging instance.
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Hub token [default: HF_TOKEN, else the token file under HF_HOME]; never logged.
    #[arg(long, value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
}

pub(super) fn run(args: &SelftestArgs) -> anyhow::Result<Exit> {
    if let Err(e) = hubalign::untrusted::check_namespace(&args.namespace) {
        eprintln!("error: --namespace {}: {e}", hubalign::untrusted::quote(&args.namespace));
        return Ok(Exit::Usage);
    }
    let config = super::hub_config(args.endpoint.clone(), args.token.clone())?;
    let hub = hubalign::hub::HubClient::new(config, hubalign::hub::retry::RetryPolicy::default())?;
    if !hub.has_token() {
        eprintln!(
            "error: the self-test writes to the Hub: give a token that may write to {} (--token, HF_TOKEN)",
            args.namespace
        );
        return Ok(Exit::Usage);
    }
    let scratch = tempfile::tempdir().context("making a scratch directory for the test shard")?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let report = runtime.block_on(hubalign::selftest::run(&hub, &args.namespace, scratch.path()));
    match args.format {
        Format::Json => output::json_lines(&report.steps)?,
        Format::Csv => output::csv(&report.steps)?,
        Format::Table => {
            let mut rows = vec![vec!["step".to_owned(), "result".to_owned(), "detail".to_owned()]];
            for step in &report.steps {
                let result = if step.passed { "passed" } else { "FAILED" };
                rows.push(vec![step.name.to_owned(), result.to_owned(), step.detail.clone()]);
            }
            print!("{}", output::table(&rows));
            let failed = report.steps.iter().filter(|s| !s.passed).count();
            println!(
                "\n{}: {} of {} steps passed (throwaway repo {})",
                report.endpoint,
                report.steps.len() - failed,
                report.steps.len(),
                report.repo
            );
        }
    }
    Ok(if report.passed() { Exit::Clean } else { Exit::Failure })
}
