use super::*;

fn probed(at: Instant, failing_since: Option<Instant>) -> Probed {
    let member = Member { ip: "10.0.0.1".parse().unwrap(), port: 80, pod: None };
    let outcome = match failing_since {
        Some(_) => ProbeOutcome::Failed(crate::probe::ProbeError::NotOk.into()),
        None => ProbeOutcome::Succeeded { methods: vec![], plugin: None },
    };
    Probed { member, outcome, at, failing_since }
}

#[test]
fn endpoints_the_budget_cut_off_fail_and_keep_how_long_they_have_been_failing() {
    let start = Instant::now();
    let member = |last: u8| Member { ip: format!("10.0.0.{last}").parse().unwrap(), port: 80, pod: None };
    let answered = Probed { member: member(1), ..probed(start, None) };
    let due = vec![(member(1), None), (member(2), None), (member(3), Some(start))];
    let at = start + PROBE_BUDGET;
    let cut = unanswered(due, &[answered], at);
    let members: Vec<_> = cut.iter().map(|p| p.member.clone()).collect();
    assert_eq!(members, [member(2), member(3)], "the answered endpoint is kept as it answered");
    assert!(cut.iter().all(|p| p.outcome == ProbeOutcome::Failed(ProbeError::Timeout(PROBE_BUDGET).into())));
    assert_eq!(cut.iter().map(|p| p.failing_since).collect::<Vec<_>>(), [Some(at), Some(start)]);
    assert!(PROBE_BUDGET < RECONCILE_DEADLINE, "the status is written within the reconcile's deadline");
}

#[test]
fn an_endpoint_that_serves_again_keeps_its_fresh_answer_and_a_new_pod_at_its_address_is_new() {
    let start = Instant::now();
    let member =
        |last: u8, pod: &str| Member { ip: format!("10.0.0.{last}").parse().unwrap(), port: 80, pod: Some(pod.into()) };
    let answered = |m: Member, at: Instant| Probed { member: m, ..probed(at, None) };
    let previous = vec![
        answered(member(1, "a"), start),
        answered(member(2, "b"), start),
        answered(member(3, "c"), start - Duration::from_secs(600)),
        answered(member(4, "d"), start),
    ];
    let fresh = |p: &Probed| start.duration_since(p.at) < Duration::from_secs(300);
    // 1 came back (it had departed), 2 is serving still, 3's answer is stale, 4 left, and
    // a new Pod took 1's old place at address 5.
    let now = vec![member(1, "a"), member(2, "b"), member(3, "c"), member(5, "a2")];
    let Due { kept, due, departed } = split(previous, now, fresh);
    let of = |probes: &[Probed]| probes.iter().map(|p| p.member.clone()).collect::<Vec<_>>();
    assert_eq!(of(&kept), [member(1, "a"), member(2, "b")]);
    assert_eq!(due.into_iter().map(|(m, _)| m).collect::<Vec<_>>(), [member(3, "c"), member(5, "a2")]);
    assert_eq!(of(&departed), [member(4, "d")], "kept for when it returns");
}

#[test]
fn failures_are_retried_from_seconds_doubling_to_the_interval_and_answers_after_it() {
    let interval = Duration::from_secs(300);
    let start = Instant::now();
    let after = |failing_for: u64, share: u64| {
        due_after(&probed(start + Duration::from_secs(failing_for), Some(start)), interval, share)
    };
    assert_eq!(after(0, 0), RETRY_MIN, "a first failure is retried within seconds");
    assert_eq!(after(1, 0), RETRY_MIN);
    assert_eq!(after(40, 0), Duration::from_secs(40), "as long again as it has been failing");
    assert_eq!(after(3600, 0), interval, "never longer than the interval");
    assert_eq!(after(0, 999), RETRY_MIN + RETRY_MIN / 10 * 999 / 1000, "spread by a tenth at most");
    assert_eq!(due_after(&probed(start, None), interval, 500), interval + Duration::from_secs(15));
}
