#!/usr/bin/env bash
# check.sh lints and renders the Helm chart deploy/helm/rustle with helm
# run from the Go module proxy (no helm binary needed), checks that the
# chart refuses to render without users, that every resource is there,
# and that the rendered rustle.toml passes `rustle check`.
#
#   HELM_VERSION=v3.22.0 bash deploy/helm/check.sh
#
# The first run downloads and builds helm: minutes and about 1.2 GB of
# module and build cache; later runs take seconds.
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v3.22.0}
# KUBE_VERSION: the cluster version templates are rendered for (the chart
# needs 1.30 or later for the preStop sleep action).
KUBE_VERSION=${KUBE_VERSION:-1.31.0}
root=$(cd "$(dirname "$0")/../.." && pwd)
chart="$root/deploy/helm/rustle"
values="$chart/ci/test-values.yaml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Build helm once (go install, like go run, takes it from the Go module
# proxy at that version and leaves go.mod alone), outside the module.
echo "helm-lint: go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
(cd "$tmp" && GOBIN="$tmp/bin" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
helm() { "$tmp/bin/helm" "$@"; }

echo "helm-lint: helm lint"
helm lint --strict "$chart" -f "$values" --kube-version "$KUBE_VERSION"

echo "helm-lint: helm template"
helm template rustle "$chart" -f "$values" --namespace proxy --kube-version "$KUBE_VERSION" >"$tmp/all.yaml"
for kind in Deployment Service ConfigMap Secret PodDisruptionBudget HorizontalPodAutoscaler; do
  grep -q "^kind: $kind\$" "$tmp/all.yaml" || { echo "helm-lint: no $kind rendered" >&2; exit 1; }
done
for probe in 'path: /healthz' 'path: /readyz' 'preStop:'; do
  grep -q "$probe" "$tmp/all.yaml" || { echo "helm-lint: no '$probe' in the Deployment" >&2; exit 1; }
done

echo "helm-lint: the chart refuses to render without users"
if helm template rustle "$chart" --kube-version "$KUBE_VERSION" >"$tmp/nousers.out" 2>&1; then
  echo "helm-lint: rendered without users.htpasswd" >&2
  exit 1
fi
grep -q 'users.htpasswd' "$tmp/nousers.out" || { cat "$tmp/nousers.out" >&2; exit 1; }

echo "helm-lint: rustle check on the rendered rustle.toml"
helm template rustle "$chart" -f "$values" --kube-version "$KUBE_VERSION" --show-only templates/configmap.yaml |
  sed -n '/^  rustle.toml: |/,$p' | tail -n +2 | sed 's/^    //' >"$tmp/rustle.toml"
grep -E '^ +alice:' "$values" | sed 's/^ *//' >"$tmp/htpasswd"
sed -i "s|/etc/rustle/users/htpasswd|$tmp/htpasswd|" "$tmp/rustle.toml"
(cd "$root" && go run ./cmd/rustle check -c "$tmp/rustle.toml")
echo "helm-lint: OK"
