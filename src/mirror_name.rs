//! The mirror naming rule: which repo holds the aligned mirror of a source, from the source's id alone.
//! The worker names the mirrors it publishes by it, and `scan` finds them by it.

use crate::hashing::sha256_hex;

/// The longest name the mirror may have: the Hub's limit for a repo name.
pub(crate) const MAX_NAME: usize = crate::untrusted::MAX_NAME_LEN;

/// How many hex digits of the source id's SHA-256 a mirror name carries. 16 digits hold 64 bits. So finding
/// another source id with the same mirror name costs about 2^64 hashes, far more than a squatter can spend.
pub(crate) const NAME_DIGEST_HEX: usize = 16;

/// The mirror name of `source`: `{target_namespace}/{namespace}-{name}-{digest}-aligned`.
/// `{namespace}-{name}` is the source id in lower case, cut at the end so the name fits the Hub's 96
/// characters. `digest` is the first `NAME_DIGEST_HEX` hex digits of the SHA-256 of the lower-case source id.
///
/// The name follows from the source id alone. So it does not depend on the order repos are seen, and no
/// other source can take it first. The readable part alone is not unique: `a-b/c` and `a/b-c` read alike,
/// and a cut drops a name's tail. The digest is unique. Two ids that differ only in case name one Hub repo,
/// and they get one mirror name. Two ids for two repos get names that differ even without regard to case.
/// When the readable name is not a valid repo id (a `--` run inside it, say), the name is
/// `{target_namespace}/{digest}-aligned`.
pub fn mirror_name(source: &str, target_namespace: &str) -> String {
    let folded = source.to_ascii_lowercase();
    let suffix = format!("-{}", name_tail(&folded));
    let readable: String = folded.replace('/', "-").chars().take(MAX_NAME - suffix.len()).collect();
    // A cut can end on a `-` or `.`, and the Hub refuses a `--` or `..` run.
    let readable = readable.trim_end_matches(['-', '.']);
    let named = format!("{target_namespace}/{readable}{suffix}");
    if crate::untrusted::check_repo_id(&named).is_ok() {
        named
    } else {
        format!("{target_namespace}/{}", name_tail(&folded))
    }
}

/// The end every mirror name of `source` shares, whatever its namespace: `{digest}-aligned`. One Hub search
/// for it finds the mirror in any namespace.
pub fn mirror_name_tail(source: &str) -> String {
    name_tail(&source.to_ascii_lowercase())
}

fn name_tail(folded: &str) -> String {
    format!("{}-aligned", &sha256_hex(folded.as_bytes())[..NAME_DIGEST_HEX])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mirror_name_ends_with_the_tail() {
        for source in ["mlx-community/Llama-3.2-1B-Instruct-4bit", &format!("a/{}", "b".repeat(96))] {
            for ns in ["hubalign", "someone-else"] {
                assert!(mirror_name(source, ns).ends_with(&mirror_name_tail(source)), "{source} under {ns}");
            }
        }
        assert_eq!(mirror_name_tail("Org/Model"), mirror_name_tail("org/model"), "case is folded");
    }
}
