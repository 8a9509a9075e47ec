//! Assembles repack workers in one way for both processes. `serve` runs several on the batch runtime, beside
//! the audit and the dashboard. `hubalign worker` runs the same loop with the audit and the pages off.

use std::sync::Arc;
use std::time::Duration;

use crate::hub::HubClient;
use crate::repack::{RepackOptions, RepackRunner};
use crate::store::Store;
use crate::worker::WorkerLoop;

/// What every worker of a process shares.
pub struct Workers {
    /// The Hub client.
    pub hub: Arc<HubClient>,
    /// The queue.
    pub store: Store,
    /// The workers' options; each loop's name is `opts.worker` with its suffix.
    pub opts: RepackOptions,
    /// How long a loop waits when the queue is empty.
    pub idle: Duration,
    /// Where jobs run: a runtime at a lower priority than the pages'.
    pub jobs_on: tokio::runtime::Handle,
    /// Told when a job's task panicked. The service counts these panics in `/metrics`.
    pub on_panic: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Workers {
    /// Builds the worker loop named `opts.worker` followed by `suffix`. The suffix is unique per loop of the
    /// process.
    pub fn worker(&self, suffix: &str) -> WorkerLoop<RepackRunner> {
        let mut opts = self.opts.clone();
        opts.worker = format!("{}{suffix}", opts.worker);
        WorkerLoop {
            store: self.store.clone(),
            worker: opts.worker.clone(),
            lease: opts.lease,
            idle: self.idle,
            jobs_on: self.jobs_on.clone(),
            on_panic: self.on_panic.clone(),
            operator_hold: crate::job::NEEDS_OPERATOR_HOLD,
            grace: opts.stop_grace,
            runner: Arc::new(RepackRunner { hub: self.hub.clone(), store: self.store.clone(), opts }),
        }
    }
}
