//! Which mirror belongs to which source. A mirror is chosen once, recorded before the first commit, and
//! never handed to another source. The store also keeps which mirrors were made private because their
//! source stopped being public.

use serde::Serialize;

use super::{Store, StoreError, on_pool, sql};

/// A mirror as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct MirrorRow {
    /// The mirror repo.
    pub target_repo: String,
    /// The source it mirrors.
    pub source_repo: String,
    /// When the name was taken.
    pub created_at: String,
    /// Whether it is (or must stay) private.
    pub private: bool,
    /// Why it was made private after publication.
    pub hidden_reason: Option<String>,
    /// When.
    pub hidden_at: Option<String>,
    /// The source's former name, which the mirror's published manifest still names until the next
    /// publication names the new one.
    pub moved_from: Option<String>,
}

/// How many new mirrors a day may bring. The operator sets this policy, never a pusher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorCaps {
    /// New mirrors of one source namespace per UTC day.
    pub per_namespace: u32,
    /// New mirrors in all per UTC day.
    pub total: u32,
}

/// New mirrors a day unless told otherwise: 50 per source namespace and 500 in all. mlx-community, the
/// busiest MLX publisher, adds a few dozen repos on its busiest days. A real publisher is thus never held
/// back for long. A namespace that pushes hundreds of repos a day gets at most 50 mirrors of them. A
/// backfill of the whole Hub takes weeks, at a pace the operator can watch and raise.
pub const DEFAULT_MIRROR_CAPS: MirrorCaps = MirrorCaps { per_namespace: 50, total: 500 };

impl Default for MirrorCaps {
    fn default() -> Self {
        DEFAULT_MIRROR_CAPS
    }
}

/// What claiming a new mirror name did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The name is the source's.
    Taken,
    /// Another source holds the name (or the source already has another mirror).
    HeldBy(String),
    /// A day's cap is reached, and nothing was taken.
    Capped,
}

/// What following a source's rename carried over to the new name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Followed {
    /// The mirror that now follows the new name, if the old one had a mirror and the new one had none.
    pub mirror: Option<String>,
    /// Jobs carried over: every job of the old name whose commit the new name had no job for.
    pub jobs: u64,
}

impl Store {
    /// Returns the mirror recorded for `source`, if any.
    pub async fn mirror_of(&self, source: &str) -> Result<Option<MirrorRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM mirrors WHERE source_repo = $1")
            .bind(source)
            .fetch_optional(pool)
            .await)
        .map_err(sql("mirror of source"))
    }

    /// Returns the source that holds the mirror name `target`, if any.
    pub async fn mirror_holder(&self, target: &str) -> Result<Option<String>, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar("SELECT source_repo FROM mirrors WHERE target_repo = $1")
            .bind(target)
            .fetch_optional(pool)
            .await)
        .map_err(sql("mirror holder"))
    }

    /// Takes the name `target` for `source` in one statement, so two workers can never give one name to two
    /// sources. Returns `false` if another source holds the name, or `source` already has another mirror.
    pub async fn claim_mirror(&self, target: &str, source: &str, private: bool) -> Result<bool, StoreError> {
        let now = self.db_now_utc().await?;
        on_pool!(self, |pool| sqlx::query("INSERT INTO mirrors (target_repo, source_repo, created_at, private) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
            .bind(target)
            .bind(source)
            .bind(&now)
            .bind(private)
            .execute(pool)
            .await.map(|done| done.rows_affected()))
            .map_err(sql("claim mirror"))?;
        Ok(self.mirror_holder(target).await?.as_deref() == Some(source))
    }

    /// Does what [`Store::claim_mirror`] does for a new mirror, within the day's caps. It takes nothing and
    /// returns `Capped` when `caps.total` new mirrors were taken since `day_start` (`YYYY-MM-DDT00:00:00Z`).
    /// It does the same when `caps.per_namespace` mirrors of the source's namespace were, comparing names as
    /// the Hub does. The count and the insert are one statement. On PostgreSQL, workers claiming at the same
    /// instant may each pass a count taken before the others' inserts. The cap can thus be passed by at most
    /// one mirror per other worker.
    pub async fn claim_new_mirror(
        &self,
        (target, source, private): (&str, &str, bool),
        caps: &MirrorCaps,
        day_start: &str,
    ) -> Result<Claim, StoreError> {
        let namespace = crate::untrusted::namespace_of(source).to_ascii_lowercase();
        let now = self.db_now_utc().await?;
        let inserted = on_pool!(self, |pool| sqlx::query(
            "INSERT INTO mirrors (target_repo, source_repo, created_at, private)
             SELECT $1, $2, $3, $4
             WHERE (SELECT COUNT(*) FROM mirrors WHERE created_at >= $5) < $6
               AND (SELECT COUNT(*) FROM mirrors WHERE created_at >= $5
                    AND LOWER(SUBSTR(source_repo, 1, LENGTH($7) + 1)) = $7 || '/') < $8
             ON CONFLICT DO NOTHING"
        )
        .bind(target)
        .bind(source)
        .bind(&now)
        .bind(private)
        .bind(day_start)
        .bind(i64::from(caps.total))
        .bind(&namespace)
        .bind(i64::from(caps.per_namespace))
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("claim new mirror"))?;
        if inserted > 0 {
            return Ok(Claim::Taken);
        }
        Ok(match self.mirror_holder(target).await? {
            Some(holder) if holder == source => Claim::Taken,
            Some(holder) => Claim::HeldBy(holder),
            None if self.mirror_of(source).await?.is_some() => Claim::HeldBy(source.to_owned()),
            None => Claim::Capped,
        })
    }

    /// Gives up the name `target` that `source` took but never committed to, because its repo was removed.
    pub async fn release_mirror(&self, target: &str, source: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("DELETE FROM mirrors WHERE target_repo = $1 AND source_repo = $2")
            .bind(target)
            .bind(source)
            .execute(pool)
            .await
            .map(|done| done.rows_affected()))
        .map_err(sql("release mirror"))?;
        Ok(())
    }

    /// Records that a mirror was published from `source` with this visibility. It clears an earlier hiding,
    /// since the source was checked public again just before. A job begun before a rename publishes under the
    /// old name, which the mirror then keeps as the name its manifest gives.
    pub async fn mirror_published(&self, target: &str, source: &str, private: bool) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query(
            "UPDATE mirrors SET private = $1, hidden_reason = NULL, hidden_at = NULL,
             moved_from = CASE WHEN source_repo = $3 THEN NULL ELSE $3 END WHERE target_repo = $2"
        )
        .bind(private)
        .bind(target)
        .bind(source)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("mirror published"))?;
        Ok(())
    }

    /// Carries what the store holds for `from` over to `to`, in one transaction, once the Hub has confirmed
    /// the rename. The mirror moves unless `to` has one already. Every job moves whose commit `to` has no job
    /// for. The mirror thus keeps its name, and a commit already repaired is not repaired again. `from` is
    /// recorded `renamed`, without shards, so the totals do not count the repo twice.
    pub async fn follow_move(&self, from: &str, to: &str) -> Result<Followed, StoreError> {
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            let mirror: Option<String> = sqlx::query_scalar(
                "UPDATE mirrors SET source_repo = $1, moved_from = COALESCE(moved_from, $2)
                 WHERE source_repo = $2 AND NOT EXISTS (SELECT 1 FROM mirrors m WHERE m.source_repo = $1)
                 RETURNING target_repo",
            )
            .bind(to)
            .bind(from)
            .fetch_optional(&mut *tx)
            .await
            .map_err(sql("follow mirror"))?;
            let jobs = sqlx::query(
                "UPDATE jobs SET repo_id = $1 WHERE repo_id = $2
                 AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.repo_id = $1 AND j.source_sha = jobs.source_sha)",
            )
            .bind(to)
            .bind(from)
            .execute(&mut *tx)
            .await
            .map_err(sql("follow jobs"))?
            .rows_affected();
            // The old name's record stops counting: its shards are the new name's now.
            sqlx::query("DELETE FROM shards WHERE repo_id = $1")
                .bind(from)
                .execute(&mut *tx)
                .await
                .map_err(sql("clear renamed shards"))?;
            sqlx::query("UPDATE repos SET state = $1, last_error = $2 WHERE id = $3")
                .bind(super::RepoState::Renamed.as_str())
                .bind(format!("renamed to {to}"))
                .bind(from)
                .execute(&mut *tx)
                .await
                .map_err(sql("record rename"))?;
            tx.commit().await.map_err(sql("commit follow"))?;
            Ok(Followed { mirror, jobs })
        })
    }

    /// Records that a mirror was made private, and why.
    pub async fn hide_mirror(&self, target: &str, reason: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query(
            "UPDATE mirrors SET private = TRUE, hidden_reason = $1, hidden_at = $2 WHERE target_repo = $3"
        )
        .bind(reason)
        .bind(crate::time::now_utc())
        .bind(target)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("hide mirror"))?;
        Ok(())
    }

    /// Returns the public mirrors whose source the store no longer knows as public. Such a source is unknown
    /// to the store, or in a state other than `ok`, `moved`, `error` and `pending`. Or it is flagged private,
    /// gated or disabled, or the newest finished crawl did not list it. Each needs a fresh look.
    pub async fn mirrors_to_recheck(&self) -> Result<Vec<MirrorRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT m.* FROM mirrors m LEFT JOIN repos r ON r.id = m.source_repo
             WHERE m.private = FALSE AND (
                r.id IS NULL OR r.state NOT IN ('ok', 'moved', 'error', 'pending') OR r.private OR r.gated OR r.disabled
                OR COALESCE(r.last_listed_run, 0) < COALESCE((SELECT MAX(id) FROM audit_runs WHERE status = 'finished' AND kind = 'crawl'), 0))
             ORDER BY m.target_repo",
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("mirrors to recheck"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::VerifyDevice;

    /// A followed rename moves the mirror and the jobs. It moves no job onto a commit the new name has a job
    /// for, and no mirror onto a name that has one. The name the manifest gives survives a second rename, and
    /// the next publication under the new name clears it.
    #[tokio::test]
    async fn a_followed_rename_carries_the_mirror_and_jobs_over() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            assert!(store.claim_mirror("me/a-aligned", "ns/a", false).await.unwrap());
            for sha in ["one", "two"] {
                store.job_for("ns/a", sha, VerifyDevice::Cpu).await.unwrap();
            }
            store.job_for("ns/b", "two", VerifyDevice::Cpu).await.unwrap();
            let followed = store.follow_move("ns/a", "ns/b").await.unwrap();
            assert_eq!(followed, Followed { mirror: Some("me/a-aligned".into()), jobs: 1 });
            let row = store.mirror_of("ns/b").await.unwrap().unwrap();
            assert_eq!((row.target_repo.as_str(), row.moved_from.as_deref()), ("me/a-aligned", Some("ns/a")));
            assert_eq!(store.mirror_of("ns/a").await.unwrap(), None);
            let jobs = |repo: &'static str| async move {
                let mut shas: Vec<String> =
                    store.repo_jobs(repo).await.unwrap().into_iter().map(|j| j.source_sha).collect();
                shas.sort();
                shas
            };
            assert_eq!(jobs("ns/b").await, ["one", "two"]);
            assert_eq!(jobs("ns/a").await, ["two"], "the new name had a job for that commit already");

            // Renamed again before any publication: the manifest still names the first name.
            store.follow_move("ns/b", "ns/c").await.unwrap();
            let row = store.mirror_of("ns/c").await.unwrap().unwrap();
            assert_eq!(row.moved_from.as_deref(), Some("ns/a"));
            // A name that has a mirror of its own keeps it; the other is not moved onto it.
            assert!(store.claim_mirror("me/d-aligned", "ns/d", false).await.unwrap());
            assert_eq!(store.follow_move("ns/c", "ns/d").await.unwrap().mirror, None);
            assert_eq!(store.mirror_holder("me/a-aligned").await.unwrap().as_deref(), Some("ns/c"));

            // A job begun under an old name publishes under it; one under the current name clears it.
            store.mirror_published("me/a-aligned", "ns/b", false).await.unwrap();
            assert_eq!(store.mirror_of("ns/c").await.unwrap().unwrap().moved_from.as_deref(), Some("ns/b"));
            store.mirror_published("me/a-aligned", "ns/c", false).await.unwrap();
            assert_eq!(store.mirror_of("ns/c").await.unwrap().unwrap().moved_from, None);
        }
    }

    /// A day's caps hold per source namespace, compared without regard to case, and in all. A name released
    /// by a failed attempt counts in neither.
    #[tokio::test]
    async fn new_mirrors_are_capped_per_namespace_and_in_all_per_day() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let caps = MirrorCaps { per_namespace: 2, total: 3 };
            let today = &crate::time::now_utc()[..10];
            let since = &format!("{today}T00:00:00Z");
            let claim = |source: &'static str| {
                let target = format!("me/{}-aligned", source.replace('/', "-"));
                async move { store.claim_new_mirror((&target, source, false), &caps, since).await.unwrap() }
            };
            assert_eq!(claim("spam/a").await, Claim::Taken);
            assert_eq!(claim("SPAM/b").await, Claim::Taken);
            assert_eq!(claim("spam/c").await, Claim::Capped, "{:?}", store.backend());
            store.release_mirror("me/SPAM-b-aligned", "SPAM/b").await.unwrap();
            assert_eq!(claim("spam/c").await, Claim::Taken, "a released name counts in no cap");
            assert_eq!(claim("other/a").await, Claim::Taken);
            assert_eq!(claim("third/a").await, Claim::Capped, "three in all");
            assert_eq!(claim("spam/a").await, Claim::Taken, "its own name is its own");
            // Yesterday's mirrors count in no cap of today's.
            let tomorrow = format!(
                "{}T00:00:00Z",
                crate::time::format_utc((crate::job::unix_now() + 86_400) as u64).get(..10).unwrap()
            );
            let target = "me/third-a-aligned";
            assert_eq!(
                store.claim_new_mirror((target, "third/a", false), &caps, &tomorrow).await.unwrap(),
                Claim::Taken
            );
        }
    }
}
