// Pins the agent-sandbox module whose CRD (k8s/crds/agents.x-k8s.io_sandboxes.yaml, Sandbox of
// agents.x-k8s.io v1beta1) the end-to-end and node suites install for the observer's scenarios
// (testcluster/agent-sandbox.sh). Nothing is built from it.
module sandcap.dev/testcluster/agent-sandbox

go 1.26.0

require sigs.k8s.io/agent-sandbox v1.0.1
