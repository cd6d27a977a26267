"""Tests of the chart conventions admins look for (issue 16): the aggregated ClusterRoles, the
`helm test` hook, kubeVersion, the leases' selectable fields, and host networking (the
PrometheusRule: test_alerts.py). Rendered by real Helm through test_chart's helpers; the
apiserver's side of the roles, the selectable fields and the test's RBAC is tests/e2e/conventions.rs.
"""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from test_chart import (
    assert_lints_strict,
    REPO,
    CHART,
    KUBE_VERSION_RANGE,
    NAMESPACE,
    NONROOT,
    chart_crds,
    container,
    env,
    is_aggregated,
    is_hook,
    merged,
    of_kind,
    one,
    render,
    render_text,
    validate_object,
)

README = (REPO / "README.md").read_text()
# The manual by task (docs/): the pages chart tests hold values, notes, alerts and findings to.
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()

HOST_NETWORK = {"hostNetwork": True, "webhook": {"port": 10260}, "admin": {"port": 10261}}

# Scenarios of this file's values; test_chart's SCENARIOS assume pod networking.
SCENARIOS: dict[str, dict[str, Any]] = {
    "hostNetwork": HOST_NETWORK,
    "hostNetwork-dnsPolicy": {**HOST_NETWORK, "dnsPolicy": "Default"},
    "no-aggregated-roles": {"aggregatedRoles": {"enabled": False}},
    "no-helm-test": {"helmTest": {"enabled": False}},
    "helm-test-everything": {
        "certificates": {"mode": "certManager"},
        "leaderElection": {"enabled": False},
        "replicaCount": 1,
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "networkPolicy": {"enabled": True, "webhookFrom": [{"ipBlock": {"cidr": "172.18.0.0/16"}}]},
    },
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(scenario: str) -> None:
    assert_lints_strict(SCENARIOS[scenario])


@pytest.mark.parametrize("kube_version", KUBE_VERSION_RANGE)
@pytest.mark.parametrize("scenario", ["default", *SCENARIOS])
def test_objects_and_hooks_validate(scenario: str, kube_version: str) -> None:
    """Strict Kubernetes schemas (and the PrometheusRule CRD's model) for the objects of the
    install and of `helm test` alike."""
    for obj in render(SCENARIOS.get(scenario, {}), hooks=True):
        validate_object(obj, kube_version)


@pytest.mark.parametrize(
    "values",
    [
        {"hostNetwork": "yes"},
        {"dnsPolicy": "None"},
        {"dnsPolicy": "clusterfirst"},
        # The ports become the node's; the container may not bind below 1024.
        {"hostNetwork": True, "webhook": {"port": 443}, "admin": {"port": 10261}},
        {"hostNetwork": True, "webhook": {"port": 10260}, "admin": {"port": 80}},
        {"aggregatedRoles": {"enabled": "true"}},
        {"aggregatedRoles": {"enable": False}},
        {"helmTest": {"enabled": "no"}},
        {"helmTest": {"image": "busybox"}},
    ],
)
def test_schema_rejects_bad_convention_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


def test_convention_defaults() -> None:
    values = merged({})
    assert values["hostNetwork"] is False and values["dnsPolicy"] == ""
    assert values["aggregatedRoles"] == {"enabled": True}
    assert values["prometheusRule"]["enabled"] is False
    assert values["helmTest"]["enabled"] is True


# ---- aggregated ClusterRoles ------------------------------------------------------------------

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def aggregated_roles(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"]: r for r in of_kind(objects, "ClusterRole") if is_aggregated(r)}


def granted(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (resource, verb)
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if rule["apiGroups"] == ["sandcap.dev"] and "resourceNames" not in rule
    }


def test_aggregated_roles_extend_view_edit_and_admin() -> None:
    roles = aggregated_roles(render({}))
    assert set(roles) == {"sandcap-view", "sandcap-edit"}
    labels = {
        name: {k[len(AGGREGATE) :] for k in r["metadata"]["labels"] if k.startswith(AGGREGATE)}
        for name, r in roles.items()
    }
    # Each built-in role gets the rules directly, not only through view -> edit -> admin.
    assert labels == {"sandcap-view": {"view", "edit", "admin"}, "sandcap-edit": {"edit", "admin"}}
    assert all(roles[n]["metadata"]["labels"][f"{AGGREGATE}{role}"] == "true" for n in labels for role in labels[n])
    reads = {"get", "list", "watch"}
    resources = ("sandboxleases", "sandboxleases/status", "sandboxproviders", "sandboxproviders/status")
    assert granted(roles["sandcap-view"]) == {(r, v) for r in resources for v in reads}
    assert granted(roles["sandcap-edit"]) == {("sandboxleases", v) for v in WRITE_VERBS}


def test_aggregated_roles_write_no_status_and_no_provider() -> None:
    """status is the controller's alone; SandboxProviders are cluster-admin's (they make sandcap
    probe an address from its own pod), so no role a user is given writes either."""
    for role in aggregated_roles(render({})).values():
        for resource, verb in granted(role):
            if verb in WRITE_VERBS:
                assert resource == "sandboxleases", (role["metadata"]["name"], resource, verb)
        for rule in role["rules"]:
            assert "*" not in yaml.safe_dump(rule), rule
            assert not set(rule["verbs"]) & {"escalate", "bind", "impersonate"}


def test_aggregated_roles_are_bound_by_nobody_in_the_chart() -> None:
    objects = render({})
    bound = {b["roleRef"]["name"] for b in of_kind(objects, "ClusterRoleBinding") + of_kind(objects, "RoleBinding")}
    assert not bound & set(aggregated_roles(objects))


def test_aggregated_roles_can_be_turned_off() -> None:
    assert aggregated_roles(render(SCENARIOS["no-aggregated-roles"])) == {}


def section(markdown: str, heading: str) -> str:
    """The text under `heading`, up to the next heading of its level or above."""
    match = re.search(rf"^(#+) {re.escape(heading)}$", markdown, re.M)
    assert match, f"no section {heading!r} (in README.md or the docs/ page the test reads)"
    rest = markdown[match.end() :]
    end = re.search(rf"^#{{1,{len(match.group(1))}}} ", rest, re.M)
    return rest[: end.start() if end else len(rest)]


# ---- helm test ----------------------------------------------------------------------------------


def hooks(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in render(values, hooks=True) if is_hook(o)]


def test_helm_test_runs_check_from_the_charts_image() -> None:
    objects = render({})
    pod = one(hooks({}), "Pod")
    deployment = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    [check] = spec["containers"]
    assert check["image"] == container(objects)["image"] == "sandcap:0.1.0"
    assert check["imagePullPolicy"] == container(objects)["imagePullPolicy"]
    assert check["args"] == [
        "check",
        "--confirm-dry-run-only",
        "--wait",
        "2m",
        "--namespace",
        NAMESPACE,
        "--webhook-configuration",
        env(objects)["SANDCAP_WEBHOOK_CONFIG_NAME"],
        "--leader-election-name",
        env(objects)["SANDCAP_LEADER_ELECTION_NAME"],
        "--contract",
        env(objects)["SANDCAP_CONTRACT"],
        "--service-account",
        deployment["serviceAccountName"],
        f"--observe-workloads={env(objects)['SANDCAP_OBSERVE_WORKLOADS']}",
    ]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] >= 120 + 60
    assert spec["securityContext"] == deployment["securityContext"]
    assert check["securityContext"] == container(objects)["securityContext"]
    assert check["securityContext"]["runAsUser"] == NONROOT and check["securityContext"]["readOnlyRootFilesystem"]
    assert check["resources"] == merged({})["helmTest"]["resources"]
    assert "hostNetwork" not in spec


def test_helm_test_pod_is_never_taken_for_a_sandcap_pod() -> None:
    """The Service would route admission reviews to it, the PodDisruptionBudget count it."""
    objects = render({})
    labels = one(hooks({}), "Pod")["metadata"]["labels"]
    for selector in (
        one(objects, "Service")["spec"]["selector"],
        one(objects, "Deployment")["spec"]["selector"]["matchLabels"],
        one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ):
        assert not selector.items() <= labels.items(), selector


def test_helm_test_account_may_do_what_check_does_and_no_more() -> None:
    objects = render({})
    test_objects = hooks({})
    account = one(test_objects, "Pod")["spec"]["serviceAccountName"]
    assert account == "sandcap-test" != one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert one(test_objects, "ServiceAccount")["metadata"]["name"] == account
    rules = {
        (role["kind"], role["metadata"].get("namespace")): role["rules"]
        for role in of_kind(test_objects, "ClusterRole") + of_kind(test_objects, "Role")
    }
    assert rules == {
        ("ClusterRole", None): [
            {
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "resourceNames": ["sandboxproviders.sandcap.dev", "sandboxleases.sandcap.dev"],
                "verbs": ["get"],
            },
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations"],
                "resourceNames": [env(objects)["SANDCAP_WEBHOOK_CONFIG_NAME"]],
                "verbs": ["get"],
            },
            {"apiGroups": ["sandcap.dev"], "resources": ["sandboxproviders", "sandboxleases"], "verbs": ["list"]},
            {"apiGroups": ["sandcap.dev"], "resources": ["sandboxproviders"], "verbs": ["create"]},
            {
                "apiGroups": ["sandcap.dev"],
                "resources": ["sandboxproviders"],
                "resourceNames": ["sandcap-check-dry-run"],
                "verbs": ["delete"],
            },
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        ],
        ("Role", NAMESPACE): [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["sandcap-controller"],
                "verbs": ["get"],
            }
        ],
    }
    roles = {
        (r["kind"], r["metadata"]["name"]) for r in of_kind(test_objects, "ClusterRole") + of_kind(test_objects, "Role")
    }
    for binding in of_kind(test_objects, "ClusterRoleBinding") + of_kind(test_objects, "RoleBinding"):
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    assert "secrets" not in yaml.safe_dump(rules), "the serving key (and the CA key) stay unread"


def test_helm_test_account_may_create_providers_only_in_a_dry_run() -> None:
    test_objects = hooks({})
    policy = one(test_objects, "ValidatingAdmissionPolicy")
    binding = one(test_objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == "sandcap-check-dry-run-only"
    # Created first, so that it is in force before the pod gets a token.
    weight = {o["kind"]: int(o["metadata"]["annotations"].get("helm.sh/hook-weight", 0)) for o in test_objects}
    assert weight["ValidatingAdmissionPolicy"] == weight["ValidatingAdmissionPolicyBinding"]
    assert weight["ValidatingAdmissionPolicy"] < weight["ClusterRoleBinding"] < weight["Pod"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["sandcap.dev"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE"],
            "resources": ["sandboxproviders"],
        }
    ]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:sandcap-test"'
    assert [v["expression"] for v in spec["validations"]] == ["request.dryRun"]


def test_helm_test_cleans_up_after_itself() -> None:
    """The ServiceAccount, its RBAC and its policy go once the test passes (before the pod starts
    they must exist: lower weight); the pod stays for `helm test --logs` with a token of a deleted account."""
    for obj in hooks({}):
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test"
        policy = annotations["helm.sh/hook-delete-policy"].split(",")
        if obj["kind"] == "Pod":
            assert policy == ["before-hook-creation"] and "helm.sh/hook-weight" not in annotations
        else:
            assert policy == ["before-hook-creation", "hook-succeeded"], obj["kind"]
            assert int(annotations["helm.sh/hook-weight"]) < 0


def test_helm_test_follows_the_install() -> None:
    values = SCENARIOS["helm-test-everything"]
    pod = one(hooks(values), "Pod")["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--leader-election-name") + 1] == "", "an empty name skips the leader check"
    assert not of_kind(hooks(values), "Role"), "no Lease to read without leader election"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    assert pod["tolerations"] == values["tolerations"]
    digest = {"image": {"repository": "registry.example/sandcap", "digest": "sha256:" + "b" * 64}}
    assert one(hooks(digest), "Pod")["spec"]["containers"][0]["image"] == container(render(digest))["image"]


def test_network_policy_lets_the_helm_test_reach_the_webhook() -> None:
    values = SCENARIOS["helm-test-everything"]
    labels = one(hooks(values), "Pod")["metadata"]["labels"]
    webhook = one(render(values), "NetworkPolicy")["spec"]["ingress"][0]
    assert webhook["from"] == [{"ipBlock": {"cidr": "172.18.0.0/16"}}, {"podSelector": {"matchLabels": labels}}]
    # Without webhookFrom every source may connect already.
    assert "from" not in one(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]["ingress"][0]
    off = {**values, "helmTest": {"enabled": False}}
    assert one(render(off), "NetworkPolicy")["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "172.18.0.0/16"}}]


def test_helm_test_can_be_turned_off() -> None:
    assert hooks(SCENARIOS["no-helm-test"]) == []
    assert "helm test" not in render_text(SCENARIOS["no-helm-test"])["sandcap/templates/NOTES.txt"]


def test_notes_offer_the_helm_test() -> None:
    notes = render_text({})["sandcap/templates/NOTES.txt"]
    assert "helm test sandcap -n sandcap-system --logs" in notes


# ---- kubeVersion --------------------------------------------------------------------------------


def test_kube_version_matches_readme_and_ci() -> None:
    supported = re.search(r"supports \*\*Kubernetes (\d+\.\d+) and newer\*\*", section(README, "Supported versions"))
    assert supported, "README's Supported versions names the oldest minor"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">= {supported.group(1)}.0-0"
    assert supported.group(1) == KUBE_VERSION_RANGE[0], "the oldest supported minor is the oldest CI tests"


# ---- selectable fields of leases ----------------------------------------------------------------


def test_leases_are_selectable_by_provider_and_driver() -> None:
    crds = {c["spec"]["names"]["kind"]: c for c in chart_crds()}
    [version] = crds["SandboxLease"]["spec"]["versions"]
    fields = [f["jsonPath"] for f in version["selectableFields"]]
    assert fields == [".spec.providerRef.name", ".spec.providerRef.driverKey"]
    # The apiserver accepts only paths to a string, integer or boolean of the schema.
    for path in fields:
        node = version["schema"]["openAPIV3Schema"]
        for part in path.strip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == "string", path
    [provider] = crds["SandboxProvider"]["spec"]["versions"]
    assert "selectableFields" not in provider


# ---- host networking ----------------------------------------------------------------------------


def pod_spec(values: dict[str, Any]) -> dict[str, Any]:
    return one(render(values), "Deployment")["spec"]["template"]["spec"]


def test_pod_network_by_default() -> None:
    spec = pod_spec({})
    assert "hostNetwork" not in spec and "dnsPolicy" not in spec
    assert pod_spec({"dnsPolicy": "Default"})["dnsPolicy"] == "Default"


def test_host_network_serves_on_the_chosen_node_ports() -> None:
    objects = render(HOST_NETWORK)
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    # Worker Services are still found by their cluster DNS names.
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert ports == {"webhook": 10260, "admin": 10261}
    variables = env(objects)
    assert (variables["SANDCAP_WEBHOOK_ADDR"], variables["SANDCAP_ADMIN_ADDR"]) == ("0.0.0.0:10260", "0.0.0.0:10261")
    # The Service still routes the apiserver by port name, now to the node's address.
    service = {p["name"]: p["targetPort"] for p in one(objects, "Service")["spec"]["ports"]}
    assert service == {"https": "webhook", "metrics": "admin"}
    assert pod_spec(SCENARIOS["hostNetwork-dnsPolicy"])["dnsPolicy"] == "Default"
    # Everything else about the pod stays hardened.
    sc = container(objects)["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"]


def test_webhook_and_admin_ports_must_differ() -> None:
    with pytest.raises(helm.HelmRenderError, match="webhook.port and admin.port must differ"):
        render({"webhook": {"port": 9443}, "admin": {"port": 9443}})


def test_configuration_documents_the_convention_values() -> None:
    table = section(CONFIGURATION, "Values you will want to look at")
    for value in ("hostNetwork", "dnsPolicy", "aggregatedRoles.enabled", "prometheusRule.enabled", "helmTest.enabled"):
        assert f"`{value}`" in table, value
