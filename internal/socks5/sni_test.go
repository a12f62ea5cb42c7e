package socks5

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// tlsOrigin starts a Go TLS origin on 127.0.0.1 that answers "tls
// origin" and counts the connections it accepts.
func tlsOrigin(t *testing.T) (port int, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls origin")
	}))
	o.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	o.StartTLS()
	t.Cleanup(o.Close)
	return o.Listener.Addr().(*net.TCPAddr).Port, conns
}

// TestSNICheckCurl runs curl through a SOCKS5 listener whose SNI check
// is match, to a Go TLS origin: --socks5-hostname sends the name its
// hello names, --socks5 the address (a tunnel to an address passes with
// any name when no rule refuses it); both get through, and the access
// log names the hello's server. A Go client that fronts another name
// through the same listener is cut before the origin sees a connection.
func TestSNICheckCurl(t *testing.T) {
	port, conns := tlsOrigin(t)
	al, out := newAccessLog(t)
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{AccessLog: al, SNI: sni.Match})
	srv := startServer(t, "tcp4", pol, Config{})
	url := fmt.Sprintf("https://localhost:%d/", port)
	for _, args := range [][]string{
		{"--socks5-hostname", srv.addr, "-k", url},
		{"--socks5", srv.addr, "--ipv4", "-k", url},
	} {
		got, err := curl(t, args...)
		if err != nil || got != "tls origin" {
			t.Fatalf("curl %s: %q %v", strings.Join(args, " "), got, err)
		}
	}
	before := conns.Load()
	d, err := proxy.SOCKS5("tcp", srv.addr, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial("tcp", fmt.Sprintf("localhost:%d", port))
	if err != nil {
		t.Fatalf("SOCKS5 CONNECT: %v", err)
	}
	defer c.Close()
	fronted := tls.Client(c, &tls.Config{ServerName: "blocked.example", InsecureSkipVerify: true})
	fronted.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
	if err := fronted.Handshake(); err == nil {
		t.Fatal("a fronted hello got through a SOCKS5 tunnel under match")
	}
	if n := conns.Load() - before; n != 0 {
		t.Errorf("the origin got %d connections for a fronted tunnel, want none", n)
	}
	proxytest.WaitFor(t, "3 access log records", func() bool { return strings.Count(out.String(), "\n") >= 3 })
	// Tunnels are logged as they end, in no set order.
	byTarget := map[string]map[string]any{}
	for _, r := range records(t, out) {
		key, _ := r["target"].(string)
		if r["reason"] != nil {
			key = "refused"
		}
		byTarget[key] = r
	}
	for key, want := range map[string]map[string]any{
		fmt.Sprintf("localhost:%d", port): {"sni": "localhost", "status": float64(0)},
		fmt.Sprintf("127.0.0.1:%d", port): {"sni": "localhost", "status": float64(0)},
		"refused":                         {"sni": "blocked.example", "reason": "sni-mismatch", "status": float64(0)},
	} {
		if byTarget[key] == nil {
			t.Errorf("no record for %s: %v", key, byTarget)
			continue
		}
		checkRecord(t, byTarget[key], want)
	}
}
