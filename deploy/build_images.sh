#!/usr/bin/env bash
# Builds farcall's container images into the local image store:
#   localhost/farcall-router:TAG, localhost/farcall-agent-cpu:TAG and
#   localhost/farcall-agent-oneapi:TAG (and agent-rocm, agent-cuda on request),
#   each tagged with the project's version (CMakeLists.txt) as well,
# from deploy/docker/Dockerfile, with podman (or docker when podman is not
# installed and a docker daemon answers). Run with --help for the options.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DOCKERFILE="$ROOT/deploy/docker/Dockerfile"
IGNOREFILE="$ROOT/deploy/docker/Dockerfile.dockerignore"
CACHE_DIR=${FARCALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/farcall}
LOCAL_BASE=localhost/debian:12
PUBLIC_BASE=debian:12-slim
DEFAULT_IMAGES=router,agent-cpu,agent-oneapi
ALL_IMAGES=router,agent-cpu,agent-oneapi,agent-rocm,agent-cuda
VERSION=$(sed -n 's/^project(farcall VERSION \([0-9][0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")

usage() {
  cat <<EOF
Usage: deploy/build_images.sh [OPTIONS]

Builds farcall's images from deploy/docker/Dockerfile into the local store,
named localhost/farcall-IMAGE:TAG and localhost/farcall-IMAGE:$VERSION (the
version in CMakeLists.txt), so that afterwards
  podman run --rm localhost/farcall-router:dev --agents=HOST:50051
works. Podman is used when it is installed, else docker (with a daemon).

Options:
  --images=LIST       images to build, comma-separated, from
                      $ALL_IMAGES, or "all"
                      (default: $DEFAULT_IMAGES)
  --tag=TAG           image tag besides $VERSION (default: dev)
  --prebuilt[=DIR]    copy binaries already built on this host instead of
                      compiling them in the builder stage (which takes about
                      15 minutes on 2 cores). The binaries are DIR/server/farcall-router,
                      DIR/device_agents/farcall-agent and DIR/client/farcall
                      (DIR defaults to build/; FARCALL_ROUTER_BIN,
                      FARCALL_AGENT_BIN and FARCALL_CLI_BIN override each).
                      They must be built on Debian 12. CI uses this.
  --base-image=IMAGE  the Debian 12 image every stage starts from. Default:
                      $LOCAL_BASE when it exists, else one made here with
                      mmdebstrap (no registry needed; the root filesystem
                      tarball is cached in $CACHE_DIR), else
                      $PUBLIC_BASE pulled from a registry.
  --refresh-base      make $LOCAL_BASE again from a fresh mmdebstrap run
  --build-arg=K=V     passed on to the build, repeatable: SOURCE=URL (where
                      the source can be found, the images'
                      org.opencontainers.image.source label),
                      CUDA_DEVEL_IMAGE=..., ONEAPI_ICD_PACKAGES=...
  --engine=podman|docker
  --containers-conf   only write the containers.conf that podman needs in
                      sandboxes (see below), print its path and exit
  --base-only         only make sure the base image exists (as below),
                      print its name and exit
  --push=DEST         after building, push each image's :$VERSION (podman
                      only) to DEST: a registry and path
                      (registry.example.com/ml, pushed as
                      DEST/farcall-IMAGE:$VERSION), or an OCI layout
                      directory, oci:DIR (as DIR:farcall-IMAGE-$VERSION, to
                      carry to an air-gapped registry), and write the
                      digests podman reports into a kustomization (below)
  --registry-name=NAME  the name the cluster pulls the images by, in that
                      kustomization (default: DEST; needed with oci:DIR)
  --digests-overlay=DIR  where that kustomization goes (default:
                      deploy/k8s/release, which git ignores); it builds on
                      --overlay-base and pins every image pushed to
                      NAME/farcall-IMAGE@sha256:...
  --overlay-base=DIR  the kustomization the digests overlay builds on
                      (default: deploy/k8s; deploy/k8s/tls for TLS)
  --no-build          push the images already in the store (with --push)
  -h, --help          this text

Podman is pointed at a containers.conf (CONTAINERS_CONF, unless you set it)
with default ulimits that a sandbox without the right to raise limits accepts,
and the runc runtime when runc is installed (crun 1.8 refuses hybrid cgroups).
Use the same file to run the images: the script prints how.

Environment: FARCALL_CACHE_DIR (default ~/.cache/farcall), FARCALL_DEBIAN_MIRROR
(a mirror URL for mmdebstrap), FARCALL_CONTAINER_ENGINE.
EOF
}

say() { printf '== build_images: %s\n' "$*" >&2; }
die() { printf 'build_images: error: %s\n' "$*" >&2; exit 1; }

images=$DEFAULT_IMAGES
tag=dev
prebuilt=""
base_image=""
refresh_base=false
engine=${FARCALL_CONTAINER_ENGINE:-}
conf_only=false
base_only=false
extra_args=()
push=""
registry_name=""
digests_overlay="$ROOT/deploy/k8s/release"
overlay_base="$ROOT/deploy/k8s"
build=true
while (($#)); do
  case "$1" in
    --images=*) images=${1#*=} ;;
    --tag=*) tag=${1#*=} ;;
    --prebuilt) prebuilt="$ROOT/build" ;;
    --prebuilt=*) prebuilt=${1#*=} ;;
    --base-image=*) base_image=${1#*=} ;;
    --refresh-base) refresh_base=true ;;
    --build-arg=*) extra_args+=(--build-arg "${1#*=}") ;;
    --build-arg) shift; (($#)) || die "--build-arg needs K=V"; extra_args+=(--build-arg "$1") ;;
    --engine=*) engine=${1#*=} ;;
    --containers-conf) conf_only=true ;;
    --base-only) base_only=true ;;
    --push=*) push=${1#*=} ;;
    --registry-name=*) registry_name=${1#*=} ;;
    --digests-overlay=*) digests_overlay=${1#*=} ;;
    --overlay-base=*) overlay_base=${1#*=} ;;
    --no-build) build=false ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done
[ "$images" = all ] && images=$ALL_IMAGES
[ -n "$VERSION" ] || die "no project(farcall VERSION ...) in $ROOT/CMakeLists.txt"
if [ -n "$push" ]; then
  case "$push" in
    oci:?*) [ -n "$registry_name" ] ||
      die "--push=$push writes an OCI layout: give --registry-name, the name the cluster pulls the images by" ;;
    */*) [ -n "$registry_name" ] || registry_name=${push#docker://} ;;
    *) die "--push=$push is neither a registry and path (registry.example.com/ml) nor oci:DIR" ;;
  esac
  [ -f "$overlay_base/kustomization.yaml" ] || die "--overlay-base=$overlay_base holds no kustomization.yaml"
else
  $build || die "--no-build only makes sense with --push"
fi

# Writes containers.conf into the cache folder and points CONTAINERS_CONF at
# it, unless the caller already chose one.
containers_conf() {
  if [ -n "${CONTAINERS_CONF:-}" ]; then
    [ -f "$CONTAINERS_CONF" ] && return
    say "CONTAINERS_CONF=$CONTAINERS_CONF does not exist; writing one of our own instead"
  fi
  mkdir -p "$CACHE_DIR"
  local conf="$CACHE_DIR/containers.conf"
  {
    echo "# Written by deploy/build_images.sh: podman settings that work in sandboxes"
    echo "# that may not raise resource limits."
    echo "[containers]"
    echo 'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]'
    if command -v runc >/dev/null 2>&1; then
      echo "[engine]"
      echo "# crun 1.8 refuses hybrid cgroup layouts; runc does not."
      echo 'runtime = "runc"'
    fi
  } >"$conf.tmp"
  mv "$conf.tmp" "$conf"
  export CONTAINERS_CONF="$conf"
}

if $conf_only; then
  containers_conf
  echo "${CONTAINERS_CONF}"
  exit 0
fi

# --- the engine -------------------------------------------------------------
if [ -z "$engine" ]; then
  if command -v podman >/dev/null 2>&1; then
    engine=podman
  elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  else
    die "neither podman nor a working docker was found; install podman (apt-get install podman buildah runc uidmap slirp4netns fuse-overlayfs), see docs/deploy.md"
  fi
fi
case "$engine" in
  podman) containers_conf; say "engine: podman $(podman --version | awk '{print $3}') (CONTAINERS_CONF=$CONTAINERS_CONF)" ;;
  docker) say "engine: docker" ;;
  *) die "--engine must be podman or docker, not '$engine'" ;;
esac

image_exists() { "$engine" image inspect "$1" >/dev/null 2>&1; }

# --- the base image ---------------------------------------------------------
# A Debian 12 minbase root filesystem from the Debian mirror, imported as
# localhost/debian:12: no container registry is needed.
make_local_base() {
  command -v mmdebstrap >/dev/null 2>&1 ||
    die "no $LOCAL_BASE and no mmdebstrap to make it (apt-get install mmdebstrap), or pass --base-image=$PUBLIC_BASE"
  local tarball="$CACHE_DIR/debian-12-minbase.tar"
  mkdir -p "$CACHE_DIR"
  if $refresh_base || [ ! -f "$tarball" ] || [ ! -s "$tarball" ]; then
    say "making a Debian 12 root filesystem with mmdebstrap (about 30 s): $tarball"
    local mirror=() partial="$CACHE_DIR/debian-12-minbase.partial.tar"
    [ -n "${FARCALL_DEBIAN_MIRROR:-}" ] && mirror=("$FARCALL_DEBIAN_MIRROR")
    rm -rf "$partial" "$tarball"
    mmdebstrap --quiet --variant=minbase --format=tar \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      bookworm "$partial" "${mirror[@]}" </dev/null ||
      { rm -rf "$partial"; die "mmdebstrap failed"; }
    mv "$partial" "$tarball"
  else
    say "using the cached root filesystem $tarball"
  fi
  say "importing it as $LOCAL_BASE"
  "$engine" import "$tarball" "$LOCAL_BASE" >/dev/null
}

pull_args=()
# (Pushing what the store holds needs no base image.)
if ! $build && ! $base_only; then
  :
elif [ -z "$base_image" ]; then
  if image_exists "$LOCAL_BASE" && ! $refresh_base; then
    base_image=$LOCAL_BASE
  elif command -v mmdebstrap >/dev/null 2>&1; then
    make_local_base
    base_image=$LOCAL_BASE
  else
    base_image=$PUBLIC_BASE
  fi
elif [ "$base_image" = "$LOCAL_BASE" ] && { $refresh_base || ! image_exists "$LOCAL_BASE"; }; then
  make_local_base
fi
if [ "$base_image" = "$LOCAL_BASE" ] && [ "$engine" = podman ]; then
  pull_args=(--pull=never)
fi
$build || $base_only && say "base image: $base_image"
if $base_only; then
  echo "$base_image"
  exit 0
fi

# --- where the binaries come from ---------------------------------------------
context_args=()
stage=""
cleanup() { [ -n "$stage" ] && rm -rf "$stage"; return 0; }
trap cleanup EXIT
if [ -n "$prebuilt" ]; then
  grep -q '^VERSION_ID="12"' /etc/os-release 2>/dev/null && grep -q '^ID=debian' /etc/os-release ||
    die "--prebuilt takes binaries built on Debian 12 (the images' base); this host is not Debian 12"
  router_bin=${FARCALL_ROUTER_BIN:-$prebuilt/server/farcall-router}
  agent_bin=${FARCALL_AGENT_BIN:-$prebuilt/device_agents/farcall-agent}
  cli_bin=${FARCALL_CLI_BIN:-$prebuilt/client/farcall}
  for b in "$router_bin" "$agent_bin" "$cli_bin"; do
    [ -x "$b" ] || die "--prebuilt: $b is missing; build first (bash scripts/build.sh)"
  done
  # A copy: the build tree may be relinked while the images build.
  stage=$(mktemp -d "${TMPDIR:-/tmp}/farcall-images.XXXXXX")
  mkdir -p "$stage/out/bin"
  cp "$router_bin" "$stage/out/bin/farcall-router"
  cp "$agent_bin" "$stage/out/bin/farcall-agent"
  cp "$cli_bin" "$stage/out/bin/farcall"
  chmod 0755 "$stage"/out/bin/*
  # The Debian packages of the shared libraries the agent and CLI link
  # (this host's agent may link HIP and OpenCL as well as the cpu backend).
  libs=$(ldd "$stage/out/bin/farcall-agent" "$stage/out/bin/farcall" |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
  pkgs=()
  unowned=()
  for lib in $libs; do
    owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true)
    if [ -z "$owner" ]; then
      unowned+=("$lib")
    else
      pkgs+=("${owner%%:*}")
    fi
  done
  ((${#unowned[@]} == 0)) ||
    die "--prebuilt: no Debian package owns ${unowned[*]}; the images can only carry Debian's libraries"
  agent_packages=$(printf '%s\n' "${pkgs[@]}" | sort -u | tr '\n' ' ')
  say "prebuilt binaries from $(dirname "$(dirname "$agent_bin")") (agent libraries from: $agent_packages)"
  context_args=(--build-context "binaries=$stage" --build-context "binaries-rocm=$stage"
                --build-context "binaries-cuda=$stage"
                --build-arg "AGENT_EXTRA_PACKAGES=$agent_packages")
elif $build; then
  say "binaries: compiled from source in the builder stage (about 15 minutes on 2 cores the first time)"
fi

ignore_args=()
[ "$engine" = podman ] && ignore_args=(--ignorefile "$IGNOREFILE")

# --- the images ---------------------------------------------------------------
# Each image is copied from a Debian stage, TARGET-root (deploy/docker/
# Dockerfile), which is built first so that its ID is known: it stays in
# the store as the build cache, and those of earlier builds are removed at
# the end.
IFS=, read -r -a wanted <<<"$images"
ids=$(mktemp -d "${TMPDIR:-/tmp}/farcall-image-ids.XXXXXX")
trap 'cleanup; rm -rf "$ids"' EXIT
built=()
for target in "${wanted[@]}"; do
  case ",$ALL_IMAGES," in
    *",$target,"*) ;;
    *) die "unknown image '$target' (known: $ALL_IMAGES)" ;;
  esac
  $build || continue
  name="localhost/farcall-$target:$tag"
  say "building $name and :$VERSION (target $target)"
  start=$SECONDS
  common=("${pull_args[@]}" -f "$DOCKERFILE" "${ignore_args[@]}" --build-arg "BASE_IMAGE=$base_image"
          --build-arg "VERSION=$VERSION" "${context_args[@]}" "${extra_args[@]}")
  "$engine" build "${common[@]}" --target "$target-root" --iidfile "$ids/$target" "$ROOT"
  "$engine" build "${common[@]}" --target "$target" --quiet \
    -t "$name" -t "localhost/farcall-$target:$VERSION" "$ROOT" >/dev/null
  say "built $name in $((SECONDS - start)) s ($("$engine" image inspect --format '{{.Size}}' "$name" |
    awk '{printf "%.0f MB", $1 / 1e6}'))"
  built+=("$name")
done

# Earlier builds of these images, now untagged, and their TARGET-root stages
# would pile up in the store (CI builds on every run): remove them. The base
# and the layers with the Debian packages stay cached.
stale=""
$build && stale=$({ "$engine" images --filter dangling=true --filter label=org.opencontainers.image.title \
            --format '{{.ID}} {{index .Labels "org.opencontainers.image.title"}}' 2>/dev/null || true; } |
        awk '$2 ~ /^farcall-/ && $2 !~ /-root$/ {print $1}' | sort -u)
for target in "${wanted[@]}"; do
  $build || break
  keep=$(sed 's/^sha256://' "$ids/$target")
  for id in $({ "$engine" images --no-trunc --quiet --filter dangling=true \
                  --filter "label=org.opencontainers.image.title=farcall-$target-root" 2>/dev/null ||
                true; } | sed 's/^sha256://'); do
    [ "$id" = "$keep" ] || stale+=$'\n'"$id"
  done
done
stale=$(echo "$stale" | sed '/^$/d')
if [ -n "$stale" ]; then
  say "removing $(echo "$stale" | wc -l) untagged image(s) of earlier builds"
  # shellcheck disable=SC2086
  "$engine" rmi $stale >/dev/null 2>&1 || true
fi

((${#built[@]} == 0)) || say "done: ${built[*]}"
if [ "$engine" = podman ] && ((${#built[@]})); then
  say "run them with: CONTAINERS_CONF=$CONTAINERS_CONF podman run --rm --read-only ${built[0]} --help"
fi
[ -n "$push" ] || exit 0

# --- pushing, and the digests overlay -------------------------------------------
# A tag can be moved; a digest cannot: the overlay pins each image to the
# bytes that were pushed (and tested), whatever the tag comes to name later.
[ "$engine" = podman ] || die "--push needs podman (it reports the digest it pushed)"
pins=""
for target in "${wanted[@]}"; do
  source="localhost/farcall-$target:$VERSION"
  image_exists "$source" || die "$source is not in the image store: build it first (without --no-build)"
  case "$push" in
    oci:*) dest="$push:farcall-$target-$VERSION"; mkdir -p "${push#oci:}" ;;
    docker://*) dest="$push/farcall-$target:$VERSION" ;;
    *) dest="docker://$push/farcall-$target:$VERSION" ;;
  esac
  say "pushing $source to $dest"
  podman push --quiet --digestfile "$ids/$target.digest" "$source" "$dest" ||
    die "pushing $source to $dest failed"
  digest=$(cat "$ids/$target.digest")
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "podman reported no digest for $dest ('$digest')"
  say "pushed $dest: $digest"
  pins+=$'  - name: localhost/farcall-'"$target"$'\n    newName: '"$registry_name/farcall-$target"$'\n    digest: '"$digest"$'\n'
done
mkdir -p "$digests_overlay"
overlay_file="$digests_overlay/kustomization.yaml"
{
  echo "# Written by deploy/build_images.sh --push: farcall $VERSION's images as"
  echo "# pushed to $registry_name, pinned by digest, so that every pod runs the"
  echo "# bytes that were pushed, whatever the tag comes to name. Apply with"
  echo "#   kubectl apply -k $digests_overlay"
  echo "# Images this run did not push keep their tag."
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "resources:"
  echo "  - $(realpath --relative-to="$digests_overlay" "$overlay_base")"
  echo "images:"
  printf '%s' "$pins"
} >"$overlay_file.tmp"
mv "$overlay_file.tmp" "$overlay_file"
say "digests written to $overlay_file"

