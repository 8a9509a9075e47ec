//! Named leases decide which of several processes leads a singleton task, such as the scheduled audit of
//! `serve` replicas. A holder renews its lease well before it lapses. Once it lapses, because the holder died
//! or lost the database, the next process to ask takes it over. One statement decides, so two askers never
//! both win.

use std::time::Duration;

use super::jobs::lease_until;
use super::{Store, StoreError, on_pool, sql};

/// The lease of the replica that runs the scheduled audits.
pub const SCHEDULER: &str = "scheduler";

impl Store {
    /// Takes lease `name` for `holder` for `ttl`, or renews it if `holder` has it. Returns `false` while
    /// another holder's lease is current. The database's clock decides.
    pub async fn try_lead(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let now = self.db_now().await?;
        let taken = on_pool!(self, |pool| sqlx::query(
            "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
             WHERE leases.holder = excluded.holder OR leases.expires_at < $4"
        )
        .bind(name)
        .bind(holder)
        .bind(lease_until(now, ttl))
        .bind(now)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("take lease"))?;
        Ok(taken == 1)
    }

    /// Gives lease `name` up if `holder` has it (a replica shutting down), so another takes over at once.
    pub async fn resign(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(pool)
            .await
            .map(|done| done.rows_affected()))
        .map_err(sql("resign lease"))?;
        Ok(())
    }

    /// Returns who holds lease `name` now, if anyone's lease is current. Also returns the Unix second, on the
    /// database's clock, after which that lease lapses.
    pub async fn lease_holder(&self, name: &str) -> Result<Option<(String, i64)>, StoreError> {
        let now = self.db_now().await?;
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT holder, expires_at FROM leases WHERE name = $1 AND expires_at >= $2"
        )
        .bind(name)
        .bind(now)
        .fetch_optional(pool)
        .await)
        .map_err(sql("read lease"))
    }

    /// Asks whichever process leads `name` to act now (an administrator's "audit now", through any replica).
    pub async fn request(&self, name: &str) -> Result<(), StoreError> {
        let now = self.db_now().await?;
        on_pool!(self, |pool| sqlx::query(
            "INSERT INTO leases (name, holder, expires_at, requested_at) VALUES ($1, '', 0, $2)
             ON CONFLICT (name) DO UPDATE SET requested_at = excluded.requested_at"
        )
        .bind(name)
        .bind(now)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("request"))?;
        Ok(())
    }

    /// Returns whether a request for `name` is pending, and clears it. Its leader gets `true` once per request.
    pub async fn take_request(&self, name: &str, holder: &str) -> Result<bool, StoreError> {
        let taken = on_pool!(self, |pool| sqlx::query(
            "UPDATE leases SET requested_at = NULL WHERE name = $1 AND holder = $2 AND requested_at IS NOT NULL"
        )
        .bind(name)
        .bind(holder)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("take request"))?;
        Ok(taken == 1)
    }

    /// Returns when the newest crawl started, by whichever replica, as the store's text time. The schedule
    /// goes on from it after a takeover.
    pub async fn last_run_started(&self) -> Result<Option<String>, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT started_at FROM audit_runs WHERE kind = 'crawl' ORDER BY id DESC LIMIT 1"
        )
        .fetch_optional(pool)
        .await)
        .map_err(sql("last run"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_lapsed_lease_is_taken_over() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let ttl = Duration::from_secs(60);
            assert!(store.try_lead(SCHEDULER, "a", ttl).await.unwrap());
            assert!(!store.try_lead(SCHEDULER, "b", ttl).await.unwrap(), "a's lease is current");
            assert!(store.try_lead(SCHEDULER, "a", ttl).await.unwrap(), "a renews");
            assert_eq!(store.lease_holder(SCHEDULER).await.unwrap().map(|(h, _)| h).as_deref(), Some("a"));
            // A request through any replica reaches the holder once.
            store.request(SCHEDULER).await.unwrap();
            assert!(!store.take_request(SCHEDULER, "b").await.unwrap());
            assert!(store.take_request(SCHEDULER, "a").await.unwrap());
            assert!(!store.take_request(SCHEDULER, "a").await.unwrap());
            // a's lease lapses: b takes it, and a cannot renew.
            assert!(store.try_lead(SCHEDULER, "a", Duration::ZERO).await.unwrap());
            on_pool!(store, |pool| sqlx::query("UPDATE leases SET expires_at = expires_at - 5")
                .execute(pool)
                .await
                .map(|_| ()))
            .unwrap();
            assert!(store.try_lead(SCHEDULER, "b", ttl).await.unwrap(), "{:?}", store.backend());
            assert!(!store.try_lead(SCHEDULER, "a", ttl).await.unwrap());
            store.resign(SCHEDULER, "b").await.unwrap();
            assert!(store.try_lead(SCHEDULER, "a", ttl).await.unwrap(), "free after b resigned");
        }
    }
}
