//! The MLX check and the upload, at once: the manifest goes into the commit as a stream whose bytes the
//! commit gets only after the check has passed.
//!
//! hf-hub reads every file of a commit once to classify and hash it before it sends anything, then again to
//! upload it through Xet or to put it inline in the commit's body, and sends the commit only when every file
//! has been read that second time. So the first read of the held file is answered at once (the shards'
//! hashing and chunking go on while the check runs), and every later read waits for the verdict: a passed
//! check releases the bytes, a failed one makes the read an error, and hf-hub then sends no commit. The test
//! `repack::overlap` holds hf-hub to that order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use hf_hub::HFError;
use hf_hub::repository::{AddSource, SourceByteStream, StreamFactory, StreamSource};
use tokio::sync::watch;

/// The check's verdict: none yet, passed, or failed with why.
pub type Verdict = Option<Result<(), String>>;

/// Bytes whose second and later reads wait for a verdict.
pub struct HeldFile {
    bytes: Bytes,
    opens: AtomicUsize,
    verdict: watch::Receiver<Verdict>,
}

impl HeldFile {
    /// A commit source for `bytes`, held back by `verdict`.
    pub fn source(bytes: Bytes, verdict: watch::Receiver<Verdict>) -> AddSource {
        let size = bytes.len() as u64;
        AddSource::Stream(StreamSource::new(Arc::new(HeldFile { bytes, opens: AtomicUsize::new(0), verdict }), size))
    }
}

impl StreamFactory for HeldFile {
    fn open(&self) -> SourceByteStream {
        let first = self.opens.fetch_add(1, Ordering::SeqCst) == 0;
        let (bytes, mut verdict) = (self.bytes.clone(), self.verdict.clone());
        Box::pin(futures_util::stream::once(async move {
            if first {
                return Ok(bytes);
            }
            let answer = verdict.wait_for(Option::is_some).await.map(|v| v.clone());
            match answer {
                Ok(Some(Ok(()))) => Ok(bytes),
                Ok(Some(Err(why))) => Err(HFError::Other(format!("held back, the MLX check failed: {why}"))),
                _ => Err(HFError::Other("held back: the MLX check ended without a verdict".into())),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt as _;

    use super::*;

    async fn read(source: &AddSource) -> Result<Bytes, String> {
        let AddSource::Stream(s) = source else { panic!("a stream") };
        let mut stream = s.open();
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
        }
        Ok(out.into())
    }

    #[tokio::test]
    async fn the_first_read_is_free_and_later_ones_wait_for_the_verdict() {
        let (tx, rx) = watch::channel(None);
        let source = HeldFile::source(Bytes::from_static(b"{\"shards\":[]}"), rx);
        assert_eq!(read(&source).await.unwrap(), &b"{\"shards\":[]}"[..]);
        let second = tokio::time::timeout(Duration::from_millis(100), read(&source)).await;
        assert!(second.is_err(), "waits while there is no verdict");
        let waiting = tokio::spawn({
            let source = source.clone();
            async move { read(&source).await }
        });
        tx.send_replace(Some(Ok(())));
        assert_eq!(waiting.await.unwrap().unwrap(), &b"{\"shards\":[]}"[..]);
    }

    #[tokio::test]
    async fn a_failed_check_or_none_at_all_makes_the_read_an_error() {
        let (tx, rx) = watch::channel(None);
        let source = HeldFile::source(Bytes::from_static(b"m"), rx);
        read(&source).await.unwrap();
        tx.send_replace(Some(Err("tensor w differs".into())));
        assert!(read(&source).await.unwrap_err().contains("tensor w differs"));

        let (tx, rx) = watch::channel(None);
        let source = HeldFile::source(Bytes::from_static(b"m"), rx);
        read(&source).await.unwrap();
        drop(tx);
        assert!(read(&source).await.unwrap_err().contains("without a verdict"));
    }
}
