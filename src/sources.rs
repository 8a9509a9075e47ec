//! What counts as a source. The bounds here are those real MLX repos stay within; the audit and the worker
//! both hold a repo to them. The mirror mark tells this service's own mirrors apart from the repos it audits.

/// The tag every mirror's card carries. A listed repo that carries it is a mirror, this service's or a
/// peer's, and never a source. It is not audited and counts in no total.
pub const MIRROR_TAG: &str = "aligned-safetensors";

/// The most shards a repo may have to be audited or mirrored. Real MLX repos have fewer than 200.
pub(crate) const MAX_SHARDS: usize = 256;

/// The most files a repo's tree may list. Real MLX repos list a few dozen.
pub(crate) const MAX_FILES: usize = 10_000;

/// The largest file the Hub stores: its documented hard limit per file is 50 GB. A shard that claims more
/// is lying, and its size counts in no total.
pub(crate) const MAX_FILE_BYTES: u64 = 50_000_000_000;

/// Whether a listed repo is a mirror rather than a source. A mirror carries [`MIRROR_TAG`], or lives in one
/// of the namespaces this service publishes to. Namespaces compare as the Hub compares names.
pub(crate) fn is_mirror(id: &str, tags: &[String], own_namespaces: &[String]) -> bool {
    let namespace = crate::untrusted::namespace_of(id);
    tags.iter().any(|t| t == MIRROR_TAG) || own_namespaces.iter().any(|ns| ns.eq_ignore_ascii_case(namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_is_known_by_its_tag_or_its_namespace() {
        let own = vec!["HubAlign".to_owned()];
        assert!(is_mirror("someone/x", &[MIRROR_TAG.to_owned()], &[]));
        assert!(is_mirror("hubalign/x-aligned", &[], &own));
        assert!(!is_mirror("mlx-community/x", &["mlx".to_owned()], &own));
    }
}
