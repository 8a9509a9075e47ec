//! What may be mirrored, and how visibly: never a public copy of something that is not public.
//!
//! A gated source is never mirrored (its licence gate cannot be carried over), nor a disabled one, nor one
//! that is gone. A private source is mirrored only when the operator allows private mirrors of private
//! sources and the mirror goes to the source's own namespace; that mirror stays private. The check runs on
//! the stored flags when jobs are queued, on the Hub's answer when a job starts, and again right before
//! publishing, since a source can change between the audit and the commit.

use crate::hub::info::ModelInfo;
use crate::hub::{Access, HubError};

/// The reason a gated source is skipped.
pub const GATED: &str = "gated: the licence gate cannot be carried over";
/// The reason a disabled source is skipped.
pub const DISABLED: &str = "disabled: the Hub disabled the source";
/// The reason a private source is skipped.
pub const PRIVATE: &str = "private: a mirror would publish what only the source's owners can see (--private-mirrors allows a private mirror in the source's own namespace)";
/// The reason a source that vanished is skipped.
pub const GONE: &str = "gone: the source was deleted or is no longer visible";

/// How a mirror may be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Anyone may see it, as they may see the source.
    Public,
    /// Only the namespace's members may, as only they may see the source.
    Private,
}

/// Who may see the source, as far as publication cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceFlags {
    /// Private.
    pub private: bool,
    /// Behind a licence gate.
    pub gated: bool,
    /// Disabled by the Hub.
    pub disabled: bool,
}

/// Where private mirrors of private sources are allowed: only into the namespace named here, and only for
/// sources in that same namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrivateMirrors(pub Option<String>);

impl PrivateMirrors {
    fn allows(&self, source: &str, target_namespace: &str) -> bool {
        let source_ns = source.split_once('/').map_or(source, |(ns, _)| ns);
        self.0.as_deref() == Some(target_namespace) && source_ns == target_namespace
    }
}

/// How a source with these flags may be mirrored into `target_namespace`, or why not.
pub fn visibility(
    source: &str,
    flags: SourceFlags,
    target_namespace: &str,
    private: &PrivateMirrors,
) -> Result<Visibility, &'static str> {
    if flags.disabled {
        Err(DISABLED)
    } else if flags.gated {
        Err(GATED)
    } else if flags.private && private.allows(source, target_namespace) {
        Ok(Visibility::Private)
    } else if flags.private {
        Err(PRIVATE)
    } else {
        Ok(Visibility::Public)
    }
}

/// The same decision from the Hub's answer for the source now: a source that is gone, or that the Hub
/// reports gated or disabled, is not mirrored; an answer that says nothing certain is an error to retry.
pub fn visibility_now(
    source: &str,
    info: Result<&ModelInfo, &HubError>,
    target_namespace: &str,
    private: &PrivateMirrors,
) -> Result<Result<Visibility, &'static str>, String> {
    match info {
        Ok(info) => Ok(visibility(
            source,
            SourceFlags { private: info.flags.private, gated: info.flags.is_gated(), disabled: info.flags.disabled },
            target_namespace,
            private,
        )),
        Err(e) => match e.access() {
            Some(Access::Vanished) => Ok(Err(GONE)),
            Some(Access::Gated) => Ok(Err(GATED)),
            Some(Access::Disabled) => Ok(Err(DISABLED)),
            Some(Access::Moved) | None => Err(format!("checking the source's visibility: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: SourceFlags = SourceFlags { private: false, gated: false, disabled: false };

    #[test]
    fn nothing_that_is_not_public_gets_a_public_mirror() {
        let none = PrivateMirrors::default();
        let mine = PrivateMirrors(Some("me".into()));
        assert_eq!(visibility("a/b", OPEN, "me", &none), Ok(Visibility::Public));
        assert_eq!(visibility("a/b", SourceFlags { gated: true, ..OPEN }, "me", &mine), Err(GATED));
        assert_eq!(visibility("me/b", SourceFlags { disabled: true, ..OPEN }, "me", &mine), Err(DISABLED));
        let private = SourceFlags { private: true, ..OPEN };
        assert_eq!(visibility("a/b", private, "me", &none), Err(PRIVATE));
        assert_eq!(visibility("a/b", private, "me", &mine), Err(PRIVATE), "another owner's private repo");
        assert_eq!(visibility("me/b", private, "me", &none), Err(PRIVATE), "not without the operator's flag");
        assert_eq!(visibility("me/b", private, "me", &mine), Ok(Visibility::Private));
        assert_eq!(visibility("me/b", SourceFlags { gated: true, ..private }, "me", &mine), Err(GATED));
    }
}
