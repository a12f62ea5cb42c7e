package h3

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// lockedBuffer is an access log's output, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestForward sends GETs with quic-go's HTTP/3 client through the proxy to
// an HTTP/1.1 origin, on one connection: each request is authorized on its
// own (407 per request), and a granted one reaches the origin without the
// proxy's credentials or hop-by-hop fields.
func TestForward(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "hello", "Connection: keep-alive, X-Hop", "X-Hop: 1", "X-End: 2"))
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass},
	}))
	cc := p.client(t)
	tests := []struct {
		name   string
		authz  string
		status int
		body   string
	}{
		{"no credentials", "", 407, "rustle: proxy authentication required\n"},
		{"right credentials", basic(testUser, testPass), 200, "hello"},
		{"wrong password", basic(testUser, "nope"), 407, "rustle: proxy authentication required\n"},
		{"right again", basic(testUser, testPass), 200, "hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, cc, o.URL("/a?b=1"), tt.authz)
			if resp.StatusCode != tt.status || string(body) != tt.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
			}
			if tt.status == 407 && resp.Header.Get("Proxy-Authenticate") == "" {
				t.Error("407 without Proxy-Authenticate")
			}
			if tt.status == 200 {
				if resp.Header.Get("X-Hop") != "" || resp.Header.Get("X-End") != "2" {
					t.Errorf("response fields: X-Hop %q (listed in Connection), X-End %q", resp.Header.Get("X-Hop"), resp.Header.Get("X-End"))
				}
			}
		})
	}
	reqs := o.Requests()
	if len(reqs) != 2 {
		t.Fatalf("origin got %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if r.Target != "/a?b=1" || r.Method != "GET" {
			t.Errorf("origin got %s %s", r.Method, r.Target)
		}
		if v := r.Header.Get("Proxy-Authorization"); v != "" {
			t.Errorf("origin got Proxy-Authorization %q", v)
		}
	}
}

// connectStream opens a CONNECT stream to target through cc and returns
// the response and the stream.
func connectStream(t *testing.T, cc interface {
	RoundTrip(*http.Request) (*http.Response, error)
}, target, authz string) (*http.Response, io.WriteCloser) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodConnect, "", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.URL, req.Host = &url.URL{Host: target}, target
	if authz != "" {
		req.Header.Set("Proxy-Authorization", authz)
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	t.Cleanup(func() { pw.Close(); resp.Body.Close() })
	return resp, pw
}

// TestConnect opens CONNECT tunnels with quic-go's HTTP/3 client to an
// echo server: bytes go both ways, the stream's FIN ends the tunnel, and
// the access log has one "h3" record per request with its status.
func TestConnect(t *testing.T) {
	var out lockedBuffer
	al, err := accesslog.New(accesslog.Config{Format: accesslog.FormatJSON, Writer: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass}, AccessLog: al, Listener: "h3",
	}))
	cc := p.client(t)

	resp, _ := connectStream(t, cc, echo.Addr, basic(testUser, "wrong"))
	if resp.StatusCode != 407 {
		t.Fatalf("CONNECT with a wrong password: %d, want 407", resp.StatusCode)
	}
	resp, pw := connectStream(t, cc, echo.Addr, basic(testUser, testPass))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d, want 200", resp.StatusCode)
	}
	io.WriteString(pw, "ping!")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "ping!" {
		t.Fatalf("tunnel echo: %q %v", buf, err)
	}
	pw.Close() // FIN: the echo server sees EOF and closes, which ends the tunnel
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after FIN: %q %v", rest, err)
	}
	proxytest.WaitFor(t, "the tunnel's access log record", func() bool {
		return strings.Count(out.String(), "\n") >= 2
	})
	log := out.String()
	for _, want := range []string{`"protocol":"h3"`, `"method":"CONNECT"`, `"status":407`, `"status":200`,
		`"bytes_up":5`, `"bytes_down":5`, `"user":"alice"`} {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %s:\n%s", want, log)
		}
	}
}

// TestConnectDenied checks that the access rules decide CONNECT over HTTP/3
// as any other: a rule denying the port answers 403 and dials nothing.
func TestConnectDenied(t *testing.T) {
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Default: acl.Allow,
		Rules:   []acl.Rule{{Name: "no-connect", Action: acl.Deny, Protocols: []string{"connect"}}},
	}))
	resp, _ := connectStream(t, p.client(t), echo.Addr, "")
	if resp.StatusCode != 403 {
		t.Fatalf("denied CONNECT: %d, want 403", resp.StatusCode)
	}
	if n := echo.Conns(); n != 0 {
		t.Errorf("the echo server got %d connections, want 0", n)
	}
}
