//! Where the Hub is and who we are, read from the settings `huggingface_hub` reads, as it reads them. These
//! are `HF_ENDPOINT`, `HF_TOKEN`, `HF_TOKEN_PATH` and the token file under `HF_HOME`
//! (`~/.cache/huggingface/token`). `HF_HUB_OFFLINE` forbids any request. `HF_HUB_DISABLE_IMPLICIT_TOKEN`
//! sends only a token given on the command line.

use std::path::PathBuf;

/// The public Hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A secret that never shows in `Debug` or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token string.
    pub fn new(secret: impl Into<String>) -> Token {
        Token(secret.into())
    }

    /// Returns the secret, for an `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Endpoint and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// Base URL, without a trailing slash.
    pub endpoint: String,
    /// The token, if any.
    pub token: Option<Token>,
}

/// Why the Hub cannot be reached with these settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `HF_HUB_OFFLINE` forbids every request, as `huggingface_hub` honours it.
    #[error(
        "HF_HUB_OFFLINE is set, and this command needs the Hub ({endpoint}): unset HF_HUB_OFFLINE to let it go online"
    )]
    Offline {
        /// The Hub it would have asked.
        endpoint: String,
    },
}

impl HubConfig {
    /// Resolves the endpoint and token: explicit values first, then the environment, then the token file.
    /// `HF_HUB_DISABLE_IMPLICIT_TOKEN` rules out the last two for the token. Returns an error under
    /// `HF_HUB_OFFLINE`, because every caller is about to ask the Hub something.
    pub fn resolve(endpoint: Option<String>, token: Option<String>) -> Result<HubConfig, ConfigError> {
        let endpoint = endpoint.or_else(|| env("HF_ENDPOINT")).unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        if env_flag("HF_HUB_OFFLINE") {
            return Err(ConfigError::Offline { endpoint });
        }
        let token = find_token(token).map(|(token, _)| token);
        Ok(HubConfig { endpoint, token })
    }
}

/// Whether an environment variable is set to a true value, as `huggingface_hub` reads its flags (`1`, `ON`,
/// `YES`, `TRUE`, in any case).
pub fn env_flag(key: &str) -> bool {
    env(key).is_some_and(|v| ["1", "ON", "YES", "TRUE"].contains(&v.trim().to_ascii_uppercase().as_str()))
}

/// Returns where the token that [`HubConfig::resolve`] takes comes from, for `doctor`, which never shows the
/// token.
pub fn token_origin(explicit: Option<String>) -> Option<String> {
    find_token(explicit).map(|(_, origin)| origin)
}

/// Returns an environment variable's value, unless it is unset or blank.
fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

/// Returns the token and where it came from: `explicit`, then `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN`, then the
/// token file. Under `HF_HUB_DISABLE_IMPLICIT_TOKEN`, only `explicit` counts.
fn find_token(explicit: Option<String>) -> Option<(Token, String)> {
    if env_flag("HF_HUB_DISABLE_IMPLICIT_TOKEN") {
        let text = explicit?;
        let text = text.trim();
        return (!text.is_empty()).then(|| (Token(text.to_owned()), "--token".to_owned()));
    }
    let from_file = || {
        let path = token_file()?;
        let text = std::fs::read_to_string(&path).ok()?;
        Some((text, format!("the token file {}", path.display())))
    };
    let (text, origin) = explicit
        .map(|t| (t, "--token".to_owned()))
        .or_else(|| env("HF_TOKEN").map(|t| (t, "HF_TOKEN".to_owned())))
        .or_else(|| env("HUGGING_FACE_HUB_TOKEN").map(|t| (t, "HUGGING_FACE_HUB_TOKEN".to_owned())))
        .or_else(from_file)?;
    let text = text.trim();
    (!text.is_empty()).then(|| (Token(text.to_owned()), origin))
}

/// Returns the token file's path: `HF_TOKEN_PATH`, else `token` in [`hf_home`].
fn token_file() -> Option<PathBuf> {
    env_path("HF_TOKEN_PATH").or_else(|| Some(hf_home()?.join("token")))
}

/// Returns `huggingface_hub`'s home folder: `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else
/// `~/.cache/huggingface`. The token file and the cache live under it.
pub(crate) fn hf_home() -> Option<PathBuf> {
    env_path("HF_HOME").or_else(|| {
        let cache = env_path("XDG_CACHE_HOME").or_else(|| env_path("HOME").map(|h| h.join(".cache")))?;
        Some(cache.join("huggingface"))
    })
}

/// Returns the path an environment variable names, unless it is unset or empty.
/// A leading `~` and each `$NAME` in it expand as `huggingface_hub` expands them.
pub(crate) fn env_path(key: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(key).filter(|v| !v.is_empty())?);
    Some(path.to_str().map_or_else(|| path.clone(), expand))
}

/// `path` with a leading `~` or `~/` replaced by `HOME`, then each `$NAME` or `${NAME}` that names a set
/// variable replaced by its value, as Python's `os.path.expanduser` and `os.path.expandvars` do.
/// A variable that is not set stays as written.
fn expand(path: &str) -> PathBuf {
    let home = std::env::var("HOME").ok();
    let path = match (path.strip_prefix('~'), home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => format!("{home}{rest}"),
        _ => path.to_owned(),
    };
    PathBuf::from(expand_vars(&path, |name| std::env::var(name).ok()))
}

/// `text` with each `$NAME` or `${NAME}` for which `value` gives a value replaced by it.
/// A name is ASCII letters, digits and `_`, as Python's `expandvars` reads it.
fn expand_vars(text: &str, value: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, written) = match after.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            },
            None => {
                let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        match value(name).filter(|_| !name.is_empty()) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[at..at + 1 + written]),
        }
        rest = &rest[at + 1 + written..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_print() {
        let t = Token::new("hf_secret");
        assert_eq!(format!("{t:?}"), "Token(***)");
        let c = HubConfig { endpoint: "x".into(), token: Some(t) };
        assert!(!format!("{c:?}").contains("hf_secret"));
    }

    #[test]
    fn explicit_values_win_and_slashes_are_trimmed() {
        let c = HubConfig::resolve(Some("http://127.0.0.1:9/".into()), Some(" hf_x \n".into())).unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:9");
        assert_eq!(c.token.as_ref().map(Token::expose), Some("hf_x"));
    }

    #[test]
    fn variables_expand_as_python_expands_them() {
        let value = |name: &str| (name == "HOME_ON").then(|| "/data".to_owned());
        assert_eq!(expand_vars("$HOME_ON/hf", value), "/data/hf");
        assert_eq!(expand_vars("${HOME_ON}/hf", value), "/data/hf");
        assert_eq!(expand_vars("$UNSET/hf", value), "$UNSET/hf");
        assert_eq!(expand_vars("${UNSET}/hf", value), "${UNSET}/hf");
        assert_eq!(expand_vars("a$/b${x", value), "a$/b${x");
        assert_eq!(expand_vars("$HOME_ON$HOME_ON", value), "/data/data");
        assert_eq!(expand_vars("/plain/path", value), "/plain/path");
    }
}
