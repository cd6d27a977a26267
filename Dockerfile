# syntax=docker/dockerfile:1
#
# sandcap image: a static-ish release binary on distroless, no shell, no package manager.
#   docker build -t sandcap:0.1.0 --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#
# The binary links glibc (ring's C code, the Rust std): the runtime is distroless/cc, which has
# glibc and libgcc and nothing else. Builder and runtime are both Debian 12, so the glibc match.
#
# Build args:
#   VERSION, REVISION  the image's version and revision labels.
#   RUST_VERSION       the rust:<version>-slim-bookworm image the binary is built in (1.95).
#   SANDCAP_BINARY     where /sandcap comes from. `build` (default): the --locked release build
#                      below. `prebuilt` (release images use it): the release binary built
#                      outside, with cargo-auditable's record of its crates, also for a machine
#                      that cannot pull the rust image. It is taken from the named build context
#                      `sandcap-bin`, a directory holding `sandcap` and best nothing else (the
#                      build context excludes target/). Build it on glibc <= 2.36 (Debian 12):
#     release/build-binary.sh
#     mkdir -p target/sandcap-bin && cp target/release/sandcap target/sandcap-bin/
#     docker build --build-arg SANDCAP_BINARY=prebuilt --build-context sandcap-bin=target/sandcap-bin ...
#   Unused stages are skipped (BuildKit, buildah): `prebuilt` never pulls the rust image.
#   testcluster/images/build.sh builds it so with buildah, on a local stand-in for the distroless base.

ARG RUST_VERSION=1.95
ARG SANDCAP_BINARY=build

FROM rust:${RUST_VERSION}-slim-bookworm AS build
# The build context has no .git: the commit `sandcap version` prints comes from here.
ARG REVISION=unknown
WORKDIR /src
COPY . .
# Cache mounts keep the crate registry and target/ between builds without putting them in a layer.
# --locked: build exactly the reviewed Cargo.lock. Symbols are stripped to keep the image small.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    SANDCAP_GIT_COMMIT="${REVISION}" CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked --bin sandcap \
    && cp target/release/sandcap /sandcap

FROM scratch AS prebuilt
# sandcap-bin is a named build context (--build-context sandcap-bin=DIR), not a stage.
# hadolint ignore=DL3022
COPY --from=sandcap-bin sandcap /sandcap

# The default repeated: buildah 1.28 picks the stages to build without the ARG's default.
FROM ${SANDCAP_BINARY:-build} AS binary

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sandcap" \
      org.opencontainers.image.description="Kubernetes admission webhook and operator for sandbox-provider plugin capabilities" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"
COPY --from=binary --chown=0:0 --chmod=0555 /sandcap /sandcap
# 65532 is distroless's "nonroot"; numeric so that runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
# 8443: HTTPS admission webhook; 8080: /healthz, /readyz, /metrics.
EXPOSE 8443 8080
ENTRYPOINT ["/sandcap"]
CMD ["run"]
