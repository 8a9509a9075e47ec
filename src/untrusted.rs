//! Values from outside, made safe. Repo ids, commits and file paths are checked by the Hub's own rules where
//! they enter. They are percent-encoded where they leave. Any text from outside is escaped before it reaches
//! a terminal. Nothing that fails here reaches a path, a URL, SQL or a terminal as it came.

use std::borrow::Cow;
use std::fmt::Write as _;

use thiserror::Error;

/// The longest namespace or repo name the Hub accepts.
pub const MAX_NAME_LEN: usize = 96;
/// The longest file path taken from a listing or tree. Git allows 4096, but no model needs more than this.
pub const MAX_PATH_LEN: usize = 1024;
/// The longest branch or tag name taken as a revision.
pub const MAX_REVISION_LEN: usize = 256;
/// How much of a refused value an error message quotes.
const QUOTED_LEN: usize = 120;

/// A value from outside that breaks the Hub's rules. `value` is already escaped and shortened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{what} {value}: {reason}")]
pub struct Invalid {
    /// What was checked: `repo id`, `commit`, `revision`, `file path`.
    pub what: &'static str,
    /// The value, quoted, with control characters escaped and at most `QUOTED_LEN` characters kept.
    pub value: String,
    /// Which rule it breaks.
    pub reason: &'static str,
}

fn invalid(what: &'static str, value: &str, reason: &'static str) -> Invalid {
    Invalid { what, value: quote(value), reason }
}

/// `value` in double quotes, escaped for a terminal and cut to a readable length.
pub fn quote(value: &str) -> String {
    let mut cut: String = value.chars().take(QUOTED_LEN).collect();
    if cut.len() < value.len() {
        cut.push('…');
    }
    format!("\"{}\"", escape_control(&cut))
}

/// Checks `namespace/name` against the Hub's rules:
///
/// - The id has exactly one `/`.
/// - Each part has 1–96 characters of `[A-Za-z0-9._-]`.
/// - Each part starts and ends with a letter, digit or `_`, and has no `--` or `..`.
/// - The name does not end in `.git`.
pub fn check_repo_id(id: &str) -> Result<(), Invalid> {
    let fail = |reason| Err(invalid("repo id", id, reason));
    let Some((namespace, name)) = id.split_once('/') else { return fail("not namespace/name") };
    if name.contains('/') {
        return fail("more than one `/`");
    }
    for part in [namespace, name] {
        if part.is_empty() {
            return fail("an empty namespace or name");
        }
        if part.len() > MAX_NAME_LEN {
            return fail("a namespace or name longer than 96 characters");
        }
        if !part.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
            return fail("characters outside [A-Za-z0-9._-]");
        }
        let word = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !word(part.bytes().next()) || !word(part.bytes().last()) {
            return fail("a part that starts or ends with `-` or `.`");
        }
        if part.contains("--") || part.contains("..") {
            return fail("a `--` or `..` run");
        }
    }
    if name.ends_with(".git") {
        return fail("a name ending in `.git`");
    }
    Ok(())
}

/// The namespace of a repo id: the part before its `/`, or all of it when there is none.
pub fn namespace_of(id: &str) -> &str {
    id.split_once('/').map_or(id, |(ns, _)| ns)
}

/// Checks a namespace, a user or organisation name, by the same rules as a repo id's parts.
pub fn check_namespace(namespace: &str) -> Result<(), Invalid> {
    check_repo_id(&format!("{namespace}/x")).map_err(|e| Invalid { what: "namespace", value: quote(namespace), ..e })
}

/// Checks a commit id as the listing gives it: 40 lowercase hexadecimal digits.
pub fn check_commit(sha: &str) -> Result<(), Invalid> {
    if sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(invalid("commit", sha, "not 40 lowercase hexadecimal digits"))
    }
}

/// Checks a revision a person typed: a commit, a branch, a tag, or `refs/pr/N`. It must be printable ASCII
/// without spaces or `\`, with no `..` and no leading `/` or `-`, and at most [`MAX_REVISION_LEN`]
/// characters. It is still encoded wherever it is used.
pub fn check_revision(rev: &str) -> Result<(), Invalid> {
    let fail = |reason| Err(invalid("revision", rev, reason));
    if rev.is_empty() || rev.len() > MAX_REVISION_LEN {
        return fail("empty or longer than 256 characters");
    }
    if !rev.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
        return fail("characters other than printable ASCII");
    }
    if rev.contains("..") || rev.starts_with(['/', '-']) {
        return fail("a `..`, or a leading `/` or `-`");
    }
    Ok(())
}

/// Checks a file path from a listing or tree: relative, `/`-separated, no empty, `.` or `..` segment, no
/// backslash, no control character, at most [`MAX_PATH_LEN`] bytes.
pub fn check_repo_path(path: &str) -> Result<(), Invalid> {
    let fail = |reason| Err(invalid("file path", path, reason));
    if path.is_empty() || path.len() > MAX_PATH_LEN {
        return fail("empty or longer than 1024 bytes");
    }
    if path.starts_with('/') {
        return fail("an absolute path");
    }
    if path.contains('\\') {
        return fail("a backslash");
    }
    if path.chars().any(is_escaped) {
        return fail("a control character");
    }
    if path.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..") {
        return fail("an empty, `.` or `..` segment");
    }
    Ok(())
}

/// One path segment, or a whole revision, percent-encoded for a URL. Every byte but `[A-Za-z0-9._~-]` is
/// encoded.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A `/`-separated path, such as a repo id or a file path, with each segment percent-encoded and `/` kept.
pub fn encode_path(path: &str) -> String {
    path.split('/').map(encode_segment).collect::<Vec<_>>().join("/")
}

/// Whether a character must not reach a terminal as it is. These are C0 and C1 controls, DEL, and the
/// Unicode formatting characters that reorder or hide text: bidirectional overrides and isolates, and
/// zero-width marks.
fn is_escaped(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// `s` with every control or text-reordering character written as `\u{…}`. Whenever something is escaped,
/// `\` is written as `\\` too, so the escaping cannot be forged. Borrowed when nothing needs escaping.
pub fn escape_control(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if is_escaped(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `s` as a Python string literal in double quotes, for a command a person copies into Python.
/// Backslashes and double quotes are escaped, and so is every character [`escape_control`] escapes, in
/// Python's own `\xNN` or `\uNNNN` form. So the literal is safe to print and reads back as `s`.
pub fn python_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        let code = u32::from(c);
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            c if !is_escaped(c) => out.push(c),
            _ if code <= 0xFF => {
                let _ = write!(out, "\\x{code:02x}");
            }
            // Every escaped character lies below U+10000.
            _ => {
                let _ = write!(out, "\\u{code:04x}");
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn repo_ids_follow_the_hubs_rules() {
        for ok in
            ["mlx-community/Qwen2.5-7B-Instruct-4bit", "a/b", "_x/y_", "A.B/c-d_e", &format!("n/{}", "x".repeat(96))]
        {
            assert_eq!(check_repo_id(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "noslash",
            "a/b/c",
            "/b",
            "a/",
            "../x",
            "a/..",
            "a/b--c",
            "a/b..c",
            "-a/b",
            "a/b.",
            "a/b.git",
            "a b/c",
            "a/\u{1b}[31m",
            "a/b\n",
            "a/ü",
            &format!("n/{}", "x".repeat(97)),
        ] {
            assert!(check_repo_id(bad).is_err(), "{bad:?}");
        }
        let e = check_repo_id("evil/\u{1b}[2J").unwrap_err().to_string();
        assert!(!e.contains('\u{1b}') && e.contains("\\u{1b}"), "{e}");
    }

    #[test]
    fn commits_and_revisions() {
        assert!(check_commit(&"a".repeat(40)).is_ok());
        for bad in ["A".repeat(40), "a".repeat(39), "g".repeat(40), "../".repeat(14)] {
            assert!(check_commit(&bad).is_err(), "{bad}");
        }
        for ok in ["main", "refs/pr/1", "v1.0", &"0".repeat(40)] {
            assert!(check_revision(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "../main", "/main", "-x", "a\\b", "m\u{7f}", &"x".repeat(257)] {
            assert!(check_revision(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn file_paths_stay_inside() {
        for ok in ["model.safetensors", "sub/dir/x.json", "a..b", ".gitattributes", "weird name (1).json"] {
            assert_eq!(check_repo_path(ok), Ok(()), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./x", "a/.", "a\\b", "x\u{0}y", "x\ny", "a/"] {
            assert!(check_repo_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_repo_path(&"a".repeat(MAX_PATH_LEN + 1)).is_err());
    }

    #[test]
    fn encoding_keeps_only_unreserved_bytes() {
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode_path("sub dir/m?.safetensors"), "sub%20dir/m%3F.safetensors");
        assert_eq!(encode_path("a/b"), "a/b");
        assert_eq!(encode_segment("ü#"), "%C3%BC%23");
    }

    #[test]
    fn control_characters_never_reach_a_terminal() {
        assert!(matches!(escape_control("plain/id"), Cow::Borrowed(_)));
        assert_eq!(escape_control("a\u{1b}[31mb\nc"), "a\\u{1b}[31mb\\u{a}c");
        assert_eq!(escape_control("x\u{202e}y\\"), "x\\u{202e}y\\\\");
        assert_eq!(escape_control("\u{9b}"), "\\u{9b}", "C1 CSI");
        assert!(quote(&"x".repeat(500)).ends_with("…\""));
    }

    #[test]
    fn python_literals_escape_as_python_reads_them() {
        assert_eq!(python_string("/models/Tiny-aligned"), "\"/models/Tiny-aligned\"");
        assert_eq!(python_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        // Python reads `\xNN` and `\uNNNN` as these characters.
        assert_eq!(python_string("x\u{1b}[0m\n\u{202e}ü"), "\"x\\x1b[0m\\x0a\\u202eü\"");
    }

    /// Reads a literal `python_string` wrote, by Python's rules for the escapes it uses.
    fn read_python_string(literal: &str) -> Option<String> {
        let mut chars = literal.strip_prefix('"')?.strip_suffix('"')?.chars();
        let mut out = String::new();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let digits = match chars.next()? {
                'x' => 2,
                'u' => 4,
                c => {
                    out.push(c);
                    continue;
                }
            };
            let hex: String = chars.by_ref().take(digits).collect();
            out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
        }
        Some(out)
    }

    proptest! {
        #[test]
        fn escaped_text_has_no_control_characters(s in any::<String>()) {
            let e = escape_control(&s);
            prop_assert!(!e.chars().any(is_escaped));
        }

        #[test]
        fn python_literals_are_printable_and_read_back(s in any::<String>()) {
            let literal = python_string(&s);
            prop_assert!(!literal.chars().any(is_escaped));
            prop_assert_eq!(read_python_string(&literal), Some(s));
        }

        #[test]
        fn valid_ids_encode_to_themselves(s in "[A-Za-z0-9_][A-Za-z0-9._-]{0,20}[A-Za-z0-9_]/[A-Za-z0-9_]{1,20}") {
            if check_repo_id(&s).is_ok() {
                prop_assert_eq!(encode_path(&s), s);
            }
        }

        #[test]
        fn checked_paths_never_leave_their_directory(s in "[a-z./\\\\\u{0}-\u{1f}]{0,24}") {
            if check_repo_path(&s).is_ok() {
                let p = std::path::Path::new(&s);
                prop_assert!(p.components().all(|c| matches!(c, std::path::Component::Normal(_))), "{}", s);
            }
        }
    }
}
