//go:build linux

package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The gost column: GO Simple Tunnel v3 (github.com/go-gost/gost), a Go
// proxy, built from its source outside the repository (it is not a
// Debian package, and the Go module proxy refuses github.com/go-gost/gost,
// so "go install" cannot fetch it; bench/README.md says how to build it)
// and named with -gost PATH or $GOST_BIN. Without a binary the column is
// left out of the default list, and asking for it is an error.

// gostEnv names the environment variable that gives the gost binary when
// -gost is not set.
const gostEnv = "GOST_BIN"

// gostBuildHint says how to get a gost binary, for the errors of a
// campaign that asks for the column without one.
const gostBuildHint = "gost is not a Debian package and the Go module proxy refuses github.com/go-gost/gost, so the campaign cannot install or build it: build it from its source as bench/README.md (\"The gost column\") says, then pass -gost /path/to/gost (or set " + gostEnv + ")"

// gostProxy is the gost column.
var gostProxy = &proxyDef{
	name: "gost", label: "gost",
	// No HTTP/3: gost's http3 handler (x/handler/http3) forwards requests
	// to their Host without any proxy authentication, so it cannot run
	// with authentication on like every column. The HTTP/3 rows read "—",
	// as do the parent, DNS and UDP rows, which only rustle has.
	features: []string{featHTTP, featHTTPS, featWebSocket, featSOCKS, featH2},
	tuning: []string{
		"built from source (commit and module versions beside the version; steps in bench/README.md), go build -buildvcs=true -trimpath, run in the foreground with a JSON configuration (gost -C gost.json): one service per test",
		"no workers setting: the process pinned to the proxy core like the others, Go's GOMAXPROCS follows the mask (1), as for rustle; GOGC and the rest at their defaults",
		"log level \"error\" (gost logs every connection at info)",
		"authentication on: the service's handler auth, one username and password, plain text in the config (gost's authenticator compares plain passwords; it has no hashed form): HTTP Basic (Proxy-Authorization) on the HTTP ports, username/password (RFC 1929) on SOCKS5",
		"plain port: handler http, listener tcp; SOCKS5 port: handler socks5, listener tcp; HTTPS port: handler http, listener tls (the campaign's certificate and key, Go's crypto/tls defaults: TLS 1.2 and 1.3, session tickets on, ALPN not offered)",
		"http handler: metadata keepalive = true (upstream keep-alive through a Go http.Transport, 30 s idle). gost's default is off: it then sends Connection: close to the origin and closes the client connection after every response. The transport keeps Go's default of 2 idle connections per host (gost has no setting for it), so with more client connections than that most origin connections are closed after their response and dialled again",
		"HTTP/2 rows: handler http2, listener http2 on the TLS port (Go's net/http server with golang.org/x/net/http2, ALPN h2 and http/1.1): forwarded requests and CONNECT streams; the http2 handler dials a new origin connection for every forwarded request (it has no upstream pool or keepalive option); the HTTPS rows keep the http handler over tls, gost's HTTPS proxy",
		"HTTP/3 rows not run: gost's http3 handler has no proxy authentication (no auth option; it forwards every request to its Host), so it cannot run with authentication on like the other columns",
	},
	prepare: prepareGost,
	command: gostCommand,
}

func init() {
	coresTuning["gost"] = "More cores: no workers setting (one accept loop, goroutines per connection): the process pinned to the n proxy CPUs, Go's GOMAXPROCS follows the mask (n)"
}

// gostBinary returns the gost binary the campaign was given: flag, or
// else the value of $GOST_BIN.
func gostBinary(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(gostEnv)
}

// defaultProxyList returns the columns a campaign runs without -proxies:
// defaultProxies, with gost before "no proxy" when a gost binary is
// given.
func defaultProxyList(haveGost bool) string {
	if !haveGost {
		return defaultProxies
	}
	names := strings.Split(defaultProxies, ",")
	i := slices.Index(names, "none")
	if i < 0 {
		i = len(names)
	}
	return strings.Join(slices.Insert(names, i, gostProxy.name), ",")
}

// checkGost returns an error when defs has the gost column but bin names
// no executable file.
func checkGost(defs []*proxyDef, bin string) error {
	if !slices.Contains(defs, gostProxy) {
		return nil
	}
	if bin == "" {
		return errors.New("campaign: proxy gost needs a gost binary: " + gostBuildHint)
	}
	st, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("campaign: gost binary: %w (%s)", err, gostBuildHint)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("campaign: gost binary %s is not an executable file", bin)
	}
	return nil
}

// prepareGost checks the gost binary and returns its version: what
// gost -V prints, and the commit and go-gost module versions it was built
// from (its build information).
func prepareGost(ctx context.Context, e *env) (string, error) {
	if e.gostBin == "" {
		return "", errors.New(gostBuildHint)
	}
	out, err := exec.CommandContext(ctx, e.gostBin, "-V").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -V: %w: %s", e.gostBin, err, firstLines(string(out), 2))
	}
	bi, err := buildinfo.ReadFile(e.gostBin)
	if err != nil {
		bi = nil // a binary without build information: its -V line only
	}
	return gostVersion(strings.TrimSpace(string(out)), bi), nil
}

// gostVersion joins gost -V's first line with what bi says of the build:
// the source commit and its time, whether the tree was modified (the
// go.mod replace directives of a build from local sources), and the
// versions of go-gost/x and go-gost/core with their replacements.
func gostVersion(v string, bi *buildinfo.BuildInfo) string {
	v, _, _ = strings.Cut(v, "\n")
	if bi == nil {
		return v
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var parts []string
	if rev := settings["vcs.revision"]; rev != "" {
		src := "source commit " + rev[:min(12, len(rev))]
		if t := settings["vcs.time"]; t != "" {
			src += " of " + t
		}
		if settings["vcs.modified"] == "true" {
			src += ", tree modified"
		}
		parts = append(parts, src)
	}
	for _, d := range bi.Deps {
		if d.Path != "github.com/go-gost/x" && d.Path != "github.com/go-gost/core" {
			continue
		}
		dep := d.Path + " " + d.Version
		if r := d.Replace; r != nil {
			dep += " => " + r.Path
			if r.Version != "" && r.Version != "(devel)" {
				dep += " " + r.Version
			}
		}
		parts = append(parts, dep)
	}
	if len(parts) == 0 {
		return v
	}
	return v + "; " + strings.Join(parts, ", ")
}

// gostConfig is gost's configuration file (gost -C FILE.json): the
// subset of its config.Config the campaign sets.
type gostConfig struct {
	Log      gostLog       `json:"log"`
	Services []gostService `json:"services"`
}

// gostLog is gost's log section.
type gostLog struct {
	Level string `json:"level"`
}

// gostService is one service: an address, a handler (the proxy protocol)
// and a listener (the transport).
type gostService struct {
	Name     string       `json:"name"`
	Addr     string       `json:"addr"`
	Handler  gostHandler  `json:"handler"`
	Listener gostListener `json:"listener"`
}

// gostHandler is a service's handler with its credentials and options
// (its metadata).
type gostHandler struct {
	Type     string         `json:"type"`
	Auth     gostAuth       `json:"auth"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// gostAuth is one user: gost compares the password in plain text.
type gostAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// gostListener is a service's listener, with the certificate and key of a
// TLS one; nil TLS for a plain one.
type gostListener struct {
	Type string   `json:"type"`
	TLS  *gostTLS `json:"tls,omitempty"`
}

// gostTLS names a listener's certificate chain and key (PEM files).
type gostTLS struct {
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
}

// gostConf returns gost's configuration for listener on port: h2 selects
// the http2 service on the TLS port (the HTTP/2 rows), the http handler
// over tls otherwise.
func (e *env) gostConf(listener string, port int, h2 bool) (gostConfig, error) {
	s := gostService{
		Name: "bench", Addr: fmt.Sprintf("127.0.0.1:%d", port),
		Handler: gostHandler{Type: "http", Auth: gostAuth{Username: e.user, Password: e.pass}},
	}
	tls := &gostTLS{CertFile: e.certFile, KeyFile: e.keyFile}
	// keepalive: the http handler's upstream keep-alive. Off by default:
	// gost then sends "Connection: close" upstream and closes the client's
	// connection after every response, so that plain requests would each
	// cost a connection on both sides.
	httpOpts := map[string]any{"keepalive": true}
	switch {
	case listener == lnHTTP:
		s.Handler.Metadata, s.Listener = httpOpts, gostListener{Type: "tcp"}
	case listener == lnSOCKS:
		s.Handler.Type, s.Listener = "socks5", gostListener{Type: "tcp"}
	case listener == lnHTTPS && h2:
		s.Handler.Type, s.Listener = "http2", gostListener{Type: "http2", TLS: tls}
	case listener == lnHTTPS:
		s.Handler.Metadata, s.Listener = httpOpts, gostListener{Type: "tls", TLS: tls}
	default:
		return gostConfig{}, fmt.Errorf("campaign: gost: no service for a %q port", listener)
	}
	return gostConfig{Log: gostLog{Level: "error"}, Services: []gostService{s}}, nil
}

// gostCommand writes gost.json into dir for listener on port and returns
// the command that runs it; the HTTP/2 tests get the http2 service. gost
// has no workers setting: with more proxy cores, GOMAXPROCS follows the
// CPU mask.
func gostCommand(e *env, dir, listener string, port, workers int) ([]string, []string, error) {
	c, err := e.gostConf(listener, port, e.test.h2())
	if err != nil {
		return nil, nil, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("campaign: encode gost.json: %w", err)
	}
	path := filepath.Join(dir, "gost.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return nil, nil, fmt.Errorf("campaign: %w", err)
	}
	return []string{e.gostBin, "-C", path}, nil, nil
}
