//! Sends the simulator's webhooks (`sim --webhook URL[#SECRET]`). For every commit, create, delete and
//! visibility change it performs, it POSTs the Hub's payload. The payload carries `event`, `repo` with
//! `headSha`, `updatedRefs` and `updatedConfig`. The secret goes in `X-Webhook-Secret`. So a service's whole
//! webhook path runs end to end. Every payload sent is kept, up to a bound, for `POST /_sim/webhooks/replay`.
//! `POST /_sim/webhooks/flood` sends the last one again many times, for tests of a burst.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// Payloads kept for replays.
const KEPT: usize = 1_000;

/// Where payloads go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// The receiver's URL.
    pub url: String,
    /// The secret sent in `X-Webhook-Secret`.
    pub secret: Option<String>,
}

/// A `--webhook` whose URL is not http(s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}: not an http(s) URL")]
pub struct NotHttp(pub String);

impl std::str::FromStr for WebhookTarget {
    type Err = NotHttp;
    /// `URL` or `URL#SECRET`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (url, secret) = match s.split_once('#') {
            Some((url, secret)) => (url, Some(secret.to_owned())),
            None => (s, None),
        };
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(NotHttp(url.to_owned()));
        }
        Ok(WebhookTarget { url: url.to_owned(), secret })
    }
}

/// A webhook created through `/api/settings/webhooks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// Its id.
    pub id: String,
    /// The user who created it.
    pub owner: String,
    /// Where it POSTs.
    pub target: WebhookTarget,
    /// The users and organisations whose repos it watches.
    pub watched: Vec<(String, String)>,
    /// `repo`, `discussion`.
    pub domains: Vec<String>,
}

impl Registered {
    /// Describes it as the Hub does. The secret is not shown back.
    pub fn to_json(&self) -> Value {
        let watched: Vec<Value> = self.watched.iter().map(|(kind, name)| json!({"type": kind, "name": name})).collect();
        json!({"id": self.id, "url": self.target.url, "watched": watched, "domains": self.domains, "disabled": false})
    }
}

/// The sender.
#[derive(Debug, Default)]
pub struct Webhooks {
    targets: Vec<WebhookTarget>,
    client: reqwest::Client,
    sent: Mutex<VecDeque<Value>>,
    /// Webhooks created through the API.
    pub registered: Mutex<Vec<Registered>>,
    /// The last id given to one. Ids are not reused after a deletion.
    last_id: AtomicU64,
}

impl Webhooks {
    /// Gives a new webhook's id, shaped like the Hub's: 24 hex digits.
    pub fn next_id(&self) -> String {
        format!("{:024x}", self.last_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Makes a sender to `targets`. With none, only webhooks registered through the API get payloads.
    pub fn new(targets: Vec<WebhookTarget>) -> Webhooks {
        Webhooks { targets, ..Webhooks::default() }
    }

    /// Runs [`send_for`](Self::send_for) for a model repository.
    pub fn send(&self, scope: &str, action: &str, repo: &str, private: bool, head: Option<&str>, extra: Value) {
        self.send_for(crate::kind::RepoKind::Model, (scope, action), repo, private, head, extra);
    }

    /// Sends the Hub's payload for `action` on `scope` of the `kind` repo `repo`, whose `main` is at `head`.
    /// `extra` adds top-level properties. It sends in the background, after the change it reports is visible.
    pub fn send_for(
        &self,
        kind: crate::kind::RepoKind,
        (scope, action): (&str, &str),
        repo: &str,
        private: bool,
        head: Option<&str>,
        extra: Value,
    ) {
        let namespace = crate::digests::namespace_of(repo);
        let watching: Vec<WebhookTarget> = self
            .registered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|r| r.watched.iter().any(|(_, name)| name == namespace))
            .map(|r| r.target.clone())
            .collect();
        if self.targets.is_empty() && watching.is_empty() {
            return;
        }
        let mut payload = json!({
            "event": {"action": action, "scope": scope},
            "repo": {"type": kind.noun(), "name": repo, "id": &crate::digests::sha256_hex(repo.as_bytes())[..24], "private": private,
                     "url": {"web": kind.url("", repo), "api": kind.api_path(repo)}, "owner": {"id": "0"}},
            "webhook": {"id": "0", "version": 3},
        });
        if let Some(head) = head {
            payload["repo"]["headSha"] = head.into();
        }
        if let (Some(p), Some(extra)) = (payload.as_object_mut(), extra.as_object()) {
            p.extend(extra.clone());
        }
        {
            let mut sent = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if sent.len() == KEPT {
                sent.pop_front();
            }
            sent.push_back(payload.clone());
        }
        self.post(payload.clone(), 1);
        for target in watching {
            self.post_to(target, payload.clone(), 1);
        }
    }

    /// Sends every kept payload again, in order; returns how many.
    pub fn replay(&self) -> usize {
        let sent = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        for p in &sent {
            self.post(p.clone(), 1);
        }
        sent.len()
    }

    /// Sends the last payload `times` times at once; returns whether there was one.
    pub fn flood(&self, times: usize) -> bool {
        let last = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).back().cloned();
        last.map(|p| self.post(p, times)).is_some()
    }

    fn post(&self, payload: Value, times: usize) {
        for target in self.targets.clone() {
            self.post_to(target, payload.clone(), times);
        }
    }

    fn post_to(&self, target: WebhookTarget, payload: Value, times: usize) {
        let client = self.client.clone();
        tokio::spawn(async move {
            for _ in 0..times {
                let mut request = client.post(&target.url).json(&payload);
                if let Some(secret) = &target.secret {
                    request = request.header("X-Webhook-Secret", secret);
                }
                if let Err(e) = request.send().await {
                    tracing::warn!(url = %target.url, error = %e, "webhook not delivered");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids come from a counter, not from how many webhooks exist now. So a deletion never lets a new webhook
    /// take the id of one still registered.
    #[test]
    fn ids_are_never_reused() {
        let hooks = Webhooks::default();
        let ids: Vec<String> = (0..3).map(|_| hooks.next_id()).collect();
        assert_eq!(ids, [format!("{:024x}", 1), format!("{:024x}", 2), format!("{:024x}", 3)]);
    }
}
