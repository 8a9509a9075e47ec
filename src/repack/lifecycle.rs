//! Mirrors whose source stopped being public: after each audit, every public mirror whose source the store
//! no longer knows as public is looked at again on the Hub, and made private (with the reason recorded for
//! the dashboard) if its source is now private, gated, disabled or gone.

use hf_hub::HFClient;

use super::policy::{self, PrivateMirrors};
use crate::hub::HubClient;
use crate::store::{Store, StoreError};

/// A mirror made private, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// The mirror.
    pub target: String,
    /// The reason recorded.
    pub reason: String,
}

/// Makes private every public mirror whose source is no longer public. A source the Hub cannot answer for
/// now is left for the next pass; one that is public again is left alone.
pub async fn reconcile_mirrors(hub: &HubClient, hf: &HFClient, store: &Store) -> Result<Vec<Hidden>, StoreError> {
    let mut hidden = Vec::new();
    for mirror in store.mirrors_to_recheck().await? {
        let Some((ns, name)) = mirror.target_repo.split_once('/') else { continue };
        let info = hub.model_info(&mirror.source_repo).await;
        // A public mirror stays public only where a public one may be published now.
        let reason = match policy::visibility_now(&mirror.source_repo, info.as_ref(), ns, &PrivateMirrors::default()) {
            Ok(Ok(_)) => continue,
            Ok(Err(reason)) => reason,
            Err(e) => {
                tracing::warn!(repo.id = %mirror.source_repo, mirror = %mirror.target_repo, error = %e, "source visibility unknown; checked again next time");
                continue;
            }
        };
        match hf.model(ns, name).update_settings().private(true).send().await {
            Ok(_) => {
                let reason = format!("made private because its source is no longer public ({reason})");
                tracing::warn!(repo.id = %mirror.source_repo, mirror = %mirror.target_repo, reason = %reason, "mirror hidden");
                store.hide_mirror(&mirror.target_repo, &reason).await?;
                hidden.push(Hidden { target: mirror.target_repo, reason });
            }
            Err(e) => {
                tracing::warn!(mirror = %mirror.target_repo, error = %e, "making a mirror private failed; tried again next time");
            }
        }
    }
    Ok(hidden)
}
