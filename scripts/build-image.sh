#!/usr/bin/env bash
# build-image.sh — build the Triage image (docker/Dockerfile), reusing the
# verified artifacts of this machine's .deps/. What `make image` runs.
#
#   scripts/build-image.sh              builds $IMAGE (default triage:dev)
#
# Steps (a failure stops the script with "image: step <name> failed: <why>"):
#   prebuilt  the ONNX Runtime library and the encoders the image ships, from
#             .deps/ (after `make setup` verified them), and libtokenizers.a
#             (built by setup.sh with its paths mapped), into a small image
#             ($IMAGE_PREBUILT, docker/prebuilt.Dockerfile). The Dockerfile
#             re-checks each download's sha256; see its "prebuilt" stage. A
#             machine without .deps/ builds an empty one and the Dockerfile
#             downloads the files itself.
#   build     docker build -f docker/Dockerfile --build-arg PREBUILT=... .
#             Layers stay in the engine's cache, so a second build with the
#             same sources takes seconds. The build stage is tagged too
#             ($IMAGE_BUILD): the classic builder keeps a stage's layers as
#             untagged images, and `docker image prune` would delete the
#             untagged build stage (and with it minutes of cargo) otherwise.
#
# The base images must be present (scripts/standin-images.sh; `make image`
# runs it first). --network host: the build's RUN steps reach the package
# registries the way the host does (on machines whose container network has
# no route out, like CI here); elsewhere it changes nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="${DEPS_DIR:-$ROOT/.deps}"
IMAGE="${IMAGE:-triage:dev}"
IMAGE_PREBUILT="${IMAGE_PREBUILT:-triage-prebuilt:dev}"
IMAGE_BUILD="${IMAGE_BUILD:-triage-build:dev}"
DOCKERFILE="$ROOT/docker/Dockerfile"

STEP=init
fail() { echo "image: step $STEP failed: $*" >&2; exit 1; }
trap 'fail "command on line $LINENO exited with status $?"' ERR
say() { echo "image[$STEP]: $*"; }
ctx=""
trap '[ -z "$ctx" ] || rm -rf "$ctx"' EXIT

docker info >/dev/null 2>&1 || fail "no Docker engine answers (run: scripts/dockerd.sh)"

STEP=prebuilt
t0=$SECONDS
# The encoders the image ships: the Dockerfile's ENCODERS default.
encoders="$(sed -nE 's/^ARG ENCODERS="([^"]*)"/\1/p' "$DOCKERFILE")"
[ -n "$encoders" ] || fail "no ARG ENCODERS=\"...\" in $DOCKERFILE"
ctx="$(mktemp -d /var/tmp/triage-prebuilt.XXXXXX)"
# Hard links where .deps/ is on the same filesystem (no copy), else copies;
# -L: .deps/ itself may be a symlink (a git worktree sharing another's).
link() { mkdir -p "$(dirname "$2")"; ln -L "$1" "$2" 2>/dev/null || cp -L "$1" "$2"; }
n=0
for so in "$DEPS"/onnxruntime/libonnxruntime.so.*; do
  [ -f "$so" ] || continue
  link "$so" "$ctx/onnxruntime/$(basename "$so")"; n=$((n + 1))
done
for e in $encoders; do
  for f in model.onnx tokenizer.json; do
    [ -f "$DEPS/encoders/$e/$f" ] || continue
    link "$DEPS/encoders/$e/$f" "$ctx/encoders/$e/$f"; n=$((n + 1))
  done
done
# libtokenizers.a and its stamp: the build stage's setup.sh uses it only when
# the stamp says it was built with its paths mapped (see setup.sh's step_tok),
# and then skips minutes of cargo; any other library it rebuilds over.
if [ -f "$DEPS/tokenizers/libtokenizers.a" ] && [ -f "$DEPS/tokenizers/VERSION" ]; then
  for f in libtokenizers.a VERSION; do link "$DEPS/tokenizers/$f" "$ctx/tokenizers/$f"; n=$((n + 1)); done
fi
[ "$n" -gt 0 ] || say "no artifacts in $DEPS (run make setup to reuse them); the build downloads them"
docker build -q --network host -t "$IMAGE_PREBUILT" -f "$ROOT/docker/prebuilt.Dockerfile" "$ctx" >/dev/null \
  || fail "docker build of $IMAGE_PREBUILT"
say "$IMAGE_PREBUILT: $n files from $DEPS ($((SECONDS - t0)) s)"

STEP=build
t0=$SECONDS
say "docker build -f docker/Dockerfile -t $IMAGE (first build on a machine: minutes; more without a prebuilt libtokenizers.a)"
# Each output line gets the time of day: the log then shows which step took long.
stamp() { local l; while IFS= read -r l; do printf '%(%H:%M:%S)T %s\n' -1 "$l"; done; }
docker build --network host --build-arg "PREBUILT=$IMAGE_PREBUILT" -f "$DOCKERFILE" -t "$IMAGE" "$ROOT" 2>&1 | stamp \
  || fail "docker build -f docker/Dockerfile (output above)"
# All cached by now: this only puts a name on the build stage's last layer.
docker build -q --network host --build-arg "PREBUILT=$IMAGE_PREBUILT" --target build -f "$DOCKERFILE" \
  -t "$IMAGE_BUILD" "$ROOT" >/dev/null || fail "tagging the build stage as $IMAGE_BUILD"
size="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
say "$IMAGE built in $((SECONDS - t0)) s, $((size / 1000000)) MB"
