use super::*;
use crate::api::{SandboxProviderSpec, WorkloadSelector};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn binding(kind: WorkloadKind, selector: &[(&str, &str)], driver: &str) -> WorkloadBinding {
    WorkloadBinding {
        kind,
        selector: WorkloadSelector { match_labels: labels(selector), ..WorkloadSelector::default() },
        driver_key: driver.to_string(),
        policy: None,
        environment_label: None,
        extra: BTreeMap::new(),
    }
}

fn provider(name: &str, workloads: Vec<WorkloadBinding>) -> SandboxProvider {
    let mut p = SandboxProvider::new(name, SandboxProviderSpec { workloads, ..SandboxProviderSpec::default() });
    p.metadata.name = Some(name.to_string());
    p
}

const MANAGED: (&str, &str) = ("paperclip.io/managed-by", "paperclip-k8s-plugin");

fn workload<'a>(kind: WorkloadKind, labels: &'a BTreeMap<String, String>) -> Workload<'a> {
    let api_version = if kind == WorkloadKind::Job { "batch/v1" } else { "agents.x-k8s.io/v1beta1" };
    Workload { kind, api_version, namespace: "paperclip-acme", name: "pc-01j", uid: "u-1", labels }
}

#[test]
fn a_matching_job_gets_a_job_backed_ephemeral_lease_owned_by_it() {
    let providers = [provider("k8s", vec![binding(WorkloadKind::Job, &[MANAGED], "kubernetes")])];
    let binder = Binder::new(&providers);
    let l = labels(&[MANAGED, ("paperclip.io/run-id", "r1")]);
    let Bound::One(desired) = binder.bind(&workload(WorkloadKind::Job, &l)) else { panic!("bound") };
    assert_eq!((desired.namespace.as_str(), desired.name.as_str()), ("paperclip-acme", "pc-01j"));
    assert_eq!(desired.spec.provider_ref.name, "k8s");
    assert_eq!(desired.spec.provider_ref.driver_key, "kubernetes");
    assert_eq!(desired.spec.policy, Some(LeasePolicy::Ephemeral));
    assert_eq!(desired.spec.backend.as_deref(), Some("job"));
    let reference = desired.spec.workload_ref.as_ref().unwrap();
    assert!(reference.is_batch_job() && reference.name == "pc-01j");
    assert_eq!((desired.owner.api_version.as_str(), desired.owner.kind.as_str()), ("batch/v1", "Job"));
    assert_eq!((desired.owner.uid.as_str(), desired.owner.controller), ("u-1", Some(false)));
    assert_eq!(desired.object()["metadata"]["labels"][OBSERVED_FROM_LABEL], "job");
}

#[test]
fn a_sandbox_is_its_own_backend_at_the_served_version() {
    let providers = [provider("k8s", vec![binding(WorkloadKind::Sandbox, &[MANAGED], "kubernetes")])];
    let l = labels(&[MANAGED]);
    let Bound::One(desired) = Binder::new(&providers).bind(&workload(WorkloadKind::Sandbox, &l)) else { panic!() };
    assert_eq!(desired.spec.backend.as_deref(), Some("sandbox-cr"));
    assert_eq!(desired.owner.api_version, "agents.x-k8s.io/v1beta1");
    assert!(!desired.spec.workload_ref.unwrap().is_batch_job());
}

#[test]
fn unlabelled_workloads_and_other_kinds_are_unbound() {
    let providers = [provider("k8s", vec![binding(WorkloadKind::Job, &[MANAGED], "kubernetes")])];
    let binder = Binder::new(&providers);
    let other = labels(&[("paperclip.io/managed-by", "someone-else")]);
    assert_eq!(binder.bind(&workload(WorkloadKind::Job, &other)), Bound::Unbound);
    let managed = labels(&[MANAGED]);
    assert_eq!(binder.bind(&workload(WorkloadKind::Sandbox, &managed)), Bound::Unbound);
}

#[test]
fn the_environment_comes_from_the_bindings_label_and_without_it_the_lease_is_ephemeral() {
    let mut reuse = binding(WorkloadKind::Job, &[MANAGED], "kubernetes");
    reuse.policy = Some(LeasePolicy::ReuseByEnvironment);
    reuse.environment_label = Some("paperclip.io/agent-id".into());
    let providers = [provider("k8s", vec![reuse])];
    let binder = Binder::new(&providers);
    let with = labels(&[MANAGED, ("paperclip.io/agent-id", "agent-7")]);
    let Bound::One(desired) = binder.bind(&workload(WorkloadKind::Job, &with)) else { panic!() };
    assert_eq!(desired.spec.policy, Some(LeasePolicy::ReuseByEnvironment));
    assert_eq!(desired.spec.environment.as_deref(), Some("agent-7"));
    let without = labels(&[MANAGED]);
    let Bound::One(desired) = binder.bind(&workload(WorkloadKind::Job, &without)) else { panic!() };
    assert_eq!((desired.spec.policy, desired.spec.environment), (Some(LeasePolicy::Ephemeral), None));
}

#[test]
fn bindings_that_disagree_bind_nothing_and_ones_that_agree_bind_once() {
    let a = provider("a", vec![binding(WorkloadKind::Job, &[MANAGED], "kubernetes")]);
    let b = provider("b", vec![binding(WorkloadKind::Job, &[("paperclip.io/role", "agent")], "kubernetes")]);
    let twice = provider("c", vec![binding(WorkloadKind::Job, &[MANAGED], "kubernetes"); 2]);
    let l = labels(&[MANAGED, ("paperclip.io/role", "agent")]);
    let job = workload(WorkloadKind::Job, &l);
    let ambiguous = Binder::new([&a, &b]).bind(&job);
    assert_eq!(ambiguous, Bound::Ambiguous(vec!["a/workloads[0]".into(), "b/workloads[0]".into()]));
    assert!(matches!(Binder::new([&twice]).bind(&job), Bound::One(_)));
}

#[test]
fn each_distinct_selector_of_a_kind_is_one_watch_and_an_empty_one_none() {
    let mut requirement = binding(WorkloadKind::Job, &[], "kubernetes");
    requirement.selector.match_expressions = vec![crate::api::Requirement {
        key: "paperclip.io/run-id".into(),
        operator: crate::api::SelectorOperator::Exists,
        values: vec![],
        extra: BTreeMap::new(),
    }];
    let providers = [
        provider(
            "a",
            vec![binding(WorkloadKind::Job, &[MANAGED], "k"), binding(WorkloadKind::Sandbox, &[MANAGED], "k")],
        ),
        provider(
            "b",
            vec![binding(WorkloadKind::Job, &[MANAGED], "k"), requirement, binding(WorkloadKind::Job, &[], "k")],
        ),
    ];
    let watches: Vec<_> = Binder::new(&providers).watches().into_iter().collect();
    let managed = "paperclip.io/managed-by=paperclip-k8s-plugin".to_string();
    assert_eq!(
        watches,
        [
            (WorkloadKind::Job, managed.clone()),
            (WorkloadKind::Job, "paperclip.io/run-id".to_string()),
            (WorkloadKind::Sandbox, managed),
        ]
    );
}

#[test]
fn only_the_labels_some_binding_of_the_kind_reads_are_kept() {
    let mut reuse = binding(WorkloadKind::Job, &[MANAGED], "k");
    reuse.environment_label = Some("paperclip.io/agent-id".into());
    let mut requirement = binding(WorkloadKind::Job, &[], "k");
    requirement.selector.match_expressions = vec![crate::api::Requirement {
        key: "paperclip.io/role".into(),
        operator: crate::api::SelectorOperator::DoesNotExist,
        values: vec![],
        extra: BTreeMap::new(),
    }];
    let sandboxes = binding(WorkloadKind::Sandbox, &[("team", "a")], "k");
    let providers = [provider("a", vec![reuse, requirement, sandboxes])];
    let binder = Binder::new(&providers);
    let read: Vec<String> = binder.labels_read(WorkloadKind::Job).into_iter().collect();
    // A `DoesNotExist` key too: a label dropped would read as absent and match.
    assert_eq!(read, ["paperclip.io/agent-id", "paperclip.io/managed-by", "paperclip.io/role"]);
    assert_eq!(binder.labels_read(WorkloadKind::Sandbox).into_iter().collect::<Vec<_>>(), ["team"]);
    assert!(binder.labels_read(WorkloadKind::SandboxClaim).is_empty());
}

mod tenancy {
    use proptest::prelude::*;

    use super::*;
    use crate::judge::{Options, judge};
    use crate::schema::Server;

    fn label_value() -> impl Strategy<Value = String> {
        "([A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?)?"
    }

    proptest! {
        /// Whatever labels a tenant gives its workload, the lease it gets is in the workload's
        /// namespace, under its name, and one the CRD and the webhook would admit if the tenant
        /// wrote it by hand: labels choose nothing a hand-made lease could not.
        #[test]
        fn an_observed_lease_is_one_a_tenant_could_have_written_in_its_own_namespace(
            agent in label_value(),
            extra in prop::collection::btree_map("[a-z]{1,8}", label_value(), 0..4),
            reuse in any::<bool>(),
        ) {
            let mut b = binding(WorkloadKind::Job, &[MANAGED], "kubernetes");
            if reuse {
                b.policy = Some(LeasePolicy::ReuseByEnvironment);
                b.environment_label = Some("paperclip.io/agent-id".into());
            }
            let providers = [provider("k8s", vec![b])];
            let mut l = extra;
            l.insert(MANAGED.0.into(), MANAGED.1.into());
            l.insert("paperclip.io/agent-id".into(), agent);
            let Bound::One(desired) = Binder::new(&providers).bind(&workload(WorkloadKind::Job, &l)) else {
                panic!("bound")
            };
            prop_assert_eq!((desired.namespace.as_str(), desired.name.as_str()), ("paperclip-acme", "pc-01j"));
            let verdict = judge(&desired.object(), &Options::default(), Server::default());
            prop_assert!(verdict.allowed(), "{}", verdict.message());
        }
    }
}
