//! Assembles every hubalign process in one way. Its tasks are an HTTP listener, the scheduler, the webhook
//! task, the upkeep timer and the worker loops. Each task is named, started on one stop signal, watched, and
//! stopped with the others. `serve` turns every part on. `hubalign worker` is the same service with the
//! audit, the pages and the webhooks off. It runs its worker loop, its upkeep timer, and the runner API when
//! asked.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{Id, JoinSet};

use super::Health;
use super::listener::{self, Limits};
use crate::hub::HubClient;
use crate::repack::RepackRunner;
use crate::repack::queue::lifecycle::reconcile_then_enqueue;
use crate::repack::queue::policy::{EnqueuePolicy, NameFilters};
use crate::store::Store;
use crate::worker::{LoopSummary, WhenIdle, WorkerLoop};

/// How a task ended.
enum Ended {
    /// A worker loop, with what it did.
    Worker(LoopSummary),
    /// Any other task.
    Task,
}

/// A process's tasks under one stop signal.
pub struct Service {
    tasks: JoinSet<Ended>,
    names: HashMap<Id, String>,
    workers: usize,
    stop_tx: watch::Sender<bool>,
    stop: watch::Receiver<bool>,
    health: Arc<Health>,
}

impl Service {
    /// Makes a service with no task yet. `health` hears when its tasks end; it is the `/healthz` of `serve`.
    pub fn new(health: Arc<Health>) -> Service {
        let (stop_tx, stop) = watch::channel(false);
        Service { tasks: JoinSet::new(), names: HashMap::new(), workers: 0, stop_tx, stop, health }
    }

    /// The signal every task stops on.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.clone()
    }

    /// Runs `task`, named `name` in what `/healthz` says if it ends while the service runs.
    pub fn spawn(&mut self, name: impl Into<String>, task: impl Future<Output = ()> + Send + 'static) {
        let id = self
            .tasks
            .spawn(async move {
                task.await;
                Ended::Task
            })
            .id();
        self.names.insert(id, name.into());
    }

    /// Serves `app` on `listener` within `limits` until the service stops.
    pub fn http(&mut self, listener: tokio::net::TcpListener, app: axum::Router, limits: Limits) {
        let mut stop = self.stop_signal();
        self.spawn("the HTTP server", async move {
            let graceful = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = listener::serve(listener, app, limits, graceful).await {
                tracing::error!(error = %e, "server stopped");
            }
        });
    }

    /// Checks the mirrors' sources and queues the affected repos by `policy` every `every`. This is the
    /// worker's timer. In `serve`, the scheduler does this after each audit.
    pub fn upkeep(&mut self, hub: Arc<HubClient>, store: Store, policy: EnqueuePolicy, every: Duration) {
        let mut stop = self.stop_signal();
        self.spawn("the upkeep timer", async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                reconcile_then_enqueue(&hub, &store, NameFilters { policy: &policy, author: None }).await;
            }
        });
    }

    /// Runs `worker`, one of the loops [`Workers`](super::workers::Workers) builds. `/healthz` calls it
    /// `name`.
    pub fn worker(&mut self, name: impl Into<String>, worker: WorkerLoop<RepackRunner>, when_idle: WhenIdle) {
        let stop = self.stop_signal();
        let id = self.tasks.spawn(async move { Ended::Worker(worker.run(stop, when_idle).await) }).id();
        self.names.insert(id, name.into());
        self.workers += 1;
    }

    /// Runs until `shutdown` resolves. With `until_workers_end`, it also stops when every worker loop has
    /// returned. Then it stops every task and waits for them; the workers finish the job in hand. A task that
    /// ends early is told to the health, unless it is a worker loop the service waits for. The others go on.
    /// Returns what each worker loop did.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>, until_workers_end: bool) -> Vec<LoopSummary> {
        let mut summaries = Vec::new();
        tokio::pin!(shutdown);
        loop {
            if self.tasks.is_empty() || (until_workers_end && summaries.len() == self.workers) {
                if !until_workers_end {
                    // Every task stopped, and each was recorded. Nothing is left to watch but the shutdown.
                    (&mut shutdown).await;
                }
                break;
            }
            tokio::select! {
                () = &mut shutdown => break,
                Some(ended) = self.tasks.join_next_with_id() => match ended {
                    Ok((_, Ended::Worker(summary))) if until_workers_end => summaries.push(summary),
                    Ok((id, ended)) => {
                        if let Ended::Worker(summary) = ended {
                            summaries.push(summary);
                        }
                        self.health.stopped(self.names.get(&id).map_or("a task", String::as_str), "it returned".into());
                    }
                    Err(e) => {
                        let name = self.names.get(&e.id()).cloned().unwrap_or_else(|| "a task".into());
                        self.health.stopped(&name, crate::blocking::join_error_message(e));
                    }
                },
            }
        }
        tracing::info!("shutting down: finishing jobs in hand");
        let _ = self.stop_tx.send(true);
        while let Some(ended) = self.tasks.join_next().await {
            if let Ok(Ended::Worker(summary)) = ended {
                summaries.push(summary);
            }
        }
        summaries
    }
}
