//! The database's clock. Leases, backoffs and run times are stamped and compared with it. Replicas whose own
//! clocks disagree thus still agree on who holds a lease and when a job is due.

use super::{Store, StoreError, on_pool, sql};

/// How far a process's clock may be from the database's before the process says so at start.
pub(crate) const SKEW_TOLERANCE_SECS: i64 = 5;

impl Store {
    /// Returns the database's time, in Unix seconds.
    pub async fn db_now(&self) -> Result<i64, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar("SELECT unixepoch()").fetch_one(pool).await)
            .map_err(sql("read the database's clock"))
    }

    /// Returns the database's time as the store's text times spell it (`YYYY-MM-DDTHH:MM:SSZ`).
    pub async fn db_now_utc(&self) -> Result<String, StoreError> {
        Ok(crate::time::format_utc(u64::try_from(self.db_now().await?).unwrap_or(0)))
    }

    /// Returns how many seconds this process's clock is behind the database's (negative: ahead).
    pub async fn clock_skew(&self) -> Result<i64, StoreError> {
        let before = crate::job::unix_now();
        let db = self.db_now().await?;
        let after = crate::job::unix_now();
        // The database read its clock between our two readings, so compare it with their middle.
        Ok(db - (before + (after - before) / 2))
    }
}

/// Moves a Unix time `until` of this process's clock onto the database's clock. `db_now` is the database's
/// time, read when this process's clock said `now`.
pub(crate) fn onto_db_clock(until: i64, now: i64, db_now: i64) -> i64 {
    db_now.saturating_add(until.saturating_sub(now).max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_backends_read_their_clock_and_agree_with_this_machine_s() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let skew = store.clock_skew().await.unwrap();
            assert!(skew.abs() <= 1, "{:?}: {skew}", store.backend());
            let text = store.db_now_utc().await.unwrap();
            assert!(crate::time::parse_utc(&text).is_some(), "{text}");
        }
    }

    #[test]
    fn a_process_time_moves_onto_the_database_s_clock_by_its_distance_from_now() {
        assert_eq!(onto_db_clock(1_100, 1_000, 5_000), 5_100);
        assert_eq!(onto_db_clock(900, 1_000, 5_000), 5_000, "a time passed is now");
        assert_eq!(onto_db_clock(i64::MAX, 0, 5_000), i64::MAX);
    }
}
