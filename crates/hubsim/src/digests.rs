//! Computes the digests the Hub reports: SHA-256 of content (LFS oids, commit ids) and git's blob id of
//! regular files.

use sha1::Sha1;
use sha2::{Digest, Sha256};

/// Lower-case hex of a finished SHA-256.
pub fn finish_hex(hasher: Sha256) -> String {
    hex::encode(hasher.finalize())
}

/// Hex SHA-256 of a byte string.
pub fn sha256_hex(data: &[u8]) -> String {
    finish_hex(Sha256::new_with_prefix(data))
}

/// Computes git's blob id, `sha1("blob {len}\0" + content)`. The Hub reports it as a regular file's `oid`.
pub fn git_blob_oid(content: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    hex::encode(h.finalize())
}

/// A stable pseudo database id of `s`: 96 bits, so 24 hex digits, as the Hub's object ids have.
pub fn object_id(s: &str) -> u128 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u128, |h, b| (h ^ u128::from(b)).wrapping_mul(0x100_0000_01b3))
        & ((1 << 96) - 1)
}

/// A repo id's namespace: the part before the `/` (the whole id when there is none).
pub fn namespace_of(id: &str) -> &str {
    id.split_once('/').map_or(id, |(ns, _)| ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_oid_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(git_blob_oid(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
    }

    #[test]
    fn sha256_of_nothing() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
