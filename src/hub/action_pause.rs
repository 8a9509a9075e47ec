//! The Hub's hourly quotas on actions, as one client meets them.
//!
//! The Hub limits commits, repo creations and discussions per user per hour, apart from its 5-minute request
//! quotas. Such a refusal is a 429 with no `RateLimit` and no `Retry-After`, whose text names the action.
//! The quota is the token's, so one refusal pauses every such action this client sends, whichever job sent
//! it. Other requests go on.
//!
//! The wait starts at [`FIRST_PAUSE`] and doubles with each refusal in a row, up to [`LONGEST_PAUSE`] (the
//! quota's hour). A write that succeeds ends the streak.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The first pause after a refusal.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_secs(5 * 60);
/// The longest pause: the quota's window.
pub(crate) const LONGEST_PAUSE: Duration = Duration::from_secs(60 * 60);

/// Until when this client's actions are paused, and how many refusals came in a row.
#[derive(Debug, Default)]
pub(crate) struct ActionPause {
    state: Mutex<Streak>,
}

#[derive(Debug, Default)]
struct Streak {
    until: Option<SystemTime>,
    refusals: u32,
}

impl ActionPause {
    /// Records a refusal at `now` and returns when actions may start again. Refusals of actions sent before
    /// the pause began count as one refusal, not a streak.
    pub(crate) fn refused(&self, now: SystemTime) -> SystemTime {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(until) = state.until.filter(|until| *until > now) {
            return until;
        }
        state.refusals = state.refusals.saturating_add(1);
        let doubled = FIRST_PAUSE.saturating_mul(1 << (state.refusals - 1).min(10));
        let until = now + doubled.min(LONGEST_PAUSE);
        state.until = Some(until);
        until
    }

    /// Records an action the Hub took: the next refusal pauses for [`FIRST_PAUSE`] again.
    pub(crate) fn succeeded(&self) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.refusals = 0;
    }

    /// Returns when actions may start again, if that is after `now`.
    pub(crate) fn until(&self, now: SystemTime) -> Option<SystemTime> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.until.filter(|until| *until > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_in_a_streak_up_to_an_hour_and_a_success_ends_the_streak() {
        let pause = ActionPause::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(pause.until(t0), None);
        assert_eq!(pause.refused(t0), t0 + FIRST_PAUSE);
        assert_eq!(pause.until(t0 + Duration::from_secs(60)), Some(t0 + FIRST_PAUSE));
        assert_eq!(pause.refused(t0 + Duration::from_secs(1)), t0 + FIRST_PAUSE, "in flight: the same pause");
        assert_eq!(pause.until(t0 + FIRST_PAUSE), None, "the pause is over");
        let t1 = t0 + FIRST_PAUSE;
        assert_eq!(pause.refused(t1), t1 + FIRST_PAUSE * 2, "a streak doubles");
        let mut t = t1;
        for _ in 0..20 {
            t = pause.refused(t);
        }
        assert_eq!(pause.refused(t), t + LONGEST_PAUSE, "never longer than the quota's hour");
        pause.succeeded();
        let t2 = t + LONGEST_PAUSE;
        assert_eq!(pause.refused(t2), t2 + FIRST_PAUSE);
    }
}
