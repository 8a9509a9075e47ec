//! Renders the dashboard as HTML on the server, from `templates/dashboard/`. Every value is escaped, and the
//! pages load no external assets.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, context};
use serde::Deserialize;

use super::AppState;
use super::extract::{PageParams, PagePath};

/// Repos per page on a namespace's page.
const PAGE: i64 = 100;

/// Compiles the templates once. They escape HTML whatever their names.
pub(super) fn templates() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    // A missing value reads as a dash, never `None`. Byte counts show in the units people read.
    env.add_filter(
        "dash",
        |v: minijinja::Value| if v.is_none() || v.is_undefined() { minijinja::Value::from("—") } else { v },
    );
    env.add_filter("bytes", |v: minijinja::Value| match i64::try_from(v.clone()) {
        Ok(n) => minijinja::Value::from(size_label(n)),
        Err(_) => minijinja::Value::from("—"),
    });
    env.add_filter("time", time_element);
    env.add_template("base.html.j2", include_str!("../../templates/dashboard/base.html.j2"))?;
    env.add_template("overview.html.j2", include_str!("../../templates/dashboard/overview.html.j2"))?;
    env.add_template("namespace.html.j2", include_str!("../../templates/dashboard/namespace.html.j2"))?;
    env.add_template("repo.html.j2", include_str!("../../templates/dashboard/repo.html.j2"))?;
    env.add_template("jobs.html.j2", include_str!("../../templates/dashboard/jobs.html.j2"))?;
    env.add_template("namespaces.html.j2", include_str!("../../templates/dashboard/namespaces.html.j2"))?;
    env.add_template("search.html.j2", include_str!("../../templates/dashboard/search.html.j2"))?;
    env.add_template("error.html.j2", include_str!("../../templates/dashboard/error.html.j2"))?;
    Ok(env)
}

pub(super) fn render(state: &AppState, name: &str, ctx: minijinja::Value) -> Response {
    match state.templates.get_template(name).and_then(|t| t.render(ctx)) {
        Ok(html) => Html(html).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("rendering {name}: {e}")).into_response(),
    }
}

pub(super) use super::respond::page_error;

/// Where page `page` of `size` rows starts. Returns `None` for a page number out of range: negative, or past
/// what an offset can hold. Callers answer that with [`page_out_of_range`].
pub(super) fn page_offset(page: i64, size: i64) -> Option<i64> {
    page.checked_mul(size).filter(|o| *o >= 0)
}

/// The error page for a page number out of range.
pub(super) fn page_out_of_range(state: &AppState) -> Response {
    page_error(state, StatusCode::BAD_REQUEST, "That page number is out of range.")
}

/// A store failure behind a page.
pub(super) fn page_failed(state: &AppState, e: impl std::fmt::Display) -> Response {
    page_error(state, StatusCode::INTERNAL_SERVER_ERROR, e)
}

/// Answers any path no route takes. Under `/api/` it answers JSON, as every API error does. Elsewhere it
/// answers a page in the site's style.
pub(super) async fn not_found(State(state): State<AppState>, uri: axum::http::Uri) -> Response {
    if uri.path() == "/api" || uri.path().starts_with("/api/") {
        return super::respond::api_error(StatusCode::NOT_FOUND, format!("no such endpoint: {}", uri.path()));
    }
    page_error(&state, StatusCode::NOT_FOUND, format!("There is no page at {}.", uri.path()))
}

/// The `time` filter. It renders a stored UTC time as a `<time>` element that says it is UTC. The element
/// keeps the UTC time on hover, where the page's script shows local and relative time. Anything else, such as
/// `run by another replica`, stays escaped text. A missing value becomes a dash.
fn time_element(v: minijinja::Value) -> minijinja::Value {
    let Some(text) = v.as_str().map(str::to_owned) else {
        return minijinja::Value::from(if v.is_none() || v.is_undefined() { "—".to_owned() } else { v.to_string() });
    };
    // Accept only the stored form's characters, since chrono's parser alone would let a space or a one-digit
    // field by. Then the slices below fall on characters, and there is nothing to escape.
    let stored_chars = text.bytes().all(|b| b.is_ascii_digit() || b"-:TZ".contains(&b));
    if !stored_chars || crate::time::parse_utc(&text).is_none() {
        return minijinja::Value::from(text);
    }
    let shown = format!("{} {} UTC", &text[..10], &text[11..19]);
    minijinja::Value::from_safe_string(format!("<time datetime=\"{text}\" title=\"{shown}\">{shown}</time>"))
}

pub(super) fn size_label(bytes: i64) -> String {
    crate::report::human_bytes(bytes.max(0) as u64)
}

#[derive(Deserialize)]
pub(super) struct PageQuery {
    page: Option<i64>,
}

/// `/ns/{namespace}`: its repos, a page at a time, each with its mirror and newest job. A namespace asked in
/// another case redirects to the Hub's spelling, since names are case-insensitive there.
pub(super) async fn namespace(
    State(state): State<AppState>,
    PagePath(namespace): PagePath<String>,
    PageParams(q): PageParams<PageQuery>,
) -> Response {
    let page = q.page.unwrap_or(0);
    let Some(offset) = page_offset(page, PAGE) else { return page_out_of_range(&state) };
    let (known, repos, others) = match tokio::try_join!(
        state.store.has_namespace(&namespace),
        state.store.namespace_repos(&namespace, PAGE + 1, offset),
        state.store.namespace_unaudited(&namespace)
    ) {
        Ok(all) => all,
        Err(e) => return page_failed(&state, e),
    };
    if !known {
        return match state.store.namespace_spelled(&namespace).await {
            Ok(Some(spelled)) => {
                Redirect::permanent(&format!("/ns/{}{}", path_segment(&spelled), page_suffix(page))).into_response()
            }
            Ok(None) => page_error(
                &state,
                StatusCode::NOT_FOUND,
                format!("No repository of the namespace {namespace} is in the store."),
            ),
            Err(e) => page_failed(&state, e),
        };
    }
    let more = repos.len() as i64 > PAGE;
    let shown: Vec<_> = repos.iter().take(PAGE as usize).collect();
    let ids: Vec<String> = shown.iter().map(|r| r.repo.clone()).collect();
    let links = match state.store.repo_links(&ids).await {
        Ok(links) => links.into_iter().map(|l| (l.repo_id.clone(), l)).collect::<std::collections::HashMap<_, _>>(),
        Err(e) => return page_failed(&state, e),
    };
    let rows: Vec<_> = shown
        .iter()
        .map(|r| {
            context! { repo => r.repo.clone(), sha => r.sha.clone(), shards_header_pad => r.shards_header_pad, shards_relayout => r.shards_relayout,
                       shards_invalid => r.shards_invalid, misaligned_tensors => r.misaligned_tensors, gb => size_label(r.misaligned_bytes),
                       bytes => r.misaligned_bytes, links => Serde(links.get(&r.repo)) }
        })
        .collect();
    render(
        &state,
        "namespace.html.j2",
        context! { namespace, repos => rows, page, more, others => Serde(&others), hub => state.hub_url.clone() },
    )
}

/// What a path segment must escape. RFC 3986's path-segment characters pass. Everything else is
/// percent-encoded: space, `/`, `?`, `#`, `%` and non-ASCII.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Encodes `text` as one path segment of a link. A namespace is one already; this keeps it so whatever it
/// holds.
pub(super) fn path_segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, SEGMENT).to_string()
}

/// `?page=N` when a page other than the first was asked for, to carry over a redirect.
fn page_suffix(page: i64) -> String {
    if page > 0 { format!("?page={page}") } else { String::new() }
}

#[derive(Deserialize)]
pub(super) struct JobsQuery {
    state: Option<String>,
    repo: Option<String>,
    failure_kind: Option<String>,
    page: Option<i64>,
}

/// `/jobs[?state=S][&repo=R][&failure_kind=K][&page=N]`: the jobs, newest first, a page at a time, as
/// `/api/jobs` filters them. Answers 400 for a state or kind that does not exist.
pub(super) async fn jobs(State(state): State<AppState>, PageParams(q): PageParams<JobsQuery>) -> Response {
    let parsed = (
        q.state.as_deref().filter(|s| !s.is_empty()).map(str::parse::<crate::job::JobState>).transpose(),
        q.failure_kind.as_deref().filter(|s| !s.is_empty()).map(str::parse::<crate::job::FailureKind>).transpose(),
    );
    let (job_state, failure_kind) = match parsed {
        (Ok(s), Ok(k)) => (s, k),
        (Err(why), _) | (_, Err(why)) => return page_error(&state, StatusCode::BAD_REQUEST, why),
    };
    let page = q.page.unwrap_or(0);
    let Some(offset) = page_offset(page, PAGE) else { return page_out_of_range(&state) };
    let repo = q.repo.clone().filter(|r| !r.is_empty());
    let filter = crate::store::jobs::JobFilter { state: job_state, repo: repo.clone(), failure_kind };
    let mut jobs = match state.store.jobs_page(&filter, PAGE + 1, offset).await {
        Ok(jobs) => jobs,
        Err(e) => return page_failed(&state, e),
    };
    let more = jobs.len() as i64 > PAGE;
    jobs.truncate(PAGE as usize);
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in [
        ("state", job_state.map(crate::job::JobState::as_str)),
        ("repo", repo.as_deref()),
        ("failure_kind", failure_kind.map(crate::job::FailureKind::as_str)),
    ] {
        if let Some(value) = value {
            query.append_pair(key, value);
        }
    }
    let mut query = query.finish();
    if !query.is_empty() {
        query.push('&');
    }
    let states: Vec<&str> = crate::job::JobState::ALL.iter().map(|s| s.as_str()).collect();
    render(
        &state,
        "jobs.html.j2",
        context! {
            jobs => Serde(&jobs), state => job_state.map(crate::job::JobState::as_str), failure_kind => failure_kind.map(crate::job::FailureKind::as_str),
            repo, page, more, query, states, hub => state.hub_url.clone(),
        },
    )
}

/// `/repo/{ns}/{name}`: its shards, its mirror and its jobs.
pub(super) async fn repo(State(state): State<AppState>, PagePath((ns, name)): PagePath<(String, String)>) -> Response {
    let id = format!("{ns}/{name}");
    let (info, shards, jobs, events, mirror, audits) = match tokio::try_join!(
        state.store.repo(&id),
        state.store.repo_shards(&id),
        state.store.repo_jobs(&id),
        state.store.repo_job_events(&id),
        state.store.mirror_of(&id),
        state.store.repo_audits(&id)
    ) {
        Ok(all) => all,
        Err(e) => return page_failed(&state, e),
    };
    let Some(info) = info else {
        return match state.store.repo_spelled(&id).await {
            Ok(Some(spelled)) => {
                let path: Vec<String> = spelled.split('/').map(path_segment).collect();
                Redirect::permanent(&format!("/repo/{}", path.join("/"))).into_response()
            }
            Ok(None) => page_error(&state, StatusCode::NOT_FOUND, format!("The repository {id} is not in the store.")),
            Err(e) => page_failed(&state, e),
        };
    };
    render(
        &state,
        "repo.html.j2",
        context! { repo => id, info => Serde(&info), shards => Serde(&shards), jobs => Serde(&jobs), events => Serde(&events), mirror => Serde(&mirror), audits => Serde(&audits), hub => state.hub_url.clone() },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table of every page, rendered with nothing in it, says `none` rather than showing a blank.
    #[test]
    fn every_empty_table_says_none() {
        let env = templates().unwrap();
        let empty = minijinja::Value::from(Vec::<i64>::new());
        let pages = [
            (
                "overview.html.j2",
                context! { publishers => empty.clone(), chart => empty.clone(), columns => vec![context! { key => "namespace", title => "namespace" }],
                totals => context! {}, jobs => context! {} },
            ),
            (
                "namespace.html.j2",
                context! { namespace => "ns", repos => empty.clone(), others => vec![context! { repo_id => "ns/a", state => "gated" }], page => 0 },
            ),
            ("namespaces.html.j2", context! { namespaces => empty.clone(), count => 0, page => 0 }),
            ("jobs.html.j2", context! { jobs => empty.clone(), states => empty.clone(), page => 0 }),
            (
                "repo.html.j2",
                context! { repo => "ns/a", info => context! { state => "ok" }, shards => empty.clone(), jobs => empty.clone(), events => empty.clone(), audits => empty.clone() },
            ),
            (
                "search.html.j2",
                context! { q => "x", searched => true, namespaces => empty.clone(), repos => empty.clone(), limit => 50 },
            ),
        ];
        for (name, ctx) in pages {
            let html = env.get_template(name).unwrap().render(ctx).unwrap();
            let bodies: Vec<&str> =
                html.split("<tbody>").skip(1).map(|b| b.split("</tbody>").next().unwrap()).collect();
            assert!(!bodies.is_empty(), "{name} has tables");
            for body in bodies {
                assert!(
                    body.contains(">none") || body.contains("gated"),
                    "{name}: an empty table shows nothing: {body}"
                );
            }
        }
    }

    #[test]
    fn stored_times_become_time_elements_and_anything_else_stays_text() {
        let env = templates().unwrap();
        let render = |v: minijinja::Value| env.render_str("{{ v|time }}", context! { v }).unwrap();
        assert_eq!(
            render("2026-12-03T07:47:58Z".into()),
            r#"<time datetime="2026-12-03T07:47:58Z" title="2026-12-03 07:47:58 UTC">2026-12-03 07:47:58 UTC</time>"#
        );
        assert_eq!(render("run by another replica (<b>)".into()), "run by another replica (&lt;b&gt;)");
        assert_eq!(render("2026-02-31T00:00:00Z".into()), "2026-02-31T00:00:00Z", "not a date: text");
        assert_eq!(render(minijinja::Value::from(())), "—");
    }

    #[test]
    fn values_from_the_hub_are_escaped_on_every_page() {
        let env = templates().unwrap();
        let hostile = r#"<script>alert("x")</script>"#;
        let row = context! { repo => hostile, sha => hostile, shards_header_pad => 1, shards_relayout => 0,
        shards_invalid => 0, misaligned_tensors => 1, gb => "1 B" };
        let html = env
            .get_template("namespace.html.j2")
            .unwrap()
            .render(context! { namespace => hostile, repos => vec![row], page => 0, more => false })
            .unwrap();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;&#x2f;script&gt;"), "{html}");
        // The other ways in show names too: the list of every namespace, and a search's words and results.
        let found = context! { repo_id => hostile, state => hostile, mirror => hostile, bytes => 1, gb => hostile };
        let pages = [
            (
                "namespaces.html.j2",
                context! { namespaces => vec![context! { namespace => hostile, gb => hostile }], count => 1, page => 0 },
            ),
            (
                "search.html.j2",
                context! { q => hostile, searched => true, namespaces => vec![hostile], repos => vec![found], limit => 50, hub => hostile },
            ),
            ("error.html.j2", context! { status => 404, title => hostile, message => hostile }),
        ];
        for (name, ctx) in pages {
            let html = env.get_template(name).unwrap().render(ctx).unwrap();
            assert!(!html.contains("<script>alert") && !html.contains("\"x\""), "{name}: {html}");
            assert!(html.contains("&lt;script&gt;alert"), "{name}: {html}");
        }
    }
}
