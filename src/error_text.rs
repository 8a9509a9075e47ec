//! An error and its causes as one line, for a log or a report that has no `anyhow` to say it.

/// `e`, then each of its sources after `: `; a source whose text the line already holds is not said again.
pub fn with_causes(e: &dyn std::error::Error) -> String {
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
