//! How errors are said: an error and its causes as one line, for a log or a report that has no `anyhow` to
//! say it; and the error of a value that is none of the spellings a setting takes.

/// A value that is not one a setting or a stored name takes: `expected` says what would be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}`: expected {expected}")]
pub struct Unrecognized {
    /// The value as given.
    pub value: String,
    /// What the setting takes.
    pub expected: String,
}

impl Unrecognized {
    /// `value` is not what `expected` says a value must be.
    pub fn new(value: impl Into<String>, expected: impl Into<String>) -> Unrecognized {
        Unrecognized { value: value.into(), expected: expected.into() }
    }

    /// `value` is none of `names`.
    pub fn one_of<'a>(value: &str, names: impl IntoIterator<Item = &'a str>) -> Unrecognized {
        let names: Vec<&str> = names.into_iter().collect();
        Unrecognized::new(value, format!("one of {}", names.join(", ")))
    }
}

/// The one of `all` whose `name` is `value`, or an error that lists every name.
pub(crate) fn by_name<T: Copy>(value: &str, all: &[T], name: impl Fn(T) -> &'static str) -> Result<T, Unrecognized> {
    all.iter()
        .copied()
        .find(|&item| name(item) == value)
        .ok_or_else(|| Unrecognized::one_of(value, all.iter().map(|&item| name(item))))
}

/// `e`, then each of its sources after `: `; a source whose text the line already holds is not said again.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Says(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Hides(#[source] std::io::Error);

    #[test]
    fn each_cause_is_said_once() {
        let cause = || std::io::Error::other("the disk");
        assert_eq!(super::with_causes(&Hides(cause())), "outer: the disk");
        assert_eq!(super::with_causes(&Says(cause())), "outer: the disk", "already said by the outer error");
    }
}
