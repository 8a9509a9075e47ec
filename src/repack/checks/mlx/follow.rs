//! What the download tells an MLX check that follows it (`verify_mlx.py --follow`): which repaired shard is
//! being written where, how far, when it is kept, and where the bundle is staged at the end. Sent as JSON
//! lines on the check's stdin (see the script's doc for the protocol), so that the check evaluates each array
//! as soon as its bytes are written, and ends soon after the download instead of starting after it.
//!
//! Shards repaired as they stream are followed. A header-padded one is written once, front to back, in
//! writes of whole pages, so a byte announced as written never changes, and a page the check reads is
//! written whole. It is still written past the page cache (`O_DIRECT`): through it, the same download cost
//! this machine 1.3 cores instead of one, and took twice as long. The check reads it back from the disk,
//! asking the kernel to read ahead only within what is written; a read the kernel made ahead of a write is
//! dropped by the write itself (the kernel invalidates the cached range of a direct write), and in any case a
//! wrong byte can only fail the follow, never pass it, which then costs a check of the staged bundle.
//!
//! A reordered one is written through the page cache, each tensor at its new offset as its bytes come, so
//! tensors are whole in the source's order, not the file's: it is announced tensor by tensor
//! ([`FollowEvent::Placed`]), each tensor written once and never again, and the check judges each by its
//! digest. A shard copied as it was, or one an earlier attempt left, is checked whole once the bundle is
//! staged.

use std::path::{Path, PathBuf};

/// One thing the check is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowEvent {
    /// `file`'s repaired shard is being written at `path`, at its final length, its header written.
    Writing {
        /// The shard's name in the bundle.
        file: String,
        /// Where it is written now (a temporary name).
        path: PathBuf,
        /// Whether it is told tensor by tensor ([`FollowEvent::Placed`], a reorder) rather than by its
        /// written length ([`FollowEvent::Written`], front to back).
        by_tensor: bool,
    },
    /// These tensors of `file`'s reordered shard are written whole, each at its new offset.
    Placed {
        /// The shard's name in the bundle.
        file: String,
        /// The tensors, by name.
        tensors: Vec<String>,
    },
    /// The first `bytes` of `file`'s repaired shard are written.
    Written {
        /// The shard's name in the bundle.
        file: String,
        /// Its written length.
        bytes: u64,
    },
    /// The source of `file` matched the Hub's hash, and its repaired shard is in place at `path`.
    Kept {
        /// The shard's name in the bundle.
        file: String,
        /// Where it is kept.
        path: PathBuf,
    },
    /// The bundle is staged in `dir`, with its manifest: the check judges it and ends.
    Output {
        /// The staged bundle.
        dir: PathBuf,
    },
}

impl FollowEvent {
    /// The event as the script reads it: one line of JSON, without its newline. A path that is not UTF-8
    /// cannot be said; the worker's own paths always are, and the check then judges that shard whole.
    pub fn to_line(&self) -> String {
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let value = match self {
            FollowEvent::Writing { file, path: at, by_tensor: false } => {
                serde_json::json!({ "writing": file, "path": path(at) })
            }
            FollowEvent::Writing { file, path: at, by_tensor: true } => {
                serde_json::json!({ "writing": file, "path": path(at), "by": "tensor" })
            }
            FollowEvent::Placed { file, tensors } => serde_json::json!({ "placed": file, "tensors": tensors }),
            FollowEvent::Written { file, bytes } => serde_json::json!({ "written": file, "bytes": bytes }),
            FollowEvent::Kept { file, path: at } => serde_json::json!({ "kept": file, "path": path(at) }),
            FollowEvent::Output { dir } => serde_json::json!({ "output": path(dir) }),
        };
        value.to_string()
    }
}

/// Where the download sends its events; cloned into each shard's writer. Nothing waits on it: a check
/// that has gone only stops hearing.
#[derive(Debug, Clone)]
pub struct FollowSink(std::sync::mpsc::Sender<FollowEvent>);

impl FollowSink {
    /// A sink and the receiving end the check's feeder reads.
    pub fn channel() -> (FollowSink, std::sync::mpsc::Receiver<FollowEvent>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (FollowSink(tx), rx)
    }

    /// Sends `event`, if the check still listens.
    pub fn tell(&self, event: FollowEvent) {
        let _ = self.0.send(event);
    }

    /// What a repaired shard's writer calls with its written length: `Writing` once the data section
    /// (from `data_start` on) is reached, so the header is there to read, then `Written` each time.
    pub fn writer_reports(&self, file: &str, path: &Path, data_start: u64) -> crate::safetensors::direct::Reporter {
        let (sink, file, path) = (self.clone(), file.to_owned(), path.to_owned());
        let mut announced = false;
        Box::new(move |bytes| {
            if !announced && bytes >= data_start {
                announced = true;
                sink.tell(FollowEvent::Writing { file: file.clone(), path: path.clone(), by_tensor: false });
            }
            if announced {
                sink.tell(FollowEvent::Written { file: file.clone(), bytes });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_announces_a_shard_once_its_header_is_written_then_each_length() {
        let (sink, events) = FollowSink::channel();
        let mut report = sink.writer_reports("model.safetensors", Path::new("/w/.tmp"), 100);
        for bytes in [64, 4096, 8192] {
            report(bytes);
        }
        drop((report, sink));
        let lines: Vec<serde_json::Value> =
            events.iter().map(|e| serde_json::from_str(&e.to_line()).unwrap()).collect();
        assert_eq!(
            lines,
            [
                serde_json::json!({"writing": "model.safetensors", "path": "/w/.tmp"}),
                serde_json::json!({"written": "model.safetensors", "bytes": 4096}),
                serde_json::json!({"written": "model.safetensors", "bytes": 8192}),
            ]
        );
        let reorder = [
            FollowEvent::Writing { file: "m.safetensors".into(), path: "/w/.m".into(), by_tensor: true },
            FollowEvent::Placed { file: "m.safetensors".into(), tensors: vec!["a".into(), "b".into()] },
        ];
        let lines: Vec<serde_json::Value> =
            reorder.iter().map(|e| serde_json::from_str(&e.to_line()).unwrap()).collect();
        assert_eq!(
            lines,
            [
                serde_json::json!({"writing": "m.safetensors", "path": "/w/.m", "by": "tensor"}),
                serde_json::json!({"placed": "m.safetensors", "tensors": ["a", "b"]}),
            ]
        );
        let output = FollowEvent::Output { dir: "/w/out".into() }.to_line();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&output).unwrap(),
            serde_json::json!({"output": "/w/out"})
        );
    }
}
