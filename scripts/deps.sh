#!/usr/bin/env bash
# deps.sh installs the Debian packages rustle's tests drive as real
# clients, only when they are missing. Run as root (CI and dev machines
# here are); otherwise it says what to install.
set -euo pipefail
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v wget >/dev/null 2>&1 || need+=(wget)
# openssl s_client sends the TLS KeyUpdate that internal/tunnel's
# TestAddTLSKeyUpdate relays and that TestRecordConnTLSNotifyNoPlaintext
# and internal/server's TestIdleInterceptedOuterKeyUpdate (through
# proxytest.SClient) send to a parked intercepted connection, and
# TestIdleInterceptedKeyUpdateSoon to one about to park (inside the
# tunnel through a CONNECT, -proxy, on the plain port, or bridged into
# an HTTP/2 CONNECT stream), internal/h2's TestHandOffKeyUpdate to an
# HTTP/2 connection as its worker hands its wait off, and fronts
# another server name through a CONNECT (-proxy, -servername) in e2e's
# TestSNICheck.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# The browser test (e2e/browser_test.go) drives Debian's Chromium through
# playwright-core, which it installs itself with npm ci. Node.js comes from
# Debian only when there is none: a newer one (NodeSource's) is kept.
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# TLS interception's e2e tests (e2e/intercept_test.go): nginx as an HTTPS
# origin with its own certificate, Python's requests (Debian's python3,
# REQUESTS_CA_BUNDLE), and certutil to put rustle's CA in the NSS
# database Chromium trusts.
[ -x /usr/sbin/nginx ] || need+=(nginx-light)
/usr/bin/python3 -c 'import requests' >/dev/null 2>&1 || need+=(python3-requests)
command -v certutil >/dev/null 2>&1 || need+=(libnss3-tools)
# ip (iproute2) for the network namespaces internal/server's
# TestEgressNetns makes.
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# nft (nftables) for the REDIRECT and TPROXY rules internal/server's
# TestTransparentNetns writes in the namespaces it makes; Debian's
# Python (/usr/bin/python3) for its Python client, and python3-pacparser
# for internal/pac's tests, which evaluate PAC files with it.
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
[ -x /usr/bin/python3 ] || need+=(python3)
/usr/bin/python3 -c 'import pacparser' >/dev/null 2>&1 || need+=(python3-pacparser)
# redis-server for the cluster tests (internal/server/cluster_test.go,
# clusterha_test.go): two instances sharing quotas and limits through a
# Redis each test starts, one server, a master with a replica and three
# Sentinels (redis-server --sentinel, the same program: Debian's
# redis-sentinel package, its service, is not needed), or a Redis
# Cluster, which redis-cli (redis-tools) makes.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
# nghttp (an HTTP/2 client) for internal/h2's interop test.
command -v nghttp >/dev/null 2>&1 || need+=(nghttp2-client)
# Squid and Dante, real parent proxies for the route tests
# (internal/route, internal/server): an HTTP parent with Basic auth, a SOCKS5 parent.
command -v squid >/dev/null 2>&1 || [ -x /usr/sbin/squid ] || need+=(squid)
command -v danted >/dev/null 2>&1 || [ -x /usr/sbin/danted ] || need+=(dante-server)
# goaccess and calamaris, log analysers that internal/accesslog's and
# e2e's tests run over the squid, common and combined access logs.
command -v goaccess >/dev/null 2>&1 || need+=(goaccess)
command -v calamaris >/dev/null 2>&1 || need+=(calamaris)
# slapd (OpenLDAP's server) and ldapadd for the LDAP provider's tests,
# which run a directory of their own on loopback ports.
[ -x /usr/sbin/slapd ] || command -v slapd >/dev/null 2>&1 || need+=(slapd)
command -v ldapadd >/dev/null 2>&1 || need+=(ldap-utils)
# h2spec, the HTTP/2 conformance suite internal/h2's TestH2Spec runs,
# from the Go module proxy (the release has no go.mod, hence
# +incompatible).
h2spec_version=v2.2.1+incompatible
if ! command -v h2spec >/dev/null 2>&1 && [ ! -x "$(go env GOBIN)/h2spec" ] &&
  [ ! -x "$(go env GOPATH)/bin/h2spec" ]; then
  echo "deps: go install h2spec@$h2spec_version"
  go install "github.com/summerwind/h2spec/cmd/h2spec@$h2spec_version"
fi
# opa (Open Policy Agent), the policy engine an [authz] decision service
# most often is: internal/authz's and internal/server's tests run it as
# the service (opa run --server), from the Go module proxy (a build of a
# few minutes, once).
opa_version=v1.22.4
if ! command -v opa >/dev/null 2>&1 && [ ! -x "$(go env GOBIN)/opa" ] &&
  [ ! -x "$(go env GOPATH)/bin/opa" ]; then
  echo "deps: go install opa@$opa_version"
  go install "github.com/open-policy-agent/opa@$opa_version"
fi
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
