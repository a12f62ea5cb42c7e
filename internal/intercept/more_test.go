package intercept_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestInterceptWebSocket checks a WebSocket inside an intercepted
// tunnel: the upgrade goes to the TLS origin through the exchange, and
// messages flow both ways, a large one too.
func TestInterceptWebSocket(t *testing.T) {
	cert, roots := proxytest.SelfSigned(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	e := newEnv(t, envConfig{rules: []intercept.Rule{{Name: "ws", Match: acl.Rule{Hosts: []string{"localhost"}}}}, roots: roots})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "wss://localhost:"+port+"/echo", &websocket.DialOptions{HTTPClient: e.client(t, false, "")})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != e.caCert.Subject.CommonName {
		t.Fatal("the WebSocket's tunnel was not intercepted")
	}
	for _, msg := range [][]byte{[]byte("hello inside"), bytes.Repeat([]byte{1, 2, 3, 0xff}, 100000)} {
		if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "bye")
	found := false
	for _, r := range e.records(t, 2) {
		if r.Protocol == "websocket" && r.Intercepted && r.Status == 101 && strings.HasPrefix(r.Target, "https://localhost:"+port+"/echo") {
			found = true
		}
	}
	if !found {
		t.Errorf("no intercepted websocket record:\n%s", e.log.String())
	}
}

// TestInterceptSOCKSAndUsers checks interception of a SOCKS5 CONNECT and
// of an authenticated CONNECT: the requests inside are the tunnel's
// user's (a rule for another user does not intercept it), and a request
// inside for another host than the tunnel's is answered 421.
func TestInterceptSOCKSAndUsers(t *testing.T) {
	o := newOrigin(t, nil)
	rules := []intercept.Rule{{Name: "alice", Match: acl.Rule{Users: []string{"alice"}}}}
	e := newEnv(t, envConfig{rules: rules, roots: o.roots, users: map[string]string{"alice": "pw", "bob": "pw"}})
	alice := e.client(t, false, "alice")
	resp, body := get(t, alice, o.url+"/a")
	if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].Issuer.CommonName != e.caCert.Subject.CommonName {
		t.Fatalf("alice: %d %q, want 200 through interception", resp.StatusCode, body)
	}
	// Another host in the Host field, inside alice's tunnel: 421.
	if resp, _ := get(t, alice, o.url+"/b", "Host", "other.example"); resp.StatusCode != 421 {
		t.Errorf("a request for another host inside the tunnel: %d, want 421", resp.StatusCode)
	}
	bob := e.client(t, false, "bob")
	bob.Transport.(*http.Transport).TLSClientConfig.RootCAs = o.roots
	if resp, _ := get(t, bob, o.url+"/c"); resp.StatusCode != 200 {
		t.Errorf("bob's tunnel, which no rule names: %d", resp.StatusCode)
	}
	users := map[string]int{}
	misdirected := 0
	for _, r := range e.records(t, 3) {
		if r.Intercepted && r.Method == "GET" {
			users[r.User]++
		}
		if r.Reason == "misdirected" && r.Status == 421 {
			misdirected++
		}
	}
	if users["alice"] != 2 || users["bob"] != 0 || misdirected != 1 {
		t.Errorf("intercepted requests by user %v, %d misdirected:\n%s", users, misdirected, e.log.String())
	}

	s := newEnv(t, envConfig{socks: true, roots: o.roots,
		rules: []intercept.Rule{{Name: "socks", Match: acl.Rule{Protocols: []string{"socks5"}}}}})
	d, err := proxy.SOCKS5("tcp", s.proxy, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext, TLSClientConfig: &tls.Config{RootCAs: s.ca}}
	t.Cleanup(tr.CloseIdleConnections)
	resp, body = get(t, &http.Client{Transport: tr, Timeout: 10 * time.Second}, o.url+"/socks")
	if resp.StatusCode != 200 || !strings.Contains(body, "path=/socks") {
		t.Fatalf("through SOCKS5: %d %q", resp.StatusCode, body)
	}
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != s.caCert.Subject.CommonName {
		t.Error("the SOCKS5 tunnel was not intercepted")
	}
}

// writeSplit writes p, which begins with a TLS handshake record (the
// ClientHello), to c with that record re-framed in records of one byte
// of payload each, one write per byte.
func writeSplit(c net.Conn, p []byte) (int, error) {
	n := int(binary.BigEndian.Uint16(p[3:5]))
	for _, b := range p[5 : 5+n] {
		for _, one := range []byte{0x16, p[1], p[2], 0, 1, b} {
			if _, err := c.Write([]byte{one}); err != nil {
				return 0, err
			}
		}
	}
	if rest := p[5+n:]; len(rest) > 0 {
		if _, err := c.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// TestSplitHello checks that a ClientHello sent in one-byte records, a
// byte at a time, is read, replayed to rustle's TLS server and
// intercepted.
func TestSplitHello(t *testing.T) {
	o := newOrigin(t, nil)
	e := newEnv(t, envConfig{rules: []intercept.Rule{{Name: "all", Match: acl.Rule{Hosts: []string{"localhost"}}}}, roots: o.roots})
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: e.proxy}),
		TLSClientConfig: &tls.Config{RootCAs: e.ca},
		// The CONNECT's head is the connection's first write, which
		// passes; the hello is split.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &helloSplitter{Conn: c}, nil
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	resp, body := get(t, &http.Client{Transport: tr, Timeout: 20 * time.Second}, o.url+"/split")
	if resp.StatusCode != 200 || !strings.Contains(body, "path=/split") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != e.caCert.Subject.CommonName {
		t.Error("not intercepted")
	}
}

// helloSplitter splits the first write that is a TLS handshake record
// (see writeSplit); others pass.
type helloSplitter struct {
	net.Conn
	done bool
}

func (c *helloSplitter) Write(p []byte) (int, error) {
	if c.done || len(p) < 5 || p[0] != 0x16 {
		return c.Conn.Write(p)
	}
	c.done = true
	return writeSplit(c.Conn, p)
}

// TestSmallCache checks interception with a cache of one leaf while
// tunnels alternate between two names: each is minted anew, counted as
// evicted, and served.
func TestSmallCache(t *testing.T) {
	o := newOrigin(t, nil)
	_, port, _ := net.SplitHostPort(o.host)
	e := newEnv(t, envConfig{rules: []intercept.Rule{{Name: "all"}}, roots: o.roots, cacheSize: 1})
	for i := range 4 {
		host := "localhost"
		if i%2 == 1 {
			host = "127.0.0.1"
		}
		c := e.client(t, false, "")
		resp, _ := get(t, c, "https://"+host+":"+port+"/")
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", host, resp.StatusCode)
		}
	}
	if s := e.certs.Stats(); s.Cached != 1 || s.Evicted != 3 || s.Misses != 4 {
		t.Errorf("cache stats %+v, want 1 cached, 3 evicted, 4 minted", s)
	}
}
