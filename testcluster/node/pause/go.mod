// The test node's pause binary, the sandbox image's only process (see testcluster/node-build.sh).
module sandcap.dev/testcluster/node/pause

go 1.26.0
