use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

const INTERVAL: Duration = Duration::from_secs(300);

fn methods(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|m| m.to_string()).collect())
}

fn subset(a: &Option<Vec<String>>, of: &Option<Vec<String>>) -> bool {
    !narrows(a, of)
}

#[test]
fn a_first_decision_and_a_grant_with_no_narrowing_before_it_are_not_held() {
    let (mut settling, start) = (Settling::default(), Instant::now());
    let first = settling.decide(methods(&["a"]), 1, start, INTERVAL);
    assert_eq!(first, Decision { methods: methods(&["a"]), held: None });
    let wider = settling.decide(methods(&["a", "b"]), 2, start, INTERVAL);
    assert_eq!(wider, Decision { methods: methods(&["a", "b"]), held: None }, "a rollout adding a method");
}

#[test]
fn a_narrowing_is_granted_again_only_after_the_window_and_each_narrowing_doubles_it() {
    let (mut settling, start) = (Settling::default(), Instant::now());
    let at = |s: u64| start + Duration::from_secs(s);
    settling.decide(methods(&["a", "b"]), 1, at(0), INTERVAL);
    assert_eq!(settling.decide(methods(&["a"]), 2, at(1), INTERVAL).methods, methods(&["a"]), "revoked at once");
    let held = settling.decide(methods(&["a", "b"]), 1, at(2), INTERVAL);
    assert_eq!(held.methods, methods(&["a"]));
    assert_eq!(held.held, Some(Held { until: at(2) + WINDOW_MIN, window: WINDOW_MIN, flaps: 1 }));
    assert_eq!(settling.decide(methods(&["a", "b"]), 1, at(6), INTERVAL).methods, methods(&["a"]));
    assert_eq!(settling.decide(methods(&["a", "b"]), 1, at(7), INTERVAL).held, None, "stable for the window");
    settling.decide(None, 3, at(8), INTERVAL);
    let held = settling.decide(methods(&["a", "b"]), 1, at(9), INTERVAL);
    assert_eq!((held.methods, held.held.map(|h| h.window)), (None, Some(WINDOW_MIN * 2)));
    let unchanged_since = at(9);
    assert_eq!(
        settling.decide(methods(&["a", "b"]), 1, unchanged_since + WINDOW_MIN * 2, INTERVAL).methods,
        methods(&["a", "b"])
    );
}

#[test]
fn the_window_stops_at_the_probe_interval_and_flaps_are_forgotten_after_a_quiet_spell() {
    assert_eq!(window(1, INTERVAL), WINDOW_MIN);
    assert_eq!(window(4, INTERVAL), WINDOW_MIN * 8);
    assert_eq!(window(40, INTERVAL), INTERVAL);
    assert_eq!(window(3, Duration::from_secs(1)), WINDOW_MIN, "never shorter than the first window");
    let (mut settling, start) = (Settling::default(), Instant::now());
    settling.decide(methods(&["a"]), 1, start, INTERVAL);
    settling.decide(None, 2, start, INTERVAL);
    let calm = start + INTERVAL * QUIET_INTERVALS;
    assert_eq!(settling.decide(methods(&["a"]), 1, calm, INTERVAL).held.map(|h| h.flaps), Some(1));
    assert_eq!(settling.decide(methods(&["a"]), 1, calm + INTERVAL, INTERVAL).held, None);
    let quiet = calm + INTERVAL * QUIET_INTERVALS;
    settling.decide(methods(&["a"]), 1, quiet, INTERVAL);
    settling.decide(None, 2, quiet, INTERVAL);
    let again = settling.decide(methods(&["a"]), 1, quiet, INTERVAL);
    assert_eq!(again.held.map(|h| (h.flaps, h.window)), Some((1, WINDOW_MIN)), "counted from one again");
}

/// With the shortest probe interval, a Pod flipping every two seconds still never gets its
/// grant back: the flaps are forgotten only once the endpoints stay unchanged.
#[test]
fn a_short_interval_forgets_flaps_only_after_calm() {
    let (mut settling, start) = (Settling::default(), Instant::now());
    let interval = Duration::from_secs(1);
    settling.decide(methods(&["a"]), 1, start, interval);
    for flip in 1..120u64 {
        let (agreed, serving) = if flip % 2 == 1 { (None, 2) } else { (methods(&["a"]), 1) };
        let decision = settling.decide(agreed, serving, start + Duration::from_secs(2 * flip), interval);
        assert_eq!(decision.methods, None, "flip {flip}");
    }
}

#[test]
fn a_swap_of_methods_revokes_the_old_at_once_and_holds_the_new() {
    let (mut settling, start) = (Settling::default(), Instant::now());
    settling.decide(methods(&["a", "b"]), 1, start, INTERVAL);
    let swapped = settling.decide(methods(&["a", "c"]), 2, start, INTERVAL);
    assert_eq!(swapped.methods, methods(&["a"]));
    assert!(swapped.held.is_some());
}

/// One endpoint of a provider flapping as `toggles` says (how long each state lasts, in tenths of
/// a second), the provider reconciled at each toggle and whenever a held grant comes due.
/// Returns when each decision changed the grant, and checks at each step that nothing beyond the
/// agreement is granted (so a narrowing is written at once).
fn flap(toggles: &[u64], lone: bool) -> Vec<Instant> {
    let (mut settling, start) = (Settling::default(), Instant::now());
    let (full, lacking) = (methods(&["a", "b"]), methods(&["a"]));
    // A lone endpoint leaving verifies nothing; one of several lacking a method narrows by it.
    let (present, absent) = if lone { (full.clone(), None) } else { (lacking, full.clone()) };
    let mut now = start;
    let mut last = settling.decide(full, 0, now, INTERVAL).methods;
    let mut changes = Vec::new();
    for (i, tenths) in toggles.iter().enumerate() {
        let (agreed, serving) = if i % 2 == 0 { (absent.clone(), 1) } else { (present.clone(), 2) };
        let end = now + Duration::from_millis(tenths * 100);
        while now < end {
            let decision = settling.decide(agreed.clone(), serving, now, INTERVAL);
            assert!(subset(&decision.methods, &agreed), "granted beyond the agreement, or revoked late: {decision:?}");
            if decision.methods != last {
                changes.push(now);
                last = decision.methods;
            }
            now = match decision.held {
                Some(held) if held.until < end => held.until,
                _ => end,
            };
        }
    }
    changes
}

/// At most this many changes of a provider's grant in any minute, whatever one endpoint does, with
/// a probe interval of 40 s or more (docs/controller.md, "Flapping endpoints").
const CHANGES_PER_MINUTE: usize = 7;

fn most_in_a_minute(changes: &[Instant]) -> usize {
    changes
        .iter()
        .map(|start| changes.iter().filter(|c| **c >= *start && **c - *start < Duration::from_secs(60)).count())
        .max()
        .unwrap_or(0)
}

#[test]
fn an_endpoint_flipping_every_two_seconds_for_two_minutes_changes_the_grant_once() {
    for lone in [true, false] {
        let changes = flap(&[20; 60], lone);
        assert_eq!(changes.len(), 1, "revoked once and held while it flaps ({lone})");
    }
    let settled = flap(&[20, 20, 20, 20, 20, 600], true);
    assert_eq!(settled.len(), 2, "granted again once it stays");
}

proptest! {
    #[test]
    fn whatever_one_endpoint_does_the_grant_changes_at_most_seven_times_a_minute(
        toggles in prop::collection::vec(1u64..400, 1..300),
        lone in any::<bool>(),
    ) {
        let changes = flap(&toggles, lone);
        prop_assert!(most_in_a_minute(&changes) <= CHANGES_PER_MINUTE, "{changes:?}");
    }
}
