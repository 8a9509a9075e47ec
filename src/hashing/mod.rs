//! Computes SHA-256 digests: as hex, fed in pairs, or one per consecutive span of a byte stream.

use sha2::{Digest, Sha256};

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod pair;
#[cfg(target_arch = "aarch64")]
mod sha_arm;
#[cfg(target_arch = "x86_64")]
mod sha_ni;
mod stream;

pub use stream::{PairKernel, Sha256Stream, update_both, update_both_with};

/// Lower-case hex of a byte string.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Whether `s` is `len` hex digits (a git or LFS object id, a recorded digest).
pub fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Feeds the next `len` bytes of `reader` to `sink`, a MiB at a time. Fails if the reader ends first, as when
/// a file shrank since its size was read.
pub fn feed_exact(reader: &mut dyn std::io::Read, len: u64, sink: &mut dyn FnMut(&[u8])) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = reader.read(&mut buf[..left.min(1 << 20) as usize])?;
        if n == 0 {
            return Err(std::io::Error::other("the file shrank while read"));
        }
        sink(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}

/// Hex SHA-256 of a finished hasher.
pub fn finish_hex(hasher: Sha256) -> String {
    to_hex(&hasher.finalize())
}

/// Hex SHA-256 of a byte string.
pub fn sha256_hex(data: &[u8]) -> String {
    finish_hex(Sha256::new_with_prefix(data))
}

/// Computes git's blob id, `sha1("blob {len}\0" + content)`. The Hub reports it as a regular file's `oid`.
pub fn git_blob_oid(content: &[u8]) -> String {
    use sha1::Sha1;
    let mut h = Sha1::new();
    sha1::Digest::update(&mut h, format!("blob {}\0", content.len()).as_bytes());
    sha1::Digest::update(&mut h, content);
    to_hex(&sha1::Digest::finalize(h))
}

/// Hashes a stream that is the concatenation of spans of known lengths, giving one digest per span.
///
/// It takes per-tensor hashes while the payload streams past. Tensors are contiguous, so the stream splits at
/// their boundaries. Zero-length spans get the digest of the empty string.
#[derive(Debug)]
pub struct SpanHasher {
    lens: Vec<u64>,
    digests: Vec<String>,
    current: Sha256Stream,
    left_in_current: u64,
}

impl SpanHasher {
    /// Starts with the span lengths, in stream order.
    pub fn new(lens: Vec<u64>) -> SpanHasher {
        let mut h = SpanHasher {
            digests: Vec::with_capacity(lens.len()),
            left_in_current: lens.first().copied().unwrap_or(0),
            lens,
            current: Sha256Stream::default(),
        };
        h.close_empty_spans();
        h
    }

    /// Feeds the next bytes of the stream.
    pub fn update(&mut self, data: &[u8]) {
        self.update_span_by_span(data, stream::Sha256Stream::update);
    }

    /// Feeds the next bytes of the stream to this and, in step with it, all of them to `whole`.
    pub fn update_with(&mut self, data: &[u8], whole: &mut Sha256Stream) {
        let mut fed = 0;
        self.update_span_by_span(data, |current, span| {
            update_both(current, span, whole, span);
            fed += span.len();
        });
        // Bytes past the last span still belong to the whole stream.
        whole.update(&data[fed..]);
    }

    fn update_span_by_span(&mut self, mut data: &[u8], mut feed: impl FnMut(&mut Sha256Stream, &[u8])) {
        while !data.is_empty() && self.digests.len() < self.lens.len() {
            let take = self.left_in_current.min(data.len() as u64) as usize;
            feed(&mut self.current, &data[..take]);
            self.left_in_current -= take as u64;
            data = &data[take..];
            self.close_empty_spans();
        }
    }

    fn close_empty_spans(&mut self) {
        while self.left_in_current == 0 && self.digests.len() < self.lens.len() {
            let done = std::mem::take(&mut self.current);
            self.digests.push(done.finish_hex());
            self.left_in_current = self.lens.get(self.digests.len()).copied().unwrap_or(0);
        }
    }

    /// Returns the digests, one per span, or `None` if the stream ended early.
    pub fn finish(self) -> Option<Vec<String>> {
        (self.digests.len() == self.lens.len()).then_some(self.digests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_known_digest() {
        assert_eq!(to_hex(&[0, 0xAB, 0x10]), "00ab10");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn spans_split_across_arbitrary_chunks() {
        let data: Vec<u8> = (0..=255).collect();
        let lens = vec![0, 10, 0, 100, 146, 0];
        let expected: Vec<String> = {
            let mut at = 0;
            lens.iter()
                .map(|&l| {
                    let d = sha256_hex(&data[at..at + l as usize]);
                    at += l as usize;
                    d
                })
                .collect()
        };
        for chunk in [1, 7, 64, 1000] {
            let mut h = SpanHasher::new(lens.clone());
            data.chunks(chunk).for_each(|c| h.update(c));
            assert_eq!(h.finish().as_ref(), Some(&expected), "chunk {chunk}");
        }
        let mut short = SpanHasher::new(lens.clone());
        short.update(&data[..50]);
        assert_eq!(short.finish(), None);

        // Feed it in step with a whole-stream digest, which also gets the bytes past the last span.
        let mut trailing = data.clone();
        trailing.extend_from_slice(b"after the spans");
        for chunk in [1, 7, 64, 1000] {
            let (mut h, mut whole) = (SpanHasher::new(lens.clone()), Sha256Stream::with_prefix(b"head"));
            trailing.chunks(chunk).for_each(|c| h.update_with(c, &mut whole));
            assert_eq!(h.finish().as_ref(), Some(&expected), "chunk {chunk}");
            assert_eq!(whole.finish_hex(), sha256_hex(&[&b"head"[..], &trailing].concat()), "chunk {chunk}");
        }
    }
}
