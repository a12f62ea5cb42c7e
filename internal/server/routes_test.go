package server

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// routeRecord is what the route tests read of an access log record.
type routeRecord struct {
	Protocol string `json:"protocol"`
	Target   string `json:"target"`
	Status   int    `json:"status"`
	Upstream string `json:"upstream"`
	Reason   string `json:"reason"`
	Route    string `json:"route"`
	Parent   string `json:"parent"`
}

func routeRecords(t *testing.T, log *logBuffer) []routeRecord {
	t.Helper()
	var recs []routeRecord
	for line := range strings.SplitSeq(strings.TrimSpace(log.String()), "\n") {
		if line == "" {
			continue
		}
		var r routeRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// curl runs curl (required under CI) with args and returns its output.
func curl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := proxytest.RequireTool(t, "curl", "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args = append([]string{"-sS", "--fail", "--max-time", "15", "--noproxy", ""}, args...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// startRustleParent starts a rustle that serves as a parent: an https
// listener with user parent:ppw (ca is its CA's PEM file) and a socks5
// listener with the same user.
func startRustleParent(t *testing.T) (httpsAddr, socksAddr, ca string, access *logBuffer) {
	t.Helper()
	tl, _ := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "parent", Password: "ppw"}}
	cfg.Listen = []config.Listener{
		{Name: "ptls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, ALPN: []string{"http/1.1"}},
		{Name: "psocks", Address: "127.0.0.1:0", Protocol: "socks5"},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	access = &logBuffer{}
	_, addrs := startLogged(t, cfg, nil, access)
	return addrs["ptls"], addrs["psocks"], filepath.Join(filepath.Dir(tl.Cert), tlsconf.CAFile), access
}

// routeOrigins starts a plain and a TLS HTTP origin on loopback and
// returns their URLs and a PEM file of the TLS one's certificate.
func routeOrigins(t *testing.T) (plain, tlsURL, caFile string) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin "+r.Method+" "+r.URL.Path)
	})
	o := httptest.NewServer(h)
	t.Cleanup(o.Close)
	to := httptest.NewTLSServer(h)
	t.Cleanup(to.Close)
	caFile = filepath.Join(t.TempDir(), "origin.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: to.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return o.URL, to.URL, caFile
}

// TestRoutesRealParents runs rustle with -F (AddForward) through each
// kind of parent, started by the test: Squid as an HTTP parent with Basic
// auth, Dante as a socks5 and a socks5h parent, rustle itself as an
// HTTPS parent and as a SOCKS5 parent with username auth. curl drives a
// plain HTTP request and a CONNECT on rustle's plain port and a SOCKS5
// CONNECT (--socks5-hostname); each reaches the origin, the access log
// names the route and the parent, and rustle's parent metrics count it.
func TestRoutesRealParents(t *testing.T) {
	plain, tlsURL, originCA := routeOrigins(t)
	squid := proxytest.StartSquid(t)
	dante := proxytest.StartDante(t)
	pHTTPS, pSOCKS, pCA, pAccess := startRustleParent(t)
	tests := []struct {
		name, url string
		ca        string
		tcp       bool // the tunnel ends in a TCP connection to the parent: the upstream logged is the parent's
	}{
		{"squid", "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr, "", true},
		{"dante socks5", "socks5://" + dante.Addr, "", true},
		{"dante socks5h", "socks5h://" + dante.Addr, "", true},
		{"rustle https", "https://parent:ppw@" + pHTTPS, pCA, false},
		{"rustle socks5 with auth", "socks5://parent:ppw@" + pSOCKS, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Workers = 1
			cfg.AllowPrivate = []string{"127.0.0.0/8"}
			cfg.Listen = []config.Listener{
				{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
				{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
			}
			if err := cfg.AddForward(tt.url); err != nil {
				t.Fatal(err)
			}
			cfg.SetDefaults()
			cfg.Parents[0].CAFile = tt.ca
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			m := metrics.New(metrics.Config{})
			access := &logBuffer{}
			_, addrs := startLogged(t, cfg, nil, access, WithMetrics(m))
			pBefore := strings.Count(pAccess.String(), "\n")

			asks := []struct {
				name string
				args []string
				want string
			}{
				{"plain GET", []string{"-x", "http://" + addrs["plain"], plain + "/get"}, "origin GET /get"},
				{"CONNECT", []string{"-x", "http://" + addrs["plain"], "--cacert", originCA, tlsURL + "/connect"}, "origin GET /connect"},
				{"SOCKS5", []string{"--socks5-hostname", addrs["socks"], "--cacert", originCA, tlsURL + "/socks"}, "origin GET /socks"},
			}
			if !tt.tcp {
				// An https parent takes tunnels only, for now: a plain
				// request is refused with the reason.
				asks[0].want = "parent proxy F (https) takes only tunnels (CONNECT, SOCKS) for now\n502"
				asks[0].args = append([]string{"-w", "%{http_code}", "--no-fail"}, asks[0].args...)
			}
			for _, a := range asks {
				out, err := curl(t, a.args...)
				if err != nil || !strings.HasSuffix(out, a.want) {
					t.Errorf("%s: curl = %q, %v, want %q\nsquid: %s\ndante: %s", a.name, out, err, a.want, squid.Output(), dante.Output())
				}
			}
			var recs []routeRecord
			proxytest.WaitFor(t, "three access log records", func() bool {
				recs = routeRecords(t, access)
				return len(recs) >= 3
			})
			for _, r := range recs {
				refused := !tt.tcp && r.Protocol == "http" && r.Status == 502 && r.Reason == "parent-refused"
				if r.Route != config.ForwardName || r.Parent != config.ForwardName || !(r.Status == 200 || r.Protocol == "socks5" && r.Status == 0 || refused) {
					t.Errorf("record %+v: want route and parent %q", r, config.ForwardName)
				}
				if tt.tcp {
					if !strings.HasSuffix(tt.url, "@"+r.Upstream) && !strings.HasSuffix(tt.url, "//"+r.Upstream) {
						t.Errorf("record %+v: upstream is not the parent %s", r, tt.url)
					}
				}
			}
			wantDials := 3.0
			if !tt.tcp {
				wantDials = 2
			}
			if got := proxytest.Metric(t, m, "rustle_parent_requests_total", "parent", config.ForwardName); got != wantDials {
				t.Errorf("rustle_parent_requests_total = %v, want %v", got, wantDials)
			}
			if got := proxytest.Metric(t, m, "rustle_parent_up", "parent", config.ForwardName); got != 1 {
				t.Errorf("rustle_parent_up = %v, want 1", got)
			}
			if strings.HasPrefix(tt.name, "rustle") {
				// The parent logs what went through it: the tunnels,
				// and the plain request unless refused before (https).
				want := 3
				if !tt.tcp {
					want = 2
				}
				proxytest.WaitFor(t, "the parent's records", func() bool {
					return strings.Count(pAccess.String(), "\n")-pBefore >= want
				})
				if got := strings.Count(pAccess.String(), "\n") - pBefore; got != want {
					t.Errorf("the parent logged %d records, want %d", got, want)
				}
			}
		})
	}
}
