"""Tests of the chart's answers to a stolen token or a careless neighbour (issue 25): the
scoped-writes admission policy, the refusal to read Secrets where sandcap may create one, the pods'
hardening and the NetworkPolicy's DNS and egress. Rendered by real Helm through test_chart's
helpers; the policy's verdicts through the real apiserver are tests/e2e/hardening.rs.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from test_chart import (
    assert_lints_strict,
    REPO,
    CHART,
    NAMESPACE,
    env,
    is_hook,
    merged,
    of_kind,
    one,
    policy,
    render,
)

INSTALL = (REPO / "docs" / "install.md").read_text()
SECURITY = (REPO / "docs" / "security.md").read_text()

SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "secretName": {
        "certificates": {"selfManaged": {"secretName": "my-tls"}},
        "leaderElection": {"leaseName": "my-lease"},
    },
    "certManager": {"certificates": {"mode": "certManager"}},
    "no-leader-election": {"replicaCount": 1, "leaderElection": {"enabled": False}},
    "existing-serviceaccount": {"serviceAccount": {"create": False, "name": "platform-sa"}},
    "secretsClusterWide": {"secretsClusterWide": True},
    "certManager-secretsClusterWide-no-policy": {
        "certificates": {"mode": "certManager"},
        "secretsClusterWide": True,
        "scopedWritesPolicy": False,
    },
    "nodeSelector": {"nodeSelector": {"pool": "infra"}},
    "no-workloads": {"workloads": {"enabled": False}},
    "nodelocaldns": {
        "networkPolicy": {
            "enabled": True,
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}],
            "dnsTo": [{"ipBlock": {"cidr": "169.254.20.10/32"}}],
        }
    },
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(scenario: str) -> None:
    assert_lints_strict(SCENARIOS[scenario])


@pytest.mark.parametrize(
    "values",
    [
        {"scopedWritesPolicy": "yes"},
        # An empty `to` would allow DNS (port 53) to every destination.
        {"networkPolicy": {"dnsTo": []}},
        {"networkPolicy": {"dnsTo": [{}]}},
        {"networkPolicy": {"dnsTo": [{"ipblock": {"cidr": "169.254.20.10/32"}}]}},
        {"networkPolicy": {"dnsTo": {"ipBlock": {"cidr": "169.254.20.10/32"}}}},
    ],
)
def test_schema_rejects_bad_hardening_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


# ---- scoped writes ------------------------------------------------------------------------------


def source(path: str) -> str:
    return (REPO / path).read_text()


def field_manager() -> str:
    """The reporting controller sandcap's Events name (src/controller/recorder.rs)."""
    match = re.search(r'pub const FIELD_MANAGER: &str = "([^"]+)";', source("core/src/vocabulary.rs"))
    assert match and "reporting_controller: Some(FIELD_MANAGER.into())" in source("src/controller/recorder.rs")
    return match.group(1)


def keeper_secret_type() -> str:
    """The type of the Secret the certificate keeper creates (src/certs/keeper.rs)."""
    [found] = re.findall(r'type_: Some\("([^"]+)"\.into\(\)\)', source("src/certs/keeper.rs"))
    return found


def scoped_writes(values: dict[str, Any]) -> dict[str, Any]:
    found = policy(render(values), "scoped-writes")
    assert found, "the scoped-writes policy is rendered"
    vap, binding = found
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    return vap["spec"]


def test_scoped_writes_policy_is_on_by_default() -> None:
    assert merged({})["scopedWritesPolicy"] is True
    assert policy(render({"scopedWritesPolicy": False}), "scoped-writes") is None


@pytest.mark.parametrize("scenario", ["default", "secretName", "existing-serviceaccount"])
def test_scoped_writes_policy_names_what_sandcap_writes(scenario: str) -> None:
    """Only sandcap's ServiceAccount; the Secret, Lease and Events sandcap is configured to write."""
    values = SCENARIOS[scenario]
    objects = render(values)
    spec = scoped_writes(values)
    assert spec["failurePolicy"] == "Fail"
    account = one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{account}"'
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["leases"],
        },
        {
            "apiGroups": ["events.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["events"],
        },
        # The main resource only: a status write (sandboxleases/status) is not matched.
        {
            "apiGroups": ["sandcap.dev"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["sandboxleases"],
        },
    ]
    secrets, leases, events, _observed, _where = spec["validations"]
    variables = env(objects)
    secret, lease = variables["SANDCAP_CERT_SECRET_NAME"], variables["SANDCAP_LEADER_ELECTION_NAME"]
    assert f'object.metadata.name == "{secret}"' in secrets["expression"]
    assert f"object.type == '{keeper_secret_type()}'" in secrets["expression"]
    assert f'request.namespace == "{NAMESPACE}"' in secrets["expression"]
    assert secrets["message"] == (
        f"sandcap's ServiceAccount may create no Secret but {NAMESPACE}/{secret} of type kubernetes.io/tls"
    )
    assert f'object.metadata.name == "{lease}"' in leases["expression"]
    assert leases["message"] == f"sandcap's ServiceAccount may create no Lease but {NAMESPACE}/{lease}"
    assert f"object.reportingController == '{field_manager()}'" in events["expression"]
    assert "object.regarding.apiVersion.startsWith('sandcap.dev/')" in events["expression"]
    assert "['SandboxProvider', 'SandboxLease']" in events["expression"]
    assert all(v["reason"] == "Forbidden" for v in spec["validations"])


def observed_lease_words() -> tuple[str, list[tuple[str, str, str]]]:
    """The observed-from label and each kind's (label value, kind, group) (core/src/workloads/mod.rs:
    OBSERVED_FROM_LABEL and the rows of KINDS)."""
    text = source("core/src/workloads/mod.rs")
    match = re.search(r'pub const OBSERVED_FROM_LABEL: &str = "([^"]+)";', text)
    assert match
    kinds = text[text.index("pub const KINDS") : text.index("];", text.index("pub const KINDS"))]
    rows = re.findall(
        r'KindRow \{\s*kind: WorkloadKind::(\w+),\s*group: "([^"]+)",.*?label: "([^"]+)",?\s*\}', kinds, re.S
    )
    return match.group(1), [(label, kind, group) for kind, group, label in rows]


def observed_namespace_words() -> tuple[str, str, list[str]]:
    """The namespace opt-in label, its value and the namespaces never observed
    (core/src/workloads/mod.rs: NAMESPACE_LABEL, NAMESPACE_ENABLED, NEVER_OBSERVED)."""
    text = source("core/src/workloads/mod.rs")
    label = re.search(r'pub const NAMESPACE_LABEL: &str = "([^"]+)";', text)
    enabled = re.search(r'pub const NAMESPACE_ENABLED: &str = "([^"]+)";', text)
    never = re.search(r"pub const NEVER_OBSERVED: \[&str; \d+\] = \[([^\]]+)\];", text)
    assert label and enabled and never
    return label.group(1), enabled.group(1), re.findall(r'"([^"]+)"', never.group(1))


def test_scoped_writes_policy_keeps_lease_writes_to_observed_leases() -> None:
    """The observer's SandboxLease writes: the lease (for a change also the stored one, for a
    delete only that) carries the observed-from label with a kind's value and an ownerReference
    to a workload of that kind named as the lease. Without workloads.enabled sandcap writes no
    lease, and the policy matches none."""
    spec = scoped_writes({})
    label, rows = observed_lease_words()
    assert [value for value, _, _ in rows] == ["job", "sandbox", "sandboxclaim"]
    [leases] = spec["variables"]
    assert leases["name"] == "leases"
    assert leases["expression"] == (
        "request.operation == 'UPDATE' ? [object, oldObject] : "
        "(request.operation == 'DELETE' ? [oldObject] : [object])"
    )
    observed = spec["validations"][-2]
    expression = observed["expression"]
    assert expression.startswith("request.resource.resource != 'sandboxleases' || variables.leases.all(l,")
    assert f"'{label}' in l.metadata.labels" in expression
    assert "r.name == l.metadata.name" in expression
    for value, kind, group in rows:
        owned = f"(l.metadata.labels['{label}'] == '{value}' && r.kind == '{kind}' && r.apiVersion.startsWith('{group}/'))"
        assert owned in expression, f"{kind}'s leases owned by a {kind} of {group}"
    assert expression.count("r.kind ==") == len(rows), "no kind but the table's"
    assert observed["reason"] == "Forbidden"
    assert observed["message"].startswith("sandcap's ServiceAccount may create, change and delete only observed SandboxLeases")
    where = spec["validations"][-1]
    expression = where["expression"]
    namespace_label, enabled, never = observed_namespace_words()
    assert expression.startswith(
        "request.resource.resource != 'sandboxleases' || request.operation == 'DELETE' || ("
    ), "a delete is judged by the stored lease alone"
    assert f"namespaceObject.metadata.labels['{namespace_label}'] == '{enabled}'" in expression
    listed = ", ".join([f"'{name}'" for name in never] + [f'"{NAMESPACE}"'])
    assert f"!(request.namespace in [{listed}])" in expression, "never the cluster's own namespaces nor sandcap's"
    assert "!has(object.spec.config) && !has(object.spec.configFrom)" in expression
    assert "object.spec.workloadRef.name == object.metadata.name" in expression
    assert where["reason"] == "Forbidden"
    off = scoped_writes(SCENARIOS["no-workloads"])
    assert "variables" not in off
    assert not [r for r in off["matchConstraints"]["resourceRules"] if r["apiGroups"] == ["sandcap.dev"]]
    assert len(off["validations"]) == 3


@pytest.mark.parametrize(
    "scenario", ["default", "certManager", "no-leader-election", "existing-serviceaccount", "no-workloads"]
)
def test_every_unnamed_write_of_sandcaps_account_is_narrowed(scenario: str) -> None:
    """RBAC can name no object of a create, nor limit an Event's patch to sandcap's Events: each
    such grant of sandcap's account is one the policy matches, and the policy matches no other
    (with cert-manager sandcap may create no Secret; without leader election, no Lease)."""
    objects = render(SCENARIOS[scenario])
    spec = scoped_writes(SCENARIOS[scenario])
    matched = {(r["apiGroups"][0], r["resources"][0]) for r in spec["matchConstraints"]["resourceRules"]}
    account = one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in of_kind(objects, "RoleBinding") + of_kind(objects, "ClusterRoleBinding")
        if {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} in b["subjects"]
    }
    unnamed = {
        (group, resource)
        for role in of_kind(objects, "Role") + of_kind(objects, "ClusterRole")
        if (role["kind"], role["metadata"]["name"]) in bound
        for rule in role["rules"]
        if {"create", "update", "patch"} & set(rule["verbs"]) and "resourceNames" not in rule
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if not resource.endswith("/status")
    }
    assert unnamed == matched
    judged = {re.match(r"request\.resource\.resource != '(\w+)'", v["expression"]).group(1) for v in spec["validations"]}
    assert judged == {resource for _, resource in matched}


# ---- Secrets read where sandcap may create one ---------------------------------------------------


def test_the_release_namespace_is_never_a_secret_namespace() -> None:
    refusal = rf"secretNamespaces lists {NAMESPACE}, the release namespace: .*service-account-token Secret"
    with pytest.raises(helm.HelmRenderError, match=refusal):
        render({"secretNamespaces": ["team-a", NAMESPACE]})
    assert render({"secretNamespaces": ["team-a"]})


def test_cluster_wide_secrets_need_the_scoped_writes_policy() -> None:
    with pytest.raises(helm.HelmRenderError, match="secretsClusterWide .* keep scopedWritesPolicy on"):
        render({"secretsClusterWide": True, "scopedWritesPolicy": False})
    assert scoped_writes(SCENARIOS["secretsClusterWide"])
    # With cert-manager sandcap creates no Secret at all: nothing to narrow.
    assert render(SCENARIOS["certManager-secretsClusterWide-no-policy"])


# ---- the pods ----------------------------------------------------------------------------------


def pod_specs(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """sandcap's pod and the `helm test` one."""
    objects = render(values, hooks=True)
    deployment = one(objects, "Deployment")["spec"]["template"]["spec"]
    check = one([o for o in objects if is_hook(o)], "Pod")["spec"]
    return {"sandcap": deployment, "check": check}


@pytest.mark.parametrize("scenario", ["default", "nodeSelector"])
def test_pods_get_no_service_links_and_run_on_linux(scenario: str) -> None:
    for name, spec in pod_specs(SCENARIOS[scenario]).items():
        assert spec["enableServiceLinks"] is False, name
        own = merged(SCENARIOS[scenario])["nodeSelector"]
        assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", **own}, name


def test_a_node_selector_of_ones_own_replaces_the_os() -> None:
    for spec in pod_specs({"nodeSelector": {"kubernetes.io/os": "windows-but-linux-inside"}}).values():
        assert spec["nodeSelector"] == {"kubernetes.io/os": "windows-but-linux-inside", "kubernetes.io/arch": "amd64"}


# ---- NetworkPolicy: DNS and egress -------------------------------------------------------------

# The cloud metadata services sandcap's probe refuses (src/probe/addresses.rs): a default must not
# open them, and values.yaml's example of a wide ipBlock must except them.
METADATA = ["169.254.169.254", "fd00:ec2::254", "fd00:ec2::23", "100.100.100.200", "168.63.129.16"]


def opened(spec: dict[str, Any], address: str) -> bool:
    """Whether the NetworkPolicy's egress lets `address` through by IP (a rule without `to` lets
    everything through)."""
    ip = ipaddress.ip_address(address)

    def covers(cidr: str) -> bool:
        network = ipaddress.ip_network(cidr)
        return network.version == ip.version and ip in network

    rules = spec.get("egress", [])
    blocks = [peer["ipBlock"] for rule in rules for peer in rule.get("to", []) if "ipBlock" in peer]
    return any("to" not in rule for rule in rules) or any(
        covers(b["cidr"]) and not any(covers(e) for e in b.get("except", [])) for b in blocks
    )


def test_dns_goes_to_kube_dns_by_default() -> None:
    egress = SCENARIOS["nodelocaldns"]["networkPolicy"]["egress"]
    spec = one(render({"networkPolicy": {"enabled": True, "egress": egress}}), "NetworkPolicy")["spec"]
    assert spec["egress"][0]["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]


def test_dns_can_go_to_node_local_dns_cache() -> None:
    spec = one(render(SCENARIOS["nodelocaldns"]), "NetworkPolicy")["spec"]
    assert spec["egress"][0] == {
        "to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}],
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
    }


def test_no_default_opens_a_metadata_service() -> None:
    for values in ({"networkPolicy": {"enabled": True}}, SCENARIOS["nodelocaldns"]):
        spec = one(render(values), "NetworkPolicy")["spec"]
        assert not [a for a in METADATA if opened(spec, a)]


def documented_wide_egress() -> list[dict[str, Any]]:
    """The example under networkPolicy.egress in values.yaml, uncommented."""
    text = (CHART / "values.yaml").read_text()
    block = re.search(r"A wide ipBlock that excepts the cloud metadata services, e\.g\.:\n((?:  #   .*\n)+)", text)
    assert block, "values.yaml shows how to except the metadata addresses"
    return yaml.safe_load("\n".join(line[5:] for line in block.group(1).splitlines()))


def test_the_documented_wide_egress_excepts_every_metadata_service() -> None:
    egress = documented_wide_egress()
    spec = one(render({"networkPolicy": {"enabled": True, "egress": egress}}), "NetworkPolicy")["spec"]
    assert opened(spec, "192.0.2.1") and opened(spec, "2001:db8::1"), "the example is wide"
    assert not [a for a in METADATA if opened(spec, a)]
    named = re.search(r"\(AWS, GCP.*?\)\.?\n", (CHART / "values.yaml").read_text(), re.S)
    assert named and all(a in named.group(0) for a in METADATA)


# ---- docs ----------------------------------------------------------------------------------------


def test_install_tells_admins_to_enforce_restricted() -> None:
    assert "kubectl label namespace sandcap-system pod-security.kubernetes.io/enforce=restricted" in INSTALL


def test_security_notes_cover_each_scoped_write() -> None:
    notes = SECURITY[SECURITY.index("## What each limit protects against") :]
    notes = notes[: notes.index("\n## ", 1)]
    for what in ("service-account-token", "Lease", "Events", "secretNamespaces", "caBundle", "NetworkPolicy"):
        assert what in notes, what
