//! The verdict of the `workloads` check over what it fetched ([`super::workloads`]): pure, so it
//! is tested without a cluster.

use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL, WorkloadKind};

use super::args::Level;

/// What the `workloads` check found.
#[derive(Debug, Default)]
pub struct Observation {
    /// Every SandboxProvider with `spec.workloads`, by name, with the kinds it binds (each once).
    pub bindings: Vec<(String, Vec<WorkloadKind>)>,
    /// `sandcap run --observe-workloads` (`check --observe-workloads`).
    pub observing: bool,
    /// Each bound kind, with the group/version discovery serves it as, or `None` when it serves
    /// none.
    pub served: Vec<(WorkloadKind, Option<String>)>,
    /// The namespaces labelled `sandcap.dev/workloads=enabled` that are observed, and those
    /// labelled that never are (the cluster's own, sandcap's own).
    pub observed_namespaces: usize,
    pub never_observed: Vec<String>,
    pub rights: Rights,
}

/// What sandcap's ServiceAccount may do, as the apiserver answered SubjectAccessReviews.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Rights {
    /// Every right the observer needs was asked about; these were denied (`list jobs.batch`).
    Asked { account: String, denied: Vec<String> },
    /// Not asked: `--service-account ""`.
    #[default]
    NotAsked,
    /// The apiserver did not answer: why (this account may not ask, a failed request).
    Unknown(String),
}

/// The kinds `bindings` name, each once, in [`WorkloadKind::ALL`]'s order.
pub fn bound_kinds(bindings: &[(String, Vec<WorkloadKind>)]) -> Vec<WorkloadKind> {
    WorkloadKind::ALL.into_iter().filter(|k| bindings.iter().any(|(_, kinds)| kinds.contains(k))).collect()
}

/// A kind as people name it: `Sandbox (agents.x-k8s.io)`.
pub fn shown(kind: WorkloadKind) -> String {
    format!("{} ({})", kind.as_str(), kind.row().group)
}

pub(super) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The `workloads` line: `Fail` when sandcap's ServiceAccount may not do what the observer does;
/// `Warn` when something bound observes nothing (observation off, a kind not served, no namespace
/// opted in) or the rights could not be asked about; `Ok` otherwise.
pub fn workloads(o: &Observation) -> (Level, String) {
    if o.bindings.is_empty() {
        return (Level::Ok, "no SandboxProvider binds workloads (spec.workloads): nothing to observe".into());
    }
    let names: Vec<&str> = o.bindings.iter().map(|(name, _)| name.as_str()).collect();
    let providers = match names.as_slice() {
        [one] => format!("SandboxProvider {one} binds"),
        many => format!("SandboxProviders {} bind", many.join(", ")),
    };
    if !o.observing {
        return (
            Level::Warn,
            format!("{providers} workloads, but sandcap runs with --observe-workloads=false: no lease is observed"),
        );
    }
    let mut lines = Lines::default();
    if let Rights::Asked { account, denied } = &o.rights
        && !denied.is_empty()
    {
        lines.fails.push(format!(
            "ServiceAccount {account} may not {}: the observer cannot work (grant them: the chart's ClusterRole with \
             workloads.enabled, docs/controller.md)",
            denied.join(", ")
        ));
    }
    lines.served(o, &providers);
    lines.namespaces(o);
    lines.rights(&o.rights);
    lines.verdict()
}

/// The `workloads` line's parts, by level.
#[derive(Default)]
struct Lines {
    fails: Vec<String>,
    warns: Vec<String>,
    found: Vec<String>,
}

impl Lines {
    /// Which bound kinds the apiserver serves; `providers` says who binds them.
    fn served(&mut self, o: &Observation, providers: &str) {
        let mut served = Vec::new();
        for (kind, version) in &o.served {
            let Some(version) = version else {
                let by: Vec<&str> = o
                    .bindings
                    .iter()
                    .filter(|(_, kinds)| kinds.contains(kind))
                    .map(|(name, _)| name.as_str())
                    .collect();
                self.warns.push(format!(
                    "{} is not served by the apiserver (no {} in discovery): the bindings of {} observe nothing",
                    shown(*kind),
                    kind.row().plural,
                    by.join(", ")
                ));
                continue;
            };
            served.push(format!("{} (served as {version})", kind.as_str()));
        }
        let what = if served.is_empty() { "workloads".into() } else { served.join(" and ") };
        self.found.push(format!("{providers} {what}"));
    }

    /// Which namespaces opted in.
    fn namespaces(&mut self, o: &Observation) {
        let label = format!("{NAMESPACE_LABEL}={NAMESPACE_ENABLED}");
        let never = if o.never_observed.is_empty() {
            String::new()
        } else {
            format!(" ({} labelled too, never observed)", o.never_observed.join(", "))
        };
        if o.observed_namespaces == 0 {
            self.warns.push(format!(
                "no namespace is labelled {label}{never}: nothing is observed (kubectl label namespace NAME {label})"
            ));
        } else {
            let namespaces = plural(o.observed_namespaces, "namespace", "namespaces");
            self.found.push(format!("{namespaces} labelled {label} observed{never}"));
        }
    }

    /// What sandcap's ServiceAccount may do (a denial is a failure, said first).
    fn rights(&mut self, rights: &Rights) {
        match rights {
            Rights::Asked { account, denied } if denied.is_empty() => self.found.push(format!(
                "ServiceAccount {account} may list and watch them and create, patch and delete SandboxLeases"
            )),
            Rights::Asked { .. } => {}
            Rights::NotAsked => self.found.push("sandcap's rights not asked about (--service-account \"\")".into()),
            Rights::Unknown(why) => {
                self.warns.push(format!("what sandcap's ServiceAccount may do is not known: {why}"))
            }
        }
    }

    fn verdict(self) -> (Level, String) {
        let level = if !self.fails.is_empty() {
            Level::Fail
        } else if !self.warns.is_empty() {
            Level::Warn
        } else {
            Level::Ok
        };
        let all: Vec<String> = self.fails.into_iter().chain(self.warns).chain(self.found).collect();
        (level, all.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Observation {
        Observation {
            bindings: vec![("acme".into(), vec![WorkloadKind::Job]), ("agents".into(), vec![WorkloadKind::Sandbox])],
            observing: true,
            served: vec![
                (WorkloadKind::Job, Some("batch/v1".into())),
                (WorkloadKind::Sandbox, Some("agents.x-k8s.io/v1beta1".into())),
            ],
            observed_namespaces: 2,
            never_observed: vec![],
            rights: Rights::Asked { account: "sandcap-system/sandcap".into(), denied: vec![] },
        }
    }

    #[test]
    fn nothing_bound_is_nothing_to_check() {
        let (level, text) = workloads(&Observation::default());
        assert_eq!(
            (level, text.as_str()),
            (Level::Ok, "no SandboxProvider binds workloads (spec.workloads): nothing to observe")
        );
    }

    #[test]
    fn bound_served_opted_in_and_granted_is_ok() {
        let (level, text) = workloads(&healthy());
        assert_eq!(level, Level::Ok, "{text}");
        assert_eq!(
            text,
            "SandboxProviders acme, agents bind Job (served as batch/v1) and Sandbox (served as \
             agents.x-k8s.io/v1beta1); 2 namespaces labelled sandcap.dev/workloads=enabled observed; ServiceAccount sandcap-system/sandcap may list and watch \
             them and create, patch and delete SandboxLeases"
        );
    }

    #[test]
    fn a_denied_right_fails_and_comes_first() {
        let mut o = healthy();
        o.rights = Rights::Asked {
            account: "sandcap-system/sandcap".into(),
            denied: vec!["list sandboxes.agents.x-k8s.io".into(), "delete sandboxleases.sandcap.dev".into()],
        };
        o.served[1].1 = None;
        let (level, text) = workloads(&o);
        assert_eq!(level, Level::Fail);
        assert!(
            text.starts_with(
                "ServiceAccount sandcap-system/sandcap may not list sandboxes.agents.x-k8s.io, delete \
                 sandboxleases.sandcap.dev: the observer cannot work"
            ),
            "{text}"
        );
        assert!(text.contains("Sandbox (agents.x-k8s.io) is not served"), "{text}");
    }

    #[test]
    fn a_kind_not_served_or_no_namespace_opted_in_is_a_warning() {
        let mut o = healthy();
        o.served[1].1 = None;
        let (level, text) = workloads(&o);
        assert_eq!(level, Level::Warn);
        assert!(
            text.starts_with(
                "Sandbox (agents.x-k8s.io) is not served by the apiserver (no sandboxes in discovery): the bindings of \
                 agents observe nothing; SandboxProviders acme, agents bind Job (served as batch/v1);"
            ),
            "{text}"
        );
        let mut o = healthy();
        o.observed_namespaces = 0;
        o.never_observed = vec!["kube-system".into()];
        let (level, text) = workloads(&o);
        assert_eq!(level, Level::Warn);
        assert!(
            text.starts_with(
                "no namespace is labelled sandcap.dev/workloads=enabled (kube-system labelled too, never observed): \
                 nothing is observed (kubectl label namespace NAME sandcap.dev/workloads=enabled)"
            ),
            "{text}"
        );
    }

    #[test]
    fn observation_off_or_rights_unknown_is_a_warning() {
        let mut o = healthy();
        o.observing = false;
        let (level, text) = workloads(&o);
        assert_eq!(level, Level::Warn);
        assert_eq!(
            text,
            "SandboxProviders acme, agents bind workloads, but sandcap runs with --observe-workloads=false: no lease is \
             observed"
        );
        let mut o = healthy();
        o.rights = Rights::Unknown("this account may not create SubjectAccessReviews".into());
        let (level, text) = workloads(&o);
        assert_eq!(level, Level::Warn);
        assert!(text.starts_with("what sandcap's ServiceAccount may do is not known: this account may not"), "{text}");
        o.rights = Rights::NotAsked;
        let (level, text) = workloads(&o);
        assert_eq!(level, Level::Ok);
        assert!(text.ends_with("; sandcap's rights not asked about (--service-account \"\")"), "{text}");
        o.bindings.truncate(1);
        assert!(workloads(&o).1.starts_with("SandboxProvider acme binds Job (served as batch/v1)"));
    }

    #[test]
    fn kinds_are_named_once_in_order() {
        let bindings = vec![
            ("a".into(), vec![WorkloadKind::Sandbox, WorkloadKind::Job]),
            ("b".into(), vec![WorkloadKind::Sandbox]),
        ];
        assert_eq!(bound_kinds(&bindings), vec![WorkloadKind::Job, WorkloadKind::Sandbox]);
        assert_eq!(shown(WorkloadKind::Job), "Job (batch)");
    }
}
