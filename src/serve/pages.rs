//! The dashboard: server-rendered HTML from `templates/dashboard/`, every value escaped, no external assets.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, context};
use serde::Deserialize;

use super::{AppState, internal};

/// Repos per page on a namespace's page.
const PAGE: i64 = 100;

/// The templates, compiled once, HTML-escaped whatever their names.
pub(super) fn templates() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    // A missing value reads as a dash, never `None`; byte counts in the units people read.
    env.add_filter(
        "dash",
        |v: minijinja::Value| if v.is_none() || v.is_undefined() { minijinja::Value::from("—") } else { v },
    );
    env.add_filter("bytes", |v: minijinja::Value| match i64::try_from(v.clone()) {
        Ok(n) => minijinja::Value::from(size_label(n)),
        Err(_) => minijinja::Value::from("—"),
    });
    env.add_template("base.html.j2", include_str!("../../templates/dashboard/base.html.j2"))?;
    env.add_template("overview.html.j2", include_str!("../../templates/dashboard/overview.html.j2"))?;
    env.add_template("namespace.html.j2", include_str!("../../templates/dashboard/namespace.html.j2"))?;
    env.add_template("repo.html.j2", include_str!("../../templates/dashboard/repo.html.j2"))?;
    env.add_template("jobs.html.j2", include_str!("../../templates/dashboard/jobs.html.j2"))?;
    Ok(env)
}

pub(super) fn render(state: &AppState, name: &str, ctx: minijinja::Value) -> Response {
    match state.templates.get_template(name).and_then(|t| t.render(ctx)) {
        Ok(html) => Html(html).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("rendering {name}: {e}")).into_response(),
    }
}

pub(super) fn size_label(bytes: i64) -> String {
    crate::report::human_bytes(bytes.max(0) as u64)
}

#[derive(Deserialize)]
pub(super) struct PageQuery {
    page: Option<i64>,
}

/// `/ns/{namespace}`: its repos, a page at a time.
pub(super) async fn namespace(
    State(state): State<AppState>,
    Path(namespace): Path<String>,
    Query(q): Query<PageQuery>,
) -> Response {
    let page = q.page.unwrap_or(0);
    let Some(offset) = page.checked_mul(PAGE).filter(|o| *o >= 0) else {
        return (StatusCode::BAD_REQUEST, "page out of range").into_response();
    };
    let (known, repos, others) = match tokio::try_join!(
        state.store.has_namespace(&namespace),
        state.store.namespace_repos(&namespace, PAGE + 1, offset),
        state.store.namespace_unaudited(&namespace)
    ) {
        Ok(all) => all,
        Err(e) => return internal(e),
    };
    if !known {
        return (StatusCode::NOT_FOUND, "no repository of this namespace in the store").into_response();
    }
    let more = repos.len() as i64 > PAGE;
    let rows: Vec<_> = repos
        .iter()
        .take(PAGE as usize)
        .map(|r| {
            context! { repo => r.repo.clone(), sha => r.sha.clone(), shards_header_pad => r.shards_header_pad, shards_relayout => r.shards_relayout,
                       shards_invalid => r.shards_invalid, misaligned_tensors => r.misaligned_tensors, gb => size_label(r.misaligned_bytes),
                       bytes => r.misaligned_bytes }
        })
        .collect();
    render(&state, "namespace.html.j2", context! { namespace, repos => rows, page, more, others => Serde(&others) })
}

#[derive(Deserialize)]
pub(super) struct JobsQuery {
    state: Option<String>,
    repo: Option<String>,
    failure_kind: Option<String>,
    page: Option<i64>,
}

/// `/jobs[?state=S][&repo=R][&failure_kind=K][&page=N]`: the jobs, newest first, a page at a time, as
/// `/api/jobs` filters them; 400 for a state or kind that does not exist.
pub(super) async fn jobs(State(state): State<AppState>, Query(q): Query<JobsQuery>) -> Response {
    let parsed = (
        q.state.as_deref().filter(|s| !s.is_empty()).map(str::parse::<crate::job::JobState>).transpose(),
        q.failure_kind.as_deref().filter(|s| !s.is_empty()).map(str::parse::<crate::job::FailureKind>).transpose(),
    );
    let (job_state, failure_kind) = match parsed {
        (Ok(s), Ok(k)) => (s, k),
        (Err(why), _) | (_, Err(why)) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    let page = q.page.unwrap_or(0);
    let Some(offset) = page.checked_mul(PAGE).filter(|o| *o >= 0) else {
        return (StatusCode::BAD_REQUEST, "page out of range").into_response();
    };
    let repo = q.repo.clone().filter(|r| !r.is_empty());
    let filter = crate::store::jobs::JobFilter { state: job_state, repo: repo.clone(), failure_kind };
    let mut jobs = match state.store.jobs_page(&filter, PAGE + 1, offset).await {
        Ok(jobs) => jobs,
        Err(e) => return internal(e),
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
pub(super) async fn repo(State(state): State<AppState>, Path((ns, name)): Path<(String, String)>) -> Response {
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
        Err(e) => return internal(e),
    };
    let Some(info) = info else {
        return (StatusCode::NOT_FOUND, "no such repository in the store").into_response();
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
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;&#x2f;script&gt;"), "{html}");
    }
}
