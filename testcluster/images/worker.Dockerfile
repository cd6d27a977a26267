# The reference worker (examples/reference-worker.rs) for the test cluster, on the same base as
# sandcap. Built by testcluster/images/build.sh from a build context that holds only the release
# binary `reference-worker`; BASE_IMAGE is the local stand-in for distroless/cc-debian12:nonroot.
#
# The entrypoint is the worker, so a Deployment passes only its flags as args, e.g.
#   args: ["--listen", "0.0.0.0:9000", "--methods", "environmentExecute,environmentSyncIn"]
# Args replace CMD as a whole: without --listen the worker listens on 127.0.0.1:9000 only.

ARG BASE_IMAGE=localhost/sandcap-base/cc-debian12:nonroot

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sandcap-reference-worker" \
      org.opencontainers.image.description="sandcap's reference sandbox-provider worker: answers initialize, for tests" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --chown=0:0 --chmod=0555 reference-worker /reference-worker
USER 65532:65532
EXPOSE 9000
# The worker shuts down gracefully on SIGINT only (tokio's ctrl_c); as PID 1 it would ignore a
# SIGTERM until the kubelet's SIGKILL. Runtimes send the image's STOPSIGNAL instead.
STOPSIGNAL SIGINT
ENTRYPOINT ["/reference-worker"]
CMD ["--listen", "0.0.0.0:9000"]
