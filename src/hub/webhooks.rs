//! The Hub's webhooks API (`/api/settings/webhooks`) for the token's user. Each webhook may watch any users
//! and organisations. It POSTs the repo events of the namespaces it watches to one URL.

use serde::{Deserialize, Serialize};

use super::pacing::Bucket;

use super::{BodyLimit, HubClient, HubError, SMALL_CAP};
use crate::untrusted;

/// A namespace a webhook watches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watched {
    /// `user` or `org`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The user's or organisation's name.
    pub name: String,
}

impl std::str::FromStr for Watched {
    type Err = crate::error_text::Unrecognized;
    /// `org:NAME` or `user:NAME`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refused = || crate::error_text::Unrecognized::new(s, "org:NAME or user:NAME");
        let (kind, name) = s.split_once(':').ok_or_else(refused)?;
        if kind != "org" && kind != "user" {
            return Err(refused());
        }
        untrusted::check_namespace(name)
            .map_err(|e| crate::error_text::Unrecognized::new(s, format!("a namespace after `{kind}:` ({e})")))?;
        Ok(Watched { kind: kind.to_owned(), name: name.to_owned() })
    }
}

/// A webhook as the Hub describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    /// Its id.
    pub id: String,
    /// Where it POSTs.
    #[serde(default)]
    pub url: Option<String>,
    /// What it watches.
    pub watched: Vec<Watched>,
    /// `repo`, `discussion`.
    pub domains: Vec<String>,
    /// Whether the Hub stopped sending.
    #[serde(default)]
    pub disabled: bool,
}

#[derive(Deserialize)]
struct Created {
    webhook: Webhook,
}

impl HubClient {
    fn webhooks_url(&self) -> String {
        format!("{}/api/settings/webhooks", self.endpoint())
    }

    /// Creates a webhook that POSTs the `repo` and `discussion` events of `watched` to `url`, with `secret`.
    pub async fn create_webhook(&self, url: &str, watched: &[Watched], secret: &str) -> Result<Webhook, HubError> {
        let body =
            serde_json::json!({"watched": watched, "url": url, "domains": ["repo", "discussion"], "secret": secret});
        let endpoint = self.webhooks_url();
        let answer = self.post(&endpoint, "application/json", body.to_string().into_bytes()).await?;
        let created: Created = serde_json::from_slice(&answer.body)
            .map_err(|e| HubError::Malformed { url: endpoint, detail: format!("webhook: {e}") })?;
        Ok(created.webhook)
    }

    /// Lists the token's user's webhooks.
    pub async fn list_webhooks(&self) -> Result<Vec<Webhook>, HubError> {
        let url = self.webhooks_url();
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(SMALL_CAP)).await?;
        serde_json::from_slice(&fetched.body).map_err(|e| HubError::Malformed { url, detail: format!("webhooks: {e}") })
    }

    /// Deletes the webhook `id`.
    pub async fn delete_webhook(&self, id: &str) -> Result<(), HubError> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(HubError::Malformed {
                url: self.webhooks_url(),
                detail: format!("{}: not a webhook id", untrusted::quote(id)),
            });
        }
        let url = format!("{}/{id}", self.webhooks_url());
        self.delete(&url).await
    }
}
