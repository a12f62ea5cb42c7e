package server

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// TestGoModDownloadThroughHTTPSProxy runs a real `go mod download` with
// HTTPS_PROXY set to the https listener, as `HTTPS_PROXY=https://… go
// get` would, from a GOPROXY served over TLS on the loopback. The go
// command offers ALPN h2 to the proxy and then sends CONNECT in
// HTTP/1.1. net/http never proxies "localhost" or a loopback IP, so the
// GOPROXY URL names this machine's host name, which must resolve to the
// loopback only (else the test is skipped).
func TestGoModDownloadThroughHTTPSProxy(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command")
		}
	}
	host := loopbackHostname(t)

	// The module proxy: one module, one version.
	const mod, ver = "example.com/rustle/gomodtest", "v1.0.0"
	gp := t.TempDir()
	writeGoProxyModule(t, gp, mod, ver)
	originDir := t.TempDir()
	originCA, originCert, originKey, err := tlsconf.WriteSelfSigned(originDir, []string{host})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(originCert, originKey)
	if err != nil {
		t.Fatal(err)
	}
	origin := httptest.NewUnstartedServer(http.FileServer(http.Dir(gp)))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	origin.StartTLS()
	t.Cleanup(origin.Close)
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	originAddr := net.JoinHostPort(host, port)

	tl, _ := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 2
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}}
	cfg.AllowPrivate = []string{"127.0.0.0/8", "::1/128"}
	cfg.Listen = []config.Listener{{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	access := &logBuffer{}
	_, addrs := startLogged(t, cfg, nil, access)

	// The go command trusts the proxy's CA and the origin's.
	roots := filepath.Join(t.TempDir(), "roots.pem")
	var pem []byte
	for _, f := range []string{filepath.Join(filepath.Dir(tl.Cert), tlsconf.CAFile), originCA} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	if err := os.WriteFile(roots, pem, 0o600); err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "mod", "download", "-json", mod+"@"+ver)
	cmd.Dir = work
	cmd.Env = []string{
		"HOME=" + work,
		"PATH=" + os.Getenv("PATH"),
		"GOPATH=" + filepath.Join(work, "gopath"),
		"GOMODCACHE=" + filepath.Join(work, "modcache"),
		"GOCACHE=" + filepath.Join(work, "cache"),
		"GOENV=off",
		"GOTOOLCHAIN=local",
		"GOTELEMETRY=off",
		"GO111MODULE=on",
		"GOFLAGS=-mod=mod",
		"GOPROXY=https://" + originAddr,
		"GOSUMDB=off",
		"GONOSUMDB=*",
		"GOPRIVATE=",
		"HTTPS_PROXY=https://alice:pw@" + addrs["tls"],
		"HTTP_PROXY=https://alice:pw@" + addrs["tls"],
		"NO_PROXY=",
		"SSL_CERT_FILE=" + roots,
		"SSL_CERT_DIR=" + t.TempDir(),
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var res struct{ Path, Version, Zip, Error string }
	if jerr := json.Unmarshal(out, &res); err != nil || jerr != nil || res.Error != "" || res.Zip == "" {
		t.Fatalf("go mod download through the https proxy: %v\n%s%s", err, out, stderr.String())
	}
	if _, err := os.Stat(res.Zip); err != nil {
		t.Fatalf("go mod download reported %s: %v", res.Zip, err)
	}
	// It went through the proxy: a CONNECT to the origin.
	waitFor(t, "the access log's CONNECT "+originAddr, func() bool {
		return strings.Contains(access.String(), `"target":"`+originAddr+`"`)
	})
}

// loopbackHostname returns this machine's host name when it resolves to
// loopback addresses only, and skips the test otherwise.
func loopbackHostname(t *testing.T) string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil || host == "" || strings.EqualFold(host, "localhost") {
		t.Skipf("no usable host name (%q, %v)", host, err)
	}
	ips, err := net.DefaultResolver.LookupIPAddr(context.Background(), host)
	if err != nil || len(ips) == 0 {
		t.Skipf("host name %q does not resolve: %v", host, err)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			t.Skipf("host name %q resolves to %v, not only to the loopback", host, ips)
		}
	}
	return host
}

// writeGoProxyModule lays out module mod at version ver in dir as a
// GOPROXY serves it: list, .info, .mod and .zip under mod/@v/.
func writeGoProxyModule(t *testing.T, dir, mod, ver string) {
	t.Helper()
	v := filepath.Join(dir, filepath.FromSlash(mod), "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod := "module " + mod + "\n\ngo 1.21\n"
	var z bytes.Buffer
	zw := zip.NewWriter(&z)
	for name, body := range map[string]string{
		"go.mod": gomod,
		"m.go":   "package gomodtest\n\n// X is exported.\nconst X = 1\n",
	} {
		w, err := zw.Create(mod + "@" + ver + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"list":        []byte(ver + "\n"),
		ver + ".info": []byte(`{"Version":"` + ver + `","Time":"2024-01-01T00:00:00Z"}`),
		ver + ".mod":  []byte(gomod),
		ver + ".zip":  z.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(v, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
