# Stand-in build base: what the rust and golang stand-ins share (the public
# images are built on Debian's buildpack-deps; this is the part of it a Rust
# or cgo build uses). Built by scripts/standin-images.sh only on machines that
# cannot pull the public images; never part of the Triage image.
ARG BASE
FROM ${BASE}
# Certificates this machine trusts beyond Debian's bundle (its copy of
# /usr/local/share/ca-certificates): a TLS-inspecting egress proxy's CA, for
# instance. Builds in the stand-ins then reach PyPI, crates.io, the Go module
# proxy and Maven Central the way the host does. The runtime base
# (debian:*-slim) does not get them, and the deploy/ image test checks that
# none of them reaches the Triage image.
COPY local-ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates curl wget git openssh-client procps netbase xz-utils bzip2 unzip \
      gcc g++ libc6-dev make pkg-config file patch \
 && rm -rf /var/lib/apt/lists/* \
 && update-ca-certificates
