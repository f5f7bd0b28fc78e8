# Stand-in for rust:<version>-bookworm, from the toolchain the host already
# has (rustup's directory for that exact version, documentation left out) on
# the stand-in build base. Laid out like the public image: RUSTUP_HOME,
# CARGO_HOME, rustup's proxies on PATH. Built by scripts/standin-images.sh,
# which checks `rustc --version` against the tag. Unlike the public image, the
# toolchain is not made world-writable: a recursive chmod would copy all of it
# into a second layer.
ARG BASE
FROM ${BASE}
ARG RUST_VERSION
ARG TOOLCHAIN
ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUST_VERSION=${RUST_VERSION}
COPY toolchain/ /usr/local/rustup/toolchains/${TOOLCHAIN}/
COPY rustup /usr/local/cargo/bin/rustup
RUN printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\n' "$TOOLCHAIN" >"$RUSTUP_HOME/settings.toml" \
 && for p in cargo rustc rustdoc rust-gdb rust-lldb; do ln /usr/local/cargo/bin/rustup "/usr/local/cargo/bin/$p"; done \
 && chmod a+w "$RUSTUP_HOME" "$CARGO_HOME" \
 && rustup --version && cargo --version && rustc --version
