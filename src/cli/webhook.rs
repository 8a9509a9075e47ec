//! `hubalign webhook create | list | delete`: manages the token's user's Hub webhooks through the Hub's
//! webhooks API. The webhooks point the publishers' events at `serve --webhook-secret`.

use anyhow::Context;
use clap::{Args, Subcommand};
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::webhooks::{Watched, Webhook};
use hubalign::untrusted::escape_control;

use super::Exit;

#[derive(Args)]
pub(super) struct WebhookArgs {
    #[command(subcommand)]
    action: WebhookAction,
    /// Hub endpoint [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, global = true, value_name = "URL")]
    endpoint: Option<String>,
    /// Hub token of the webhooks' owner [default: HF_TOKEN, else the token file under HF_HOME]; never logged.
    #[arg(long, global = true, value_name = "TOKEN")]
    token: Option<String>,
}

#[derive(Subcommand)]
enum WebhookAction {
    /// Create a webhook that POSTs the repo and discussion events of the watched users and organisations to
    /// URL (`serve`'s `/api/hub/webhook`), and print its id. Each webhook may fire 1,000 times a day.
    Create {
        /// Where the Hub POSTs: `https://…/api/hub/webhook`.
        #[arg(long, value_name = "URL")]
        url: String,
        /// A namespace to watch: `org:NAME` or `user:NAME` (repeatable).
        #[arg(long = "watch", value_name = "org:NAME|user:NAME", required = true)]
        watched: Vec<Watched>,
        /// The secret the Hub sends in `X-Webhook-Secret`: the one `serve --webhook-secret` checks.
        #[arg(long, env = "HUBALIGN_WEBHOOK_SECRET", value_name = "SECRET", hide_env_values = true)]
        secret: String,
    },
    /// List the token's user's webhooks: id, URL, watched namespaces.
    List,
    /// Delete a webhook by id.
    Delete {
        /// The webhook's id (from `create` or `list`).
        #[arg(value_name = "ID")]
        id: String,
    },
}

fn describe(w: &Webhook) -> String {
    let watched: Vec<String> = w.watched.iter().map(|i| format!("{}:{}", i.kind, i.name)).collect();
    let state = if w.disabled { " (disabled)" } else { "" };
    escape_control(&format!("{}  {}  {}{state}", w.id, w.url.as_deref().unwrap_or("-"), watched.join(","))).into_owned()
}

pub(super) fn run(args: &WebhookArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let config = super::hub_config(args.endpoint.clone(), args.token.clone())?;
        anyhow::ensure!(config.token.is_some(), "the Hub's webhooks API needs a token: --token or HF_TOKEN");
        let hub = hubalign::hub::HubClient::new(config, RetryPolicy::default())?;
        match &args.action {
            WebhookAction::Create { url, watched, secret } => {
                let created = hub.create_webhook(url, watched, secret).await.context("creating the webhook")?;
                println!("{}", describe(&created));
            }
            WebhookAction::List => {
                for w in hub.list_webhooks().await.context("listing the webhooks")? {
                    println!("{}", describe(&w));
                }
            }
            WebhookAction::Delete { id } => {
                hub.delete_webhook(id).await.with_context(|| format!("deleting webhook {}", escape_control(id)))?;
                println!("deleted {}", escape_control(id));
            }
        }
        Ok(Exit::Clean)
    })
}
