#!/usr/bin/env bash
# standin-images.sh — the public images docker/Dockerfile and docker/compose.yaml
# name, made locally where they cannot be pulled.
#
# For each image: present in the engine → used as it is; `docker pull` works →
# pulled; otherwise a stand-in is built from Debian packages and the toolchains
# this machine already has (the ones the project pins), so the same Dockerfile
# builds on a machine without a registry (CI here) and on one with Docker Hub.
# A machine that can pull never builds a stand-in.
#
#   scripts/standin-images.sh               the Dockerfile's bases and the compose stack's images
#   scripts/standin-images.sh --dockerfile  only the Dockerfile's (what `make image` needs)
#   scripts/standin-images.sh --compose     only the compose stack's (Prometheus, Grafana)
#   scripts/standin-images.sh IMAGE...      only those images
#   scripts/standin-images.sh --which IMAGE the local name to run IMAGE as: IMAGE itself,
#                                           or its stand-in's name (see below); fails if neither exists
#
# Recipes (the image is tagged with exactly the name the Dockerfile uses):
#   debian:<v>-slim      debootstrap --variant=minbase bookworm from the host's Debian mirror
#                        (debootstrap checks it against Debian's archive key), slimmed like the
#                        public slim images (no docs, man pages, locales), `docker import`.
#   golang:<v>-bookworm  the same rootfs, not slimmed (the public build images are full
#                        Debian), + compilers (Debian packages) + the host's Go tree, if its
#                        `go version` is <v>.
#   rust:<v>-bookworm    that build base + the host's rustup toolchain <v> (without its
#                        documentation) and rustup, laid out like the public image.
#   prom/prometheus:*    Debian's prometheus package on the Dockerfile's runtime base. Debian's
#                        release is not the compose file's version, so this stand-in is named
#                        triage-standin/prometheus:<debian version>; compose takes it from
#                        PROMETHEUS_IMAGE (--which prints the name).
#   redis:*              Debian's redis-server (and redis-tools, for redis-cli) the same way:
#                        triage-standin/redis:<debian version>, from REDIS_IMAGE. The same
#                        upstream release as the compose file's, built by Debian, hence a
#                        name of its own.
# The two build images also trust the certificates this machine added to its
# own (/usr/local/share/ca-certificates), so builds in them reach the package
# registries through a TLS-inspecting egress; the runtime base does not.
# Images without a recipe (grafana/grafana: Debian does not package Grafana)
# are reported and left out.
#
# A new compose service on a public image: write its image as
# ${NAME_IMAGE:-public/image:tag} in docker/compose.yaml, and here add a case
# to recipe(), standin_name() and debian_package() and its
# docker/standin/<recipe>.Dockerfile (prometheus and redis are the models: one
# Debian package on the runtime base, built by make_package).
# deploy/composeup_test.go then starts it with no change of its own.
#
# Everything built here carries the label org.triage.standin=<public name>.
# A stand-in that is present is kept (like a pulled image); to rebuild them all
# (a newer Debian point release, say):
#   docker image rm $(docker image ls -q --filter label=org.triage.standin | sort -u)
#
# A failure stops the script with "standin[<image>]: failed: <why>".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCKERFILE="$ROOT/docker/Dockerfile"
COMPOSE="$ROOT/docker/compose.yaml"
RECIPES="$ROOT/docker/standin"
OWN_IMAGE="${IMAGE:-triage:dev}"    # built by `make image`, never a stand-in
LOG="${STANDIN_LOG:-/tmp/triage-standin.log}"

# Internal images the stand-ins are made of.
ROOTFS=triage-standin/bookworm:minbase
SLIM=triage-standin/bookworm:slim
BUILDER=triage-standin/builder:bookworm
# Debian's prometheus package (bookworm): upstream version, and the Debian
# revision left open so a security rebuild still installs.
PROM_VERSION=2.42.0
PROM_DEB="$PROM_VERSION+ds-*"
# Debian's redis-server (bookworm): 7.0.15, the release the compose file's redis image pins.
REDIS_VERSION=7.0.15
REDIS_DEB="5:$REDIS_VERSION-*"
LABEL=org.triage.standin

NAME=init
fail() { echo "standin[$NAME]: failed: $*" >&2; exit 1; }
trap 'fail "command on line $LINENO exited with status $?"' ERR
say() { echo "standin[$NAME]: $*"; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
# quiet runs a command with its output in $LOG, shown when it fails.
quiet() {
  echo "+ $*" >>"$LOG"
  if ! "$@" >>"$LOG" 2>&1; then
    echo "--- last lines of $LOG ---" >&2; tail -n 30 "$LOG" >&2
    fail "$1 exited with an error (full log: $LOG)"
  fi
}
build() { # tag dockerfile context [build args...]
  local tag="$1" file="$2" ctx="$3"; shift 3
  quiet docker build --network host --label "$LABEL=$NAME" -t "$tag" -f "$file" "$@" "$ctx"
}
tmpdirs=()
cleanup() { local d; for d in "${tmpdirs[@]}"; do rm -rf "$d"; done; }
trap cleanup EXIT
# scratch VAR: a new temporary directory in VAR, removed on exit (not called in
# a subshell, so the list of directories to remove stays in this shell).
scratch() { local d; d="$(mktemp -d /var/tmp/triage-standin.XXXXXX)"; tmpdirs+=("$d"); printf -v "$1" '%s' "$d"; }
# hardlinks where the context lies on the same filesystem as the source (no copy), else a copy.
stage() { cp -al "$1" "$2" 2>/dev/null || { rm -rf "$2"; cp -a "$1" "$2"; }; }

# --- which images ------------------------------------------------------------
dockerfile_images() { # external images of docker/Dockerfile: FROM and COPY --from=<image:tag>
  sed -nE 's/^FROM[[:space:]]+(--[^[:space:]]+[[:space:]]+)*([^[:space:]]+).*/\2/p; s/^COPY.*--from=([^[:space:]]+:[^[:space:]]+).*/\1/p' "$DOCKERFILE" \
    | while read -r img; do
        # stage names (FROM build) and build-argument choices (FROM ${PREBUILT}) are not images
        case "$img" in \$*) continue ;; esac
        grep -qiE "^FROM[[:space:]].*[[:space:]]AS[[:space:]]+$img\$" "$DOCKERFILE" || echo "$img"
      done | awk '!seen[$0]++'
}
compose_images() { # image: lines of the compose file; ${VAR:-default} gives its default
  sed -nE 's/^[[:space:]]*image:[[:space:]]*"?([^"#[:space:]]+)"?.*/\1/p' "$COMPOSE" \
    | sed -E 's/^\$\{[A-Z_]+:-(.*)\}$/\1/' | grep -vxF "$OWN_IMAGE" | awk '!seen[$0]++'
}
runtime_base() { sed -nE 's/^FROM[[:space:]]+([^[:space:]]+)[[:space:]]*$/\1/p' "$DOCKERFILE" | tail -n 1; }

recipe() {
  case "$1" in
    debian:*-slim) echo debian ;;
    golang:*-bookworm) echo golang ;;
    rust:*-bookworm) echo rust ;;
    prom/prometheus:*) echo prometheus ;;
    redis:*) echo redis ;;
    *) echo none ;;
  esac
}
standin_name() {
  case "$(recipe "$1")" in
    prometheus) echo "triage-standin/prometheus:$PROM_VERSION" ;;
    redis) echo "triage-standin/redis:$REDIS_VERSION" ;;
    *) echo "$1" ;;
  esac
}
# debian_package recipe: the Debian version pattern its Dockerfile installs, what the
# stand-in's entrypoint must print, and the flag that makes it print it, |-separated.
debian_package() {
  case "$1" in
    prometheus) echo "$PROM_DEB|version $PROM_VERSION|--version" ;;
    redis) echo "$REDIS_DEB|v=$REDIS_VERSION|--version" ;;
  esac
}
no_recipe_reason() {
  case "$1" in
    grafana/grafana:*) echo "Debian does not package Grafana" ;;
    *) echo "no recipe in scripts/standin-images.sh" ;;
  esac
}

# --- recipes -----------------------------------------------------------------
debian_mirror() { # the host's mirror for bookworm (deb822 or one-line sources)
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local m
  m="$(awk '/^URIs:/{u=$2} /^Suites:/&&/(^| )bookworm( |$)/{print u; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
  [ -n "$m" ] || m="$(awk '$1=="deb" && $3=="bookworm"{print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)"
  echo "${m:-http://deb.debian.org/debian}"
}

ensure_rootfs() { # $ROOTFS (minbase) and $SLIM (the same, slimmed), from one debootstrap run
  if have "$ROOTFS" && have "$SLIM"; then return; fi
  command -v debootstrap >/dev/null 2>&1 || fail "debootstrap is not installed (run: scripts/setup.sh docker)"
  [ "$(id -u)" = 0 ] || fail "debootstrap needs root"
  local mirror dir; mirror="$(debian_mirror)"; scratch dir; dir="$dir/rootfs"
  case "$dir" in /var/tmp/triage-standin.*/rootfs) ;; *) fail "unexpected rootfs directory '$dir'" ;; esac
  say "debootstrap --variant=minbase bookworm from $mirror (about 30 s)"
  quiet debootstrap --variant=minbase --arch=amd64 bookworm "$dir" "$mirror"
  [ -f "$dir/etc/debian_version" ] || fail "debootstrap left no $dir/etc/debian_version"
  # The public images' apt settings, and their sources (not the host's, which
  # may name a private mirror).
  mkdir -p "$dir/etc/apt/apt.conf.d" "$dir/etc/apt/sources.list.d"
  cat >"$dir/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
  echo 'Acquire::Languages "none";' >"$dir/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$dir/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$dir/etc/apt/apt.conf.d/docker-autoremove-suggests"
  rm -f "${dir:?}/etc/apt/sources.list"
  cat >"$dir/etc/apt/sources.list.d/debian.sources" <<'APT'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
APT
  rm -rf "${dir:?}"/var/lib/apt/lists/* "${dir:?}"/var/cache/apt/*.bin "${dir:?}"/var/cache/apt/archives/*.deb \
    "${dir:?}"/var/cache/debconf/*-old "${dir:?}"/var/log/* "${dir:?}"/dev/* "${dir:?}"/tmp/* "${dir:?}"/debootstrap
  # Files debootstrap copies from the host; the engine provides its own.
  rm -f "${dir:?}/etc/resolv.conf" "${dir:?}/etc/hostname"
  : >"${dir:?}/etc/machine-id"
  local ver; ver="$(cat "$dir/etc/debian_version")"
  import "$dir" "$ROOTFS" "$ver" "debootstrap --variant=minbase bookworm"
  # Slim: what the public slim images leave out, now and in later installs.
  mkdir -p "$dir/etc/dpkg/dpkg.cfg.d"
  cat >"$dir/etc/dpkg/dpkg.cfg.d/docker" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
DPKG
  find "${dir:?}/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "${dir:?}/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "${dir:?}/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  rm -rf "${dir:?}"/usr/share/{man,groff,info,lintian,linda}/*
  import "$dir" "$SLIM" "$ver" "debootstrap --variant=minbase bookworm, slimmed"
}

import() { # dir tag debian-version message
  say "importing Debian $3 as $2"
  tar --numeric-owner --xattrs -C "$1" -c . | quiet docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --change "LABEL $LABEL=debootstrap org.triage.debian-version=$3" \
    -m "$4 (scripts/standin-images.sh)" - "$2"
}

ensure_builder() {
  if have "$BUILDER"; then return; fi
  ensure_rootfs
  local ctx; scratch ctx; mkdir -p "$ctx/local-ca"
  echo "Certificates copied from the host's /usr/local/share/ca-certificates." >"$ctx/local-ca/README"
  cp /usr/local/share/ca-certificates/*.crt "$ctx/local-ca/" 2>/dev/null || true
  say "building $BUILDER (compilers from Debian packages)"
  build "$BUILDER" "$RECIPES/builder.Dockerfile" "$ctx" --build-arg "BASE=$ROOTFS"
}

make_debian() {
  local img="$1" want; want="${1#debian:}"; want="${want%-slim}"
  ensure_rootfs
  local ver; ver="$(docker image inspect -f "{{index .Config.Labels \"org.triage.debian-version\"}}" "$SLIM")"
  if [ "$ver" != "$want" ]; then
    say "note: the mirror serves Debian $ver, the tag says $want; the stand-in is $ver (label org.triage.debian-version)"
  fi
  quiet docker tag "$SLIM" "$img"
}

make_golang() {
  local img="$1" want; want="${1#golang:}"; want="${want%-bookworm}"
  local goroot
  goroot="$(go env GOROOT 2>/dev/null)" || fail "Go is not installed on this machine (the stand-in copies its tree)"
  "$goroot/bin/go" version | grep -q "^go version go$want " \
    || fail "the host's Go ($goroot) is '$("$goroot/bin/go" version)', the image wants go$want"
  ensure_builder
  local ctx; scratch ctx; stage "$goroot" "$ctx/go"
  say "building from $BUILDER + $goroot (go$want)"
  build "$img" "$RECIPES/golang.Dockerfile" "$ctx" --build-arg "BASE=$BUILDER" --build-arg "GO_VERSION=$want"
}

make_rust() {
  local img="$1" want; want="${1#rust:}"; want="${want%-bookworm}"
  local home="${RUSTUP_HOME:-$HOME/.rustup}" tc="" d
  for d in "$home/toolchains/$want-x86_64-unknown-linux-gnu" "$home"/toolchains/*; do
    if [ -x "$d/bin/rustc" ] && "$d/bin/rustc" --version 2>/dev/null | grep -q "^rustc $want "; then
      tc="$(readlink -f "$d")"; break
    fi
  done
  [ -n "$tc" ] || fail "no rustup toolchain with rustc $want under $home/toolchains (rustup toolchain install $want)"
  local rustup; rustup="$(readlink -f "${CARGO_HOME:-$HOME/.cargo}/bin/rustup" 2>/dev/null || true)"
  [ -x "$rustup" ] || fail "rustup is not installed under ${CARGO_HOME:-$HOME/.cargo}/bin"
  ensure_builder
  local ctx; scratch ctx; mkdir -p "$ctx/toolchain"
  for d in bin etc lib libexec; do [ -e "$tc/$d" ] && stage "$tc/$d" "$ctx/toolchain/$d"; done
  cp "$rustup" "$ctx/rustup"
  say "building from $BUILDER + $tc (rustc $want, without share/)"
  build "$img" "$RECIPES/rust.Dockerfile" "$ctx" --build-arg "BASE=$BUILDER" \
    --build-arg "RUST_VERSION=$want" --build-arg "TOOLCHAIN=$want-x86_64-unknown-linux-gnu"
}

# make_package IMAGE: one Debian package on the Dockerfile's runtime base
# (docker/standin/<recipe>.Dockerfile), under its stand-in name.
make_package() {
  local r tag deb want flag; r="$(recipe "$1")"; tag="$(standin_name "$1")"
  IFS="|" read -r deb want flag < <(debian_package "$r")
  if have "$tag"; then say "ok (stand-in $tag)"; return; fi
  local base; base="$(runtime_base)"
  ensure "$base"
  NAME="$1"
  local ctx; scratch ctx
  say "building $tag: Debian's $r $deb on $base"
  build "$tag" "$RECIPES/$r.Dockerfile" "$ctx" --build-arg "BASE=$base" --build-arg "DEB_VERSION=$deb"
  docker run --rm "$tag" "$flag" 2>&1 | grep -q "$want" || fail "$tag does not report $want"
}
make_prometheus() { make_package "$@"; }
make_redis() { make_package "$@"; }

ensure() {
  local img="$1" r; NAME="$img"; r="$(recipe "$img")"
  if have "$img"; then say "ok (present)"; return; fi
  if [ "$(standin_name "$img")" != "$img" ] && have "$(standin_name "$img")"; then say "ok (stand-in $(standin_name "$img"))"; return; fi
  if docker pull -q "$img" >>"$LOG" 2>&1; then say "pulled"; return; fi
  if [ "$r" = none ]; then say "not available here: cannot pull it and $(no_recipe_reason "$img")"; return; fi
  say "cannot be pulled (see $LOG); building a stand-in"
  local t0=$SECONDS
  "make_$r" "$img"
  NAME="$img"; say "stand-in ready as $(standin_name "$img") ($((SECONDS - t0)) s)"
}

command -v docker >/dev/null 2>&1 || fail "the docker CLI is not installed (run: scripts/setup.sh docker)"
docker info >/dev/null 2>&1 || fail "no Docker engine answers (run: scripts/dockerd.sh)"
: >>"$LOG"
if [ "${1:-}" = --which ]; then
  [ $# = 2 ] || fail "usage: $0 --which IMAGE"
  NAME="$2"
  if have "$2"; then echo "$2"; exit 0; fi
  if have "$(standin_name "$2")"; then standin_name "$2"; exit 0; fi
  fail "neither $2 nor a stand-in is present (run: scripts/standin-images.sh $2)"
fi
case "${1:-}" in
  "") mapfile -t images < <(dockerfile_images; compose_images) ;;
  --dockerfile) mapfile -t images < <(dockerfile_images) ;;
  --compose) mapfile -t images < <(compose_images) ;;
  -*) fail "unknown option '$1' (known: --dockerfile --compose --which)" ;;
  *) images=("$@") ;;
esac
[ ${#images[@]} -gt 0 ] || fail "no images found in $DOCKERFILE and $COMPOSE"
for img in "${images[@]}"; do ensure "$img"; done
