//! Hints waiting to be acted on. The queue holds one per repo, and one per move or pull request (see
//! [`Hint::key`]). It holds at most a fixed number, so a flood of payloads costs bounded memory.
//!
//! A newer hint for a repo already waiting replaces the older one in place. Either leads to reading the repo
//! again from the Hub, which decides. A hint for a new repo is refused when the queue is full; the scheduled
//! crawl finds that repo later. A waiting hint keeps the arrival of the earliest payload it stands for. The
//! lag to its mirror counts from there.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::payload::Hint;

/// How many repos may wait at once unless told otherwise.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// What became of a pushed hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Queued {
    /// The repo now waits.
    New,
    /// The repo was already waiting, and the hint replaced the older one.
    Merged,
    /// The queue is full, and the hint was dropped.
    Full,
}

/// The bounded, de-duplicated queue.
#[derive(Debug)]
pub struct HintQueue {
    inner: Mutex<Inner>,
    ready: tokio::sync::Notify,
    capacity: usize,
}

#[derive(Debug, Default)]
struct Inner {
    order: VecDeque<String>,
    waiting: HashMap<String, Pending>,
}

/// A hint taken from the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The newest hint for its key.
    pub hint: Hint,
    /// When the earliest payload it stands for arrived, `YYYY-MM-DDTHH:MM:SSZ`.
    pub received_at: String,
}

impl HintQueue {
    /// A queue of at most `capacity` repos.
    pub fn new(capacity: usize) -> HintQueue {
        HintQueue { inner: Mutex::new(Inner::default()), ready: tokio::sync::Notify::new(), capacity }
    }

    /// Adds `hint`, arrived now, or merges it into its repo's waiting one.
    pub fn push(&self, hint: Hint) -> Queued {
        self.push_at(hint, crate::time::now_utc())
    }

    /// Adds `hint`, arrived at `received_at`, or merges it into its repo's waiting one. A merged hint keeps
    /// the earlier arrival.
    pub fn push_at(&self, hint: Hint, received_at: String) -> Queued {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let repo = hint.key();
        if let Some(waiting) = inner.waiting.get_mut(&repo) {
            waiting.hint = hint;
            return Queued::Merged;
        }
        if inner.waiting.len() >= self.capacity {
            return Queued::Full;
        }
        inner.order.push_back(repo.clone());
        inner.waiting.insert(repo, Pending { hint, received_at });
        drop(inner);
        self.ready.notify_one();
        Queued::New
    }

    /// The oldest waiting hint, if any.
    pub fn try_pop(&self) -> Option<Pending> {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let repo = inner.order.pop_front()?;
        inner.waiting.remove(&repo)
    }

    /// The oldest waiting hint, once there is one.
    pub async fn pop(&self) -> Pending {
        loop {
            let notified = self.ready.notified();
            if let Some(hint) = self.try_pop() {
                return hint;
            }
            notified.await;
        }
    }

    /// Repos waiting.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(repo: &str, head: char) -> Hint {
        Hint::Changed { repo: repo.into(), head: Some(head.to_string().repeat(40)) }
    }

    #[test]
    fn a_flood_keeps_one_hint_per_repo_and_at_most_the_capacity() {
        let queue = HintQueue::new(100);
        let mut outcomes = HashMap::new();
        for i in 0..10_000 {
            // 10,000 payloads: 300 repos, each pushed many times, the newest head last.
            let head = if i >= 9_700 { 'b' } else { 'a' };
            *outcomes.entry(queue.push(changed(&format!("ns/r{}", i % 300), head))).or_insert(0) += 1;
        }
        assert_eq!(queue.len(), 100, "bounded by the capacity");
        assert_eq!(outcomes[&Queued::New], 100);
        assert!(outcomes[&Queued::Full] > 0 && outcomes[&Queued::Merged] > 0, "{outcomes:?}");
        let mut seen = Vec::new();
        while let Some(Pending { hint, .. }) = queue.try_pop() {
            assert_eq!(hint, changed(hint.repo(), 'b'), "the newest hint of each repo");
            seen.push(hint.repo().to_owned());
        }
        let first: Vec<String> = (0..100).map(|i| format!("ns/r{i}")).collect();
        assert_eq!(seen, first, "oldest first, each repo once");
        assert!(queue.is_empty());
    }

    #[test]
    fn a_push_does_not_erase_a_move_or_a_pull_requests_end() {
        let queue = HintQueue::new(10);
        let moved = Hint::Moved { from: "ns/old".into(), to: "ns/new".into() };
        let ended = Hint::PullRequestClosed { repo: "ns/new".into(), num: 3 };
        for hint in [moved.clone(), ended.clone(), changed("ns/new", 'a'), changed("ns/new", 'b')] {
            queue.push(hint);
        }
        let drained: Vec<Hint> = std::iter::from_fn(|| queue.try_pop()).map(|p| p.hint).collect();
        assert_eq!(drained, [moved, ended, changed("ns/new", 'b')]);
    }

    /// A merged hint is acted on as the newest, but its lag counts from the earliest payload it stands for.
    #[test]
    fn a_merged_hint_keeps_the_earliest_arrival() {
        let queue = HintQueue::new(10);
        queue.push_at(changed("ns/r", 'a'), "2026-12-02T00:00:00Z".into());
        assert_eq!(queue.push_at(changed("ns/r", 'b'), "2026-12-02T00:00:09Z".into()), Queued::Merged);
        let pending = queue.try_pop().unwrap();
        assert_eq!((pending.hint, pending.received_at.as_str()), (changed("ns/r", 'b'), "2026-12-02T00:00:00Z"));
    }

    #[tokio::test]
    async fn pop_waits_for_a_push() {
        let queue = std::sync::Arc::new(HintQueue::new(10));
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.pop().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(queue.push(Hint::Deleted { repo: "ns/gone".into() }), Queued::New);
        assert_eq!(waiter.await.unwrap().hint, Hint::Deleted { repo: "ns/gone".into() });
    }
}
