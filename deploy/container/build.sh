#!/usr/bin/env bash
# build.sh builds rustle's container image: a static binary
# (CGO_ENABLED=0) copied into a FROM scratch image by podman, or by buildah
# when podman is missing. Nothing is pulled from a registry.
#
#   deploy/container/build.sh [TAG]      (default TAG: localhost/rustle:dev)
set -euo pipefail
tag=${1:-localhost/rustle:dev}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

version=$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)
CGO_ENABLED=0 go -C "$root" build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/rustle" ./cmd/rustle
if command -v readelf >/dev/null && readelf -d "$ctx/rustle" 2>/dev/null | grep -q NEEDED; then
  echo "build.sh: $ctx/rustle is dynamically linked; a FROM scratch image needs a static binary" >&2
  exit 1
fi
cp "$here/Containerfile" "$here/rustle.toml" "$ctx/"

if command -v podman >/dev/null; then
  podman build --build-arg "VERSION=$version" -t "$tag" -f "$ctx/Containerfile" "$ctx"
elif command -v buildah >/dev/null; then
  buildah build --build-arg "VERSION=$version" -t "$tag" -f "$ctx/Containerfile" "$ctx"
else
  echo "build.sh: neither podman nor buildah is installed (Debian: apt-get install podman)" >&2
  exit 1
fi
echo "built $tag (rustle $version)"
