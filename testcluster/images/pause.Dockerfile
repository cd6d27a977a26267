# The test node's sandbox ("pause") image, in place of registry.k8s.io/pause. Built by
# testcluster/images/build.sh from a build context that holds only `pause`, the static binary
# the node build makes (target/testcluster/node/pause, from testcluster/node/pause/).
FROM scratch
COPY --chown=0:0 --chmod=0555 pause /pause
# As registry.k8s.io/pause: 65535 owns nothing on the node.
USER 65535:65535
ENTRYPOINT ["/pause"]
