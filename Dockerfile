# syntax=docker/dockerfile:1
# The cnpool operator image: the release binary of package `cnpool` without
# the lab (no `dev`, `sim`, `bench`; docs/install.md), stripped, on a minimal
# glibc runtime, running as a non-root user.
#
#   docker build -t cnpool:latest .
#
# Not built in this repository's CI: its machines reach no container
# registry, so neither base image below can be pulled there. CI builds and
# tests the release binary with the lab (cargo build -p cnpool --release
# --locked) and checks that the build below leaves the lab out
# (ci/lab-free-build.sh); the packaging here is untested.

# Build stage. The Rust version matches the workspace's rust-version
# (Cargo.toml), which the lock file's dependencies need.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts (BuildKit) keep the crate downloads and the target directory
# between builds, so a change to one crate does not recompile every
# dependency. --locked: exactly the dependency versions that were tested.
# --no-default-features: without the lab (feature `lab`); `crd` and
# `operator` need none of it.
# The binary is copied out of the cached target directory, which does not
# persist into the image, and stripped there: symbols only make the image
# bigger. Stripped here, not by `strip` in [profile.release]: the benchmarks
# and heaptrack run release builds, and the `profiling` profile (perf)
# inherits release; they need the symbols.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build -p cnpool --release --locked --no-default-features \
 && install -D -m 0755 target/release/cnpool /out/cnpool \
 && strip /out/cnpool

# Runtime stage: glibc and libgcc (the binary links them dynamically; TLS is
# rustls, so no OpenSSL), CA certificates, no shell, no package manager.
# `nonroot` is uid/gid 65532, the user deploy/operator/deployment.yaml runs
# as (runAsNonRoot needs a numeric user, which USER below gives).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/cnpool /usr/local/bin/cnpool
USER 65532:65532
# 8080: /healthz, /readyz, /metrics; 9443: the admission webhook (TLS).
EXPOSE 8080 9443
ENTRYPOINT ["/usr/local/bin/cnpool"]
CMD ["operator"]
