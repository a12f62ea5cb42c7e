#!/usr/bin/env bash
# deps.sh installs the Debian packages rustle's tests drive as real
# clients, only when they are missing. Run as root (CI and dev machines
# here are); otherwise it says what to install.
set -euo pipefail
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v wget >/dev/null 2>&1 || need+=(wget)
# The browser test (e2e/browser_test.go) drives Debian's Chromium through
# playwright-core, which it installs itself with npm ci. Node.js comes from
# Debian only when there is none: a newer one (NodeSource's) is kept.
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${need[*]}"
if [ "$(id -u)" != 0 ]; then
  echo "deps: not root: install ${need[*]} with apt-get and re-run" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
