#!/usr/bin/env bash
# deps.sh installs the Debian packages rustle's tests drive as real
# clients, only when they are missing. Run as root (CI and dev machines
# here are); otherwise it says what to install.
set -euo pipefail
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v wget >/dev/null 2>&1 || need+=(wget)
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
