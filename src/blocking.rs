//! Batch work kept off the async executor and behind the pages in the CPU's queue.
//!
//! A repack re-lays, hashes, maps and MLX-loads gigabytes. On an executor thread, that work stalls every page
//! and audit request sharing the runtime. On a thread of equal priority, it still takes the cores a page
//! needs; see BENCHMARKS.md. So [`run`] gives each piece of batch work its own thread at the lowest priority,
//! [`BATCH_NICE`]. Threads and processes it starts inherit that priority. The heavy entry points call
//! [`assert_off_executor`]. So in debug builds, which every test uses, async code that forgot [`run`] panics
//! at once instead of showing up as latency.

use std::future::Future;
use std::panic::AssertUnwindSafe;

/// The nice value of batch threads, the lowest. A runnable page then gets about 68 times their share of a
/// core. Nice 10 gives about 9 times, which still let the MLX check slow `/healthz`; see BENCHMARKS.md.
/// Batch work loses nothing by it on an otherwise idle machine.
pub const BATCH_NICE: i32 = 19;

/// The batch work could not run or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockingError {
    /// No thread could be started for it.
    #[error("{what}: cannot start a thread: {source}")]
    Spawn {
        /// The work, as the caller named it.
        what: &'static str,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// It panicked.
    #[error("{what} panicked: {message}")]
    Panicked {
        /// The work, as the caller named it.
        what: &'static str,
        /// The panic's message.
        message: String,
    },
}

/// Starts `work` at once on a low-priority thread of its own. The returned future waits for it without
/// holding an executor thread.
pub fn run<T, F>(what: &'static str, work: F) -> impl Future<Output = Result<T, BlockingError>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    // The caller's span, with its job and repo, follows the work onto the thread.
    let span = tracing::Span::current();
    let spawned = std::thread::Builder::new().name(format!("batch: {what}")).spawn(move || {
        let _in_span = span.enter();
        lower_priority(what);
        let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(work)));
    });
    async move {
        spawned.map_err(|source| BlockingError::Spawn { what, source })?;
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(BlockingError::Panicked { what, message: panic_message(&*panic) }),
            Err(_) => Err(BlockingError::Panicked { what, message: "the thread ended without a result".into() }),
        }
    }
}

/// A tokio runtime whose threads all run at [`BATCH_NICE`], for a repack's async work. That work is its
/// downloads and its uploads, whose Xet chunking runs on the runtime that starts them. The server's own
/// runtime keeps the pages.
pub struct BatchRuntime {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl BatchRuntime {
    /// Starts the runtime with `threads` workers on a low-priority thread. The workers inherit its priority.
    pub fn start(threads: usize) -> std::io::Result<BatchRuntime> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new().name("batch runtime".into()).spawn(move || {
            lower_priority("the batch runtime");
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads.max(1))
                .thread_name("batch")
                .enable_all()
                .build();
            match runtime {
                Ok(runtime) => {
                    let _ = handle_tx.send(Ok(runtime.handle().clone()));
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                }
                Err(e) => {
                    let _ = handle_tx.send(Err(e));
                }
            }
        })?;
        let handle = handle_rx.recv().map_err(|_| std::io::Error::other("the batch runtime's thread ended"))??;
        Ok(BatchRuntime { handle, stop: Some(stop) })
    }

    /// Where to spawn batch tasks.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for BatchRuntime {
    /// Lets the runtime's thread shut it down. Tasks still running are dropped at their next await.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// In debug builds, panics when called on an async runtime's thread, in its executor or its blocking pool.
/// Plain threads pass, such as those of the CLI's `fix` and `scan` and of [`run`].
pub fn assert_off_executor(what: &str) {
    if cfg!(debug_assertions) {
        let on_runtime = tokio::runtime::Handle::try_current().is_ok();
        assert!(!on_runtime, "{what} is batch work and must not run on the async runtime (use blocking::run)");
    }
}

/// Makes the calling thread, and every thread it starts from now on, batch work. The commands that run
/// repacks and serve no pages call it: `repack` and `worker`. Their async work then shares the cores evenly
/// with their batch threads instead of starving them. That async work is the download and the upload's
/// hashing and chunking. Otherwise the upload at nice 0 slows the MLX check beside it; see BENCHMARKS.md.
pub fn run_as_batch(what: &str) {
    lower_priority(what);
}

/// This process's peak resident memory so far, where the system reports it. It reads `VmHWM`, which leaves
/// out processes this one started.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().strip_suffix("kB")?.trim();
    kib.parse::<u64>().ok()?.checked_mul(1024)
}

/// Lowers this thread's priority. On Linux the nice value belongs to the thread, not the process, so the
/// server's threads keep theirs. If the system refuses, as some sandboxes do, the work still runs.
fn lower_priority(what: &str) {
    #[cfg(target_os = "linux")]
    let lowered = rustix::thread::gettid();
    #[cfg(target_os = "linux")]
    let lowered = rustix::process::setpriority_process(Some(lowered), BATCH_NICE);
    #[cfg(not(target_os = "linux"))]
    let lowered = rustix::process::setpriority_process(None, BATCH_NICE);
    if let Err(e) = lowered {
        tracing::debug!(work = what, error = %e, "cannot lower the batch thread's priority");
    }
}

/// What ended a task that did not return: "cancelled", or "panicked: " and its message. The message goes to
/// logs, the store and the dashboard, so its control characters are escaped.
pub fn join_error_message(e: tokio::task::JoinError) -> String {
    if e.is_cancelled() {
        return "cancelled".into();
    }
    format!("panicked: {}", crate::untrusted::escape_control(&panic_message(&*e.into_panic())))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_on_the_runtime_is_caught_and_work_through_run_passes() {
        assert_eq!(run("a sum", || 2 + 2).await.unwrap(), 4);
        run("the check", || assert_off_executor("the check")).await.unwrap();
        let caught = std::panic::catch_unwind(|| assert_off_executor("a re-layout"));
        assert!(caught.is_err(), "called from the test's executor thread");
        let pool = tokio::task::spawn_blocking(|| std::panic::catch_unwind(|| assert_off_executor("fix")));
        assert!(pool.await.unwrap().is_err(), "tokio's blocking pool is the runtime's too");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_batch_runtime_and_its_blocking_pool_run_below_the_server() {
        let nice = || rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let mine = nice();
        let batch = BatchRuntime::start(2).unwrap();
        let (worker, pool) = batch
            .handle()
            .spawn(async move { (nice(), tokio::task::spawn_blocking(nice).await.unwrap()) })
            .await
            .unwrap();
        assert_eq!((worker, pool), ((mine + BATCH_NICE).min(19), (mine + BATCH_NICE).min(19)));
        assert_eq!(nice(), mine, "the server's runtime keeps its priority");
    }

    #[tokio::test]
    async fn a_panic_in_the_work_is_an_error_that_names_it() {
        let e = run("the MLX check", || panic!("boom")).await.unwrap_err();
        assert_eq!(e.to_string(), "the MLX check panicked: boom");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn batch_threads_and_what_they_start_run_below_the_server() {
        let mine = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let (batch, child) = run("a priority probe", || {
            let me = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
            let inner = std::thread::spawn(|| rustix::process::getpriority_process(Some(rustix::thread::gettid())));
            let child = std::process::Command::new("sh").args(["-c", "cut -d' ' -f19 /proc/self/stat"]).output();
            assert_eq!(inner.join().unwrap().unwrap(), me, "threads it starts inherit it");
            (me, String::from_utf8(child.unwrap().stdout).unwrap())
        })
        .await
        .unwrap();
        assert_eq!(batch, (mine + BATCH_NICE).min(19), "the batch thread is nicer than the caller ({mine})");
        assert_eq!(child.trim().parse::<i32>().unwrap(), batch, "processes it starts inherit it");
        let after = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        assert_eq!(after, mine, "the caller's thread keeps its priority");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_command_runs_its_runtime_at_the_priority_of_its_batch_work() {
        let nice = || rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let mine = nice();
        let (main, worker, batch) = std::thread::spawn(move || {
            run_as_batch("a command probe");
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let worker = tokio::spawn(async move { nice() }).await.unwrap();
                (nice(), worker, run("a probe", nice).await.unwrap())
            })
        })
        .join()
        .unwrap();
        let low = (mine + BATCH_NICE).min(19);
        assert_eq!((main, worker, batch), (low, low, low), "one priority for the command's threads");
        assert_eq!(nice(), mine, "other threads keep theirs");
    }
}
