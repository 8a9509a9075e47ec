//! `hubalign healthcheck`: asks a running service's `/healthz` and exits 0 on a 2xx answer. It serves a
//! container's `HEALTHCHECK`, because the image carries no HTTP client of its own.

use std::time::Duration;

use clap::Args;

use super::Exit;

#[derive(Args)]
pub(super) struct HealthcheckArgs {
    /// The health endpoint to ask.
    #[arg(long, default_value = "http://127.0.0.1:8080/healthz", value_name = "URL")]
    url: String,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    timeout: u64,
}

/// Asks the endpoint and prints the answer's first line. Exits 0 on 2xx (`ok` or `degraded`), else 4.
pub(super) fn run(args: &HealthcheckArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(args.timeout.max(1))).build()?;
        let answer = client.get(&args.url).send().await?;
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        println!("{status}: {}", hubalign::untrusted::escape_control(body.lines().next().unwrap_or("")));
        Ok(if status.is_success() { Exit::Clean } else { Exit::Failure })
    })
}
