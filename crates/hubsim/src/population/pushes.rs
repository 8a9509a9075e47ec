//! Plays the population's life during a run: new commits, new repos and deletions. The Hub's webhook payload
//! announces each one. An event log keeps each one, and a rehearsal checks a service's work against it.

use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::dice::Dice;
use super::plan::{Plan, PopulationConfig, RepoPlan};
use super::{Census, SampleRepo, make_commit};
use crate::error::HubError;
use crate::model::Repo;
use crate::{Sim, json_ref};

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushKind {
    /// A new commit on `main` of an existing repo.
    Update,
    /// A new repo.
    Create,
    /// A repo deleted.
    Delete,
}

/// One push, as the log keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct PushEvent {
    /// Its place in the log, from 0.
    pub seq: u64,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What it did.
    pub kind: PushKind,
    /// The repo.
    pub repo: String,
    /// Whether the repo is in the backfill sample.
    pub sample: bool,
    /// The repo's `main` after it (none after a deletion).
    pub head: Option<String>,
}

/// The population as it is now: every plan by index, none once deleted, and the pushes so far.
#[derive(Debug)]
pub struct PopulationState {
    /// How it was made.
    pub config: PopulationConfig,
    plans: Mutex<Vec<Option<Plan>>>,
    events: Mutex<Vec<PushEvent>>,
    /// Held for a whole push, so two pushes never pick the same new index or undo each other's change.
    pushing: Mutex<u64>,
}

/// Salt of the pushes' dice.
const PUSH: u64 = 0x7075_7368;

impl PopulationState {
    /// The state of a population just made from these plans.
    pub fn new(config: PopulationConfig, plans: Vec<Plan>) -> PopulationState {
        PopulationState {
            config,
            plans: Mutex::new(plans.into_iter().map(Some).collect()),
            events: Mutex::default(),
            pushing: Mutex::new(0),
        }
    }

    /// The pushes so far.
    pub fn events(&self) -> Vec<PushEvent> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// What the population holds now.
    pub fn census(&self) -> Census {
        let plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        let mut census = Census::default();
        for plan in plans.iter().flatten() {
            super::count(&mut census, plan);
        }
        census
    }

    /// The sample's repos as they are now, with their heads read from `sim`.
    pub fn sample(&self, sim: &Sim) -> Vec<SampleRepo> {
        let plans: Vec<Plan> = self
            .plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flatten()
            .filter(|p| p.sample)
            .cloned()
            .collect();
        let repos = sim.repos();
        plans
            .iter()
            .filter_map(|plan| {
                let head = repos.get(&plan.id)?.head()?.sha.clone();
                Some(SampleRepo {
                    id: plan.id.clone(),
                    renamed_from: plan.renamed_from.clone(),
                    head,
                    private: plan.meta.private,
                    gated: plan.meta.gated != crate::model::Gating::Open,
                    disabled: plan.meta.disabled,
                    mlx: plan.meta.library_name.as_deref() == Some("mlx"),
                    class: plan.class(),
                    shard_bytes: plan.shards.iter().map(|s| s.layout().file_size()).sum(),
                })
            })
            .collect()
    }

    /// A live repo's plan: `repo` by name, or one the dice pick. They pick from the sample with
    /// `sample_share`.
    fn pick(&self, dice: &mut Dice, repo: Option<&str>, sample_share: f64) -> Option<(usize, Plan)> {
        let plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = repo {
            return plans
                .iter()
                .enumerate()
                .find_map(|(i, p)| p.as_ref().filter(|p| p.id.eq_ignore_ascii_case(id)).map(|p| (i, Arc::clone(p))));
        }
        let sample = self.config.sample_repos.min(plans.len() as u64);
        for _ in 0..64 {
            let i = if sample > 0 && dice.chance(sample_share) {
                dice.below(sample)
            } else {
                dice.below(plans.len() as u64)
            } as usize;
            if let Some(Some(plan)) = plans.get(i) {
                return Some((i, Arc::clone(plan)));
            }
        }
        None
    }

    fn log(&self, kind: PushKind, plan: &RepoPlan, head: Option<String>) -> PushEvent {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let event =
            PushEvent { seq: events.len() as u64, at_ms, kind, repo: plan.id.clone(), sample: plan.sample, head };
        events.push(event.clone());
        event
    }
}

/// Makes one push on `sim`'s population and sends its webhook. The push is of `kind`, else the dice pick: 70%
/// commits, 20% new repos, 10% deletions. It goes to `repo`, else the dice pick one, from the sample 30% of
/// the time.
pub fn push(sim: &Sim, kind: Option<PushKind>, repo: Option<&str>) -> Result<PushEvent, HubError> {
    let state = sim.population.as_ref().ok_or_else(|| HubError::not_found("this simulator has no population"))?;
    // One push at a time; each attempt, failed or not, rolls new dice.
    let mut rolls = state.pushing.lock().unwrap_or_else(PoisonError::into_inner);
    let mut dice = Dice::new(state.config.seed, PUSH, *rolls);
    *rolls += 1;
    let kind = kind.unwrap_or(match dice.weighted(&[0.7, 0.2, 0.1]) {
        0 => PushKind::Update,
        1 => PushKind::Create,
        _ => PushKind::Delete,
    });
    match kind {
        PushKind::Create => {
            let index = state.plans.lock().unwrap_or_else(PoisonError::into_inner).len() as u64;
            let plan: Plan = Arc::new(RepoPlan::roll_as(&state.config, index, dice.chance(0.2)));
            let (commit, files) = make_commit(state.config.seed, &plan, None, crate::clock::now());
            let head = commit.sha.clone();
            for (oid, file) in files {
                sim.add_synthetic(oid, file);
            }
            sim.repos_mut().insert(plan.id.clone(), Repo::new(plan.id.clone(), plan.meta.clone(), commit));
            if let Some(old) = &plan.renamed_from {
                sim.moves.record(old, &plan.id);
            }
            state.plans.lock().unwrap_or_else(PoisonError::into_inner).push(Some(Arc::clone(&plan)));
            sim.webhooks.send("repo", "create", &plan.id, plan.meta.private, Some(&head), json!({}));
            Ok(state.log(kind, &plan, Some(head)))
        }
        PushKind::Update => {
            let (i, old) = state.pick(&mut dice, repo, 0.3).ok_or_else(|| HubError::not_found("no repo to push to"))?;
            let plan: Plan = Arc::new(old.pushed());
            let parent = sim.repos().get(&plan.id).and_then(Repo::head).map(|c| c.sha.clone());
            let (commit, files) = make_commit(state.config.seed, &plan, parent.clone(), crate::clock::now());
            let head = commit.sha.clone();
            for (oid, file) in files {
                sim.add_synthetic(oid, file);
            }
            {
                let mut repos = sim.repos_mut();
                let repo = repos.get_mut(&plan.id).ok_or_else(|| HubError::not_found("the repo is gone"))?;
                repo.refs.insert("main".into(), head.clone());
                repo.commits.insert(head.clone(), commit);
            }
            state.plans.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(Arc::clone(&plan));
            let refs = json_ref("refs/heads/main", parent.as_deref(), &head);
            sim.webhooks.send("repo.content", "update", &plan.id, plan.meta.private, Some(&head), refs);
            Ok(state.log(kind, &plan, Some(head)))
        }
        PushKind::Delete => {
            let (i, plan) = state.pick(&mut dice, repo, 0.3).ok_or_else(|| HubError::not_found("no repo to delete"))?;
            sim.repos_mut().remove(&plan.id);
            state.plans.lock().unwrap_or_else(PoisonError::into_inner)[i] = None;
            sim.webhooks.send("repo", "delete", &plan.id, plan.meta.private, None, json!({}));
            Ok(state.log(kind, &plan, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SimConfig, start};

    async fn page(url: &str) -> (Vec<String>, Option<String>) {
        let answer = reqwest::get(url).await.unwrap();
        let next = answer.headers().get("link").and_then(|l| l.to_str().ok()).and_then(|l| {
            l.strip_prefix('<').and_then(|rest| rest.split_once('>')).map(|(target, _)| target.to_owned())
        });
        let items: Vec<serde_json::Value> = answer.json().await.unwrap();
        (items.iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect(), next)
    }

    /// A repo deleted behind a client's cursor must not hide the next page's first repo from it. Otherwise a
    /// crawl that records what it did not list takes that live repo for gone. The Hub's cursors are keys, and
    /// so are these.
    #[tokio::test]
    async fn a_deletion_while_a_client_pages_hides_no_other_repo_and_is_announced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let mut config = SimConfig::new(dir.path().to_path_buf());
        config.page_size = 10;
        config.population = Some(PopulationConfig::new(5, 30, 2));
        let hub = start(config).await.unwrap();
        let (first, next) = page(&format!("{}/api/models?limit=10", hub.base_url)).await;
        assert_eq!(first.len(), 10);
        let deleted = push(&hub.sim, Some(PushKind::Delete), Some(&first[3])).unwrap();
        assert_eq!((deleted.kind, deleted.head.as_deref()), (PushKind::Delete, None));
        let mut seen = first.clone();
        let mut next = next;
        while let Some(url) = next {
            let (ids, after) = page(&url).await;
            seen.extend(ids);
            next = after;
        }
        let live: Vec<String> = hub.sim.repos().keys().cloned().collect();
        assert_eq!(live.len(), 29);
        assert!(live.iter().all(|id| seen.contains(id)), "every live repo was listed: {seen:?}");
        assert_eq!(seen.len(), 30, "each once, the deleted one on the page read before it went");

        let updated = push(&hub.sim, Some(PushKind::Update), Some(&first[0])).unwrap();
        assert_eq!(hub.sim.repos().get(&first[0]).unwrap().head().unwrap().sha, updated.head.unwrap());
        let created = push(&hub.sim, Some(PushKind::Create), None).unwrap();
        assert!(hub.sim.repos().contains_key(&created.repo));
        let state = hub.sim.population.as_ref().unwrap();
        assert_eq!(state.events().len(), 3);
        assert_eq!(state.census().repos, 30, "30 made, one deleted, one created");
        hub.stop().await;
    }
}
