//! A write the observer made and the lease watch has not brought back yet is not sent again: a
//! pass that runs before the watch catches up (a busy apiserver, a loaded node) would otherwise
//! repeat it (a second delete of a lease already deleted, a create refused as existing). A write
//! counts as seen once the lease table holds another version of the name than the one it was
//! judged against, or after [`AWAIT`], whichever comes first, so a lost event costs a delay, not
//! the write.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::controller::capacity::give_back;

/// How long a write waits to be seen before the name may be written again regardless.
pub const AWAIT: Duration = Duration::from_secs(15);

/// By namespace and name: the version of the lease a write was judged against (`None`: there was
/// none), and when it was made.
#[derive(Debug, Default)]
pub struct Awaiting {
    names: HashMap<(String, String), (Option<String>, Instant)>,
}

impl Awaiting {
    /// Whether a write of `key` made earlier is still unseen while the table holds `version`.
    pub fn unseen(&mut self, key: &(String, String), version: Option<&str>, now: Instant) -> bool {
        let Some((judged, at)) = self.names.get(key) else { return false };
        if judged.as_deref() == version && now.duration_since(*at) < AWAIT {
            return true;
        }
        self.names.remove(key);
        false
    }

    /// A write of `key`, judged against the lease at `version`, succeeded at `now`.
    pub fn wrote(&mut self, key: (String, String), version: Option<String>, now: Instant) {
        self.names.insert(key, (version, now));
    }

    /// Forgets every name but those `wanted` (the names the last pass meant to write).
    pub fn retain(&mut self, wanted: impl Fn(&(String, String)) -> bool) {
        self.names.retain(|key, _| wanted(key));
        give_back(&mut self.names);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_not_repeated_until_the_table_shows_its_effect_or_it_has_waited_long_enough() {
        let (mut awaiting, now) = (Awaiting::default(), Instant::now());
        let key = ("team-a".to_string(), "pc-1".to_string());
        assert!(!awaiting.unseen(&key, Some("7"), now), "never written");
        awaiting.wrote(key.clone(), Some("7".into()), now);
        assert!(awaiting.unseen(&key, Some("7"), now + Duration::from_secs(1)), "a delete the watch has not shown");
        assert!(!awaiting.unseen(&key, None, now + Duration::from_secs(1)), "gone: seen");
        assert!(!awaiting.unseen(&key, Some("7"), now), "forgotten once seen");
        awaiting.wrote(key.clone(), None, now);
        assert!(awaiting.unseen(&key, None, now), "a create the watch has not shown");
        assert!(!awaiting.unseen(&key, None, now + AWAIT), "a lost event costs a delay, not the write");
        awaiting.wrote(key.clone(), None, now);
        awaiting.retain(|_| false);
        assert!(!awaiting.unseen(&key, None, now));
    }
}
