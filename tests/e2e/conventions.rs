//! The chart conventions admins look for, through the real apiserver: the built-in `view`, `edit`
//! and `admin` roles cover sandcap's resources (the chart's aggregated ClusterRoles), leases are
//! selected by provider and driver (`selectableFields`), and the `helm test` ServiceAccount may do
//! what `sandcap check` does and no more.

use std::collections::BTreeSet;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, ListParams, Patch, PatchParams};
use sandcap_core::api::SandboxLease;
use serde_json::json;

use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install, NAMESPACE, path_str};
use crate::harness::waits::eventually;
use crate::support::{lease, ok};

const BUILT_IN: [&str; 3] = ["view", "edit", "admin"];

/// The ClusterRoles a built-in role's aggregation rule selects, as the apiserver selects them.
async fn aggregated_into(roles: &Api<ClusterRole>, role: &str) -> Vec<ClusterRole> {
    let rule = roles.get(role).await.expect("built-in role").aggregation_rule.expect("an aggregated role");
    let mut found = Vec::new();
    for selector in rule.cluster_role_selectors.expect("selectors") {
        assert!(selector.match_expressions.is_none(), "{role}: only matchLabels are expected");
        let labels = selector.match_labels.expect("matchLabels");
        let query: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        found.extend(roles.list(&ListParams::default().labels(&query.join(","))).await.expect("list").items);
    }
    found
}

/// What kube-controller-manager's ClusterRole aggregation controller does, which this cluster does
/// not run: each built-in role's rules become the union of the rules of the roles its selectors
/// pick, until nothing changes (view feeds edit, edit feeds admin).
async fn aggregate(roles: &Api<ClusterRole>) {
    for _ in 0..BUILT_IN.len() + 1 {
        let mut changed = false;
        for role in BUILT_IN {
            let mut rules: Vec<PolicyRule> = Vec::new();
            for selected in aggregated_into(roles, role).await {
                for rule in selected.rules.unwrap_or_default() {
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                }
            }
            if roles.get(role).await.expect("role").rules.unwrap_or_default() != rules {
                let patch = Patch::Merge(json!({"rules": rules}));
                roles.patch(role, &PatchParams::default(), &patch).await.expect("aggregate rules");
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
    panic!("the aggregation of {BUILT_IN:?} did not settle");
}

fn as_user(c: &Cluster, user: &str, args: &[&str], stdin: &str) -> Output {
    c.kubectl_stdin(&[&["--as", user], args].concat(), stdin)
}

fn allowed(c: &Cluster, user: &str, args: &[&str]) -> String {
    ok(&format!("{user}: kubectl {}", args.join(" ")), as_user(c, user, args, ""))
}

/// Asserts that the apiserver refused `user` for lack of permission (not for anything else).
fn forbidden(c: &Cluster, user: &str, args: &[&str], stdin: &str) {
    let output = as_user(c, user, args, stdin);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("forbidden") && stderr.contains(&format!("\"{user}\"")),
        "{user}: kubectl {} should be forbidden:\n{}{stderr}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout)
    );
}

pub async fn the_built_in_roles_cover_sandcaps_resources(c: Arc<Cluster>) {
    const NS: &str = "e2e-roles";
    const OTHER: &str = "e2e-roles-other";
    install::crds(&c);
    install::namespaces(&c, &[NS, OTHER]);
    Install::chart(&c, json!({})).await;
    let roles: Api<ClusterRole> = Api::all(c.admin().await);

    // The built-in roles pick the chart's roles by their labels, each directly.
    let picked = |found: Vec<ClusterRole>| -> BTreeSet<String> {
        found.into_iter().filter_map(|r| r.metadata.name).filter(|n| n.starts_with("sandcap-")).collect()
    };
    let both = ["sandcap-edit", "sandcap-view"];
    for (role, names) in [("view", &["sandcap-view"][..]), ("edit", &both), ("admin", &both)] {
        let found = picked(aggregated_into(&roles, role).await);
        assert_eq!(found, names.iter().map(|n| n.to_string()).collect(), "ClusterRoles aggregated into {role}");
    }
    let before = roles.get("edit").await.expect("edit").rules.unwrap_or_default().len();
    eprintln!("edit holds {before} rules before aggregation (no kube-controller-manager here)");
    aggregate(&roles).await;

    let bindings = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "e2e-alice-edit", "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "e2e-bob-view", "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "e2e-carol-admin", "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-dave-view"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}]}
    ]});
    ok("bindings", c.kubectl_stdin(&["apply", "-f", "-"], &bindings.to_string()));
    let provider = crate::support::provider("e2e-roles-provider", "http://127.0.0.1:1/rpc", json!({})).to_string();
    let status = r#"{"status":{"effectivePolicy":"ReuseByEnvironment"}}"#;

    // edit and admin (RoleBinding): their namespace's leases, every verb but status; no providers.
    for (user, name) in [("alice", "run-alice"), ("carol", "run-carol")] {
        let created = as_user(&c, user, &["create", "-f", "-"], &lease(NS, name, "p", json!({})).to_string());
        ok(&format!("{user} creates a lease"), created);
        allowed(&c, user, &["-n", NS, "get", "sbl", name]);
        allowed(&c, user, &["-n", NS, "label", "sbl", name, "team=a"]);
        forbidden(
            &c,
            user,
            &["-n", NS, "patch", "sbl", name, "--subresource=status", "--type=merge", "-p", status],
            "",
        );
        forbidden(&c, user, &["create", "-f", "-"], &lease(OTHER, name, "p", json!({})).to_string());
        forbidden(&c, user, &["create", "-f", "-"], &provider);
        forbidden(&c, user, &["get", "sbp"], "");
        allowed(&c, user, &["-n", NS, "delete", "sbl", name]);
    }

    // view (RoleBinding): reads its namespace's leases and their status, writes nothing.
    install::apply(&c, &[lease(NS, "run-1", "p", json!({}))]);
    let listed = allowed(&c, "bob", &["-n", NS, "get", "sbl", "-o", "name"]);
    assert!(listed.contains("sandboxlease.sandcap.dev/run-1"), "{listed}");
    allowed(&c, "bob", &["-n", NS, "get", "sbl", "run-1", "--subresource=status"]);
    forbidden(&c, "bob", &["-n", NS, "label", "sbl", "run-1", "team=b"], "");
    forbidden(&c, "bob", &["-n", NS, "delete", "sbl", "run-1"], "");
    forbidden(&c, "bob", &["create", "-f", "-"], &lease(NS, "run-bob", "p", json!({})).to_string());
    forbidden(&c, "bob", &["-n", OTHER, "get", "sbl"], "");
    // Providers are cluster-scoped: a RoleBinding cannot grant them.
    forbidden(&c, "bob", &["get", "sbp"], "");

    // view (ClusterRoleBinding): reads providers and every lease; writes neither.
    allowed(&c, "dave", &["get", "sbp"]);
    allowed(&c, "dave", &["get", "sbl", "-A"]);
    forbidden(&c, "dave", &["create", "-f", "-"], &provider);
    forbidden(&c, "dave", &["-n", NS, "delete", "sbl", "run-1"], "");
    ok("delete", c.kubectl(&["delete", "clusterrolebinding", "e2e-dave-view"]));
}

pub async fn leases_are_selected_by_provider_and_driver(c: Arc<Cluster>) {
    const A: &str = "e2e-select-a";
    const B: &str = "e2e-select-b";
    install::crds(&c);
    install::namespaces(&c, &[A, B]);
    let driver = |provider: &str, key: &str| json!({"providerRef": {"name": provider, "driverKey": key}});
    install::apply(
        &c,
        &[
            lease(A, "l1", "p1", json!({})),
            lease(A, "l2", "p1", driver("p1", "docker")),
            lease(A, "l3", "p2", json!({})),
            lease(B, "l4", "p1", json!({})),
        ],
    );
    let select = |scope: &[&str], selector: &str| -> BTreeSet<String> {
        let columns = "custom-columns=:metadata.namespace,:metadata.name";
        let args = [&["get", "sbl"], scope, &["--no-headers", "-o", columns, "--field-selector", selector]].concat();
        let out = ok(&format!("--field-selector {selector}"), c.kubectl(&args));
        out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join("/")).collect()
    };
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(select(&["-n", A], "spec.providerRef.name=p1"), set(&["e2e-select-a/l1", "e2e-select-a/l2"]));
    assert_eq!(
        select(&["-A"], "spec.providerRef.name=p1"),
        set(&["e2e-select-a/l1", "e2e-select-a/l2", "e2e-select-b/l4"])
    );
    assert_eq!(
        select(&["-A"], "spec.providerRef.name=p1,spec.providerRef.driverKey=kubernetes"),
        set(&["e2e-select-a/l1", "e2e-select-b/l4"])
    );
    assert_eq!(select(&["-n", A], "spec.providerRef.driverKey!=kubernetes"), set(&["e2e-select-a/l2"]));
    assert_eq!(select(&["-A"], "spec.providerRef.name=nobody"), set(&[]));

    // The same through kube-rs, as a controller or the plugin would ask.
    let leases: Api<SandboxLease> = Api::namespaced(c.admin().await, A);
    let found = leases.list(&ListParams::default().fields("spec.providerRef.name=p2")).await.expect("list");
    let names: Vec<_> = found.items.iter().filter_map(|l| l.metadata.name.as_deref()).collect();
    assert_eq!(names, ["l3"]);

    // Only the declared fields: anything else is refused, not ignored.
    let refused = c.kubectl(&["-n", A, "get", "sbl", "--field-selector", "spec.policy=Ephemeral"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("spec.policy"), "{stderr}");
}

pub async fn the_helm_test_may_do_what_check_does_and_no_more(c: Arc<Cluster>) {
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    let account = install
        .objects
        .iter()
        .find(|o| o["kind"] == "Pod")
        .and_then(|o| o["spec"]["serviceAccountName"].as_str())
        .expect("the helm test pod")
        .to_string();
    let kubeconfig = c.service_account_kubeconfig(NAMESPACE, &account).await;
    let user = format!("system:serviceaccount:{NAMESPACE}:{account}");
    let test =
        |args: &[&str], stdin: &str| c.kubectl_stdin(&[&["--kubeconfig", path_str(&kubeconfig)], args].concat(), stdin);
    let refused = |args: &[&str], stdin: &str, why: &str| {
        let output = test(args, stdin);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            !output.status.success() && stderr.contains(why),
            "kubectl {} should fail with {why}:\n{stderr}",
            args.join(" ")
        );
    };
    // What it may read, by name: found, or not found once authorized; other names are forbidden.
    let authorized = |args: &[&str]| {
        let output = test(args, "");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() || stderr.contains("NotFound"), "kubectl {}:\n{stderr}", args.join(" "));
    };
    authorized(&["get", "crd", "sandboxproviders.sandcap.dev", "sandboxleases.sandcap.dev"]);
    authorized(&["get", "validatingwebhookconfiguration", "sandcap"]);
    authorized(&["-n", NAMESPACE, "get", "lease", "sandcap-controller"]);
    refused(&["get", "crd"], "", "forbidden");
    refused(&["get", "validatingwebhookconfiguration", "other"], "", "forbidden");
    refused(&["-n", NAMESPACE, "get", "lease", "other"], "", "forbidden");
    ok("list", test(&["get", "sbp,sbl", "-A"], ""));
    // The workloads check: the namespaces that opt in (a list, no get), and what sandcap may do.
    ok("list namespaces", test(&["get", "namespaces", "-l", "sandcap.dev/workloads=enabled"], ""));
    refused(&["get", "namespace", "default"], "", "forbidden");
    refused(&["-n", NAMESPACE, "get", "secret", "sandcap-webhook-tls"], "", "forbidden");
    refused(&["create", "-f", "-"], &lease("default", "x", "p", json!({})).to_string(), "forbidden");

    // A SandboxProvider: a server-side dry run passes, a real create is refused by the chart's
    // admission policy (RBAC cannot tell the two apart).
    let provider = crate::support::provider("e2e-helm-test", "http://127.0.0.1:1/rpc", json!({})).to_string();
    ok("dry run", test(&["create", "--dry-run=server", "-f", "-"], &provider));
    // The policy takes effect a moment after it is created: a create that got through before is
    // undone and tried again.
    let denial = eventually("the dry-run-only policy", Duration::from_secs(30), || async {
        let output = test(&["create", "-f", "-"], &provider);
        if output.status.success() {
            ok("undo", c.kubectl(&["delete", "sbp", "e2e-helm-test"]));
            return None;
        }
        Some(String::from_utf8_lossy(&output.stderr).into_owned())
    })
    .await;
    assert!(denial.contains("may create SandboxProviders only in a server-side dry run"), "{denial}");
    assert!(denial.contains("sandcap-check-dry-run-only"), "{denial}");
    let stored = c.kubectl(&["get", "sbp", "e2e-helm-test"]);
    assert!(!stored.status.success(), "nothing was created as {user}");
    // It may delete the check's own provider (one created before the policy held), no other.
    authorized(&["delete", "sbp", "sandcap-check-dry-run"]);
    refused(&["delete", "sbp", "e2e-helm-test"], "", "forbidden");
}
