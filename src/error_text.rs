//! How errors are worded. `with_causes` puts an error and its causes on one line, for a log or a report
//! without `anyhow`. `Unrecognized` is the error for a value that matches none of a setting's spellings.

/// A value that no setting or stored name takes. `expected` says what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}`: expected {expected}")]
pub struct Unrecognized {
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

/// `e`, then each of its sources after `: `. A source whose text the line already holds is left out.
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
