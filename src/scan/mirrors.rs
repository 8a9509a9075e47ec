//! Looks up the aligned mirrors of scanned repos on the Hub: one search request per source repo.

use std::collections::BTreeMap;

use futures_util::StreamExt;

use super::next_step::MirrorAnswer;
use crate::hub::HubClient;
use crate::hub::listing::{ListQuery, ListedRepo};
use crate::manifest::MANIFEST_FILE;
use crate::mirror_name::{mirror_name, mirror_name_tail};
use crate::untrusted::escape_control;

/// Requests in flight at once.
const AT_ONCE: usize = 4;

/// The most repos a search may list. A mirror's name ends with 64 bits of a digest, so more are noise.
const SEARCH_LIMIT: usize = 20;

/// Finds the aligned mirror of each of `sources`, under `namespaces` in their order. It looks for each
/// source's [`mirror_name`] in each namespace. One search for the names' shared tail covers every namespace
/// at once. A mirror counts only when the Hub lists it, not disabled, with its manifest.
pub async fn look_up(hub: &HubClient, sources: &[String], namespaces: &[String]) -> BTreeMap<String, MirrorAnswer> {
    let asked = futures_util::stream::iter(sources.iter().map(|source| async move {
        let query = ListQuery {
            filters: Vec::new(),
            search: Some(mirror_name_tail(source)),
            limit: Some(SEARCH_LIMIT),
            author: None,
        };
        let answer = match hub.list_page(&query.first_url(hub.endpoint())).await {
            Ok(page) => match pick(&page.repos, source, namespaces) {
                Some(mirror) => MirrorAnswer::Found(mirror),
                None => MirrorAnswer::NotFound,
            },
            Err(e) => MirrorAnswer::Failed(escape_control(&e.to_string()).into_owned()),
        };
        (source.clone(), answer)
    }));
    asked.buffer_unordered(AT_ONCE).collect().await
}

/// The first of `namespaces` whose mirror of `source` is among `listed`, as the Hub spells it.
fn pick(listed: &[ListedRepo], source: &str, namespaces: &[String]) -> Option<String> {
    namespaces.iter().find_map(|ns| {
        let name = mirror_name(source, ns);
        listed
            .iter()
            .find(|r| r.id.eq_ignore_ascii_case(&name))
            .filter(|r| !r.flags.disabled && r.siblings.iter().any(|s| s.rfilename == MANIFEST_FILE))
            .map(|r| r.id.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: &str, files: &[&str]) -> ListedRepo {
        let siblings: Vec<_> = files.iter().map(|f| serde_json::json!({ "rfilename": f })).collect();
        serde_json::from_value(serde_json::json!({ "id": id, "siblings": siblings })).unwrap()
    }

    #[test]
    fn the_first_namespace_with_a_published_mirror_wins() {
        let source = "mlx-community/tiny";
        let (first, second) = (mirror_name(source, "first"), mirror_name(source, "second"));
        let namespaces = ["first".to_owned(), "second".to_owned()];
        let both = [listed(&second, &[MANIFEST_FILE]), listed(&first, &[MANIFEST_FILE])];
        assert_eq!(pick(&both, source, &namespaces), Some(first.clone()));
        let empty_first = [listed(&first, &[]), listed(&second, &[MANIFEST_FILE])];
        assert_eq!(pick(&empty_first, source, &namespaces), Some(second), "a repo with no manifest is no mirror");
        let elsewhere = [listed(&mirror_name(source, "squatter"), &[MANIFEST_FILE])];
        assert_eq!(pick(&elsewhere, source, &namespaces), None, "only the namespaces asked");
    }
}
