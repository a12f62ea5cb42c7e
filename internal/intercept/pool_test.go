package intercept_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// connOrigin is a Go HTTPS origin for localhost that answers each
// request with the number of the TCP connection it came on ("conn=N",
// from 1 in order of acceptance), as an origin that ties state to a
// connection (NTLM) would tell them apart.
func connOrigin(t *testing.T, protos []string) *tlsOrigin {
	t.Helper()
	type connKey struct{}
	var accepted atomic.Int64
	cert, roots := proxytest.SelfSigned(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "conn=%d", r.Context().Value(connKey{}))
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, accepted.Add(1))
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: protos}
	if protos == nil {
		srv.EnableHTTP2 = true
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return &tlsOrigin{srv: srv, roots: roots, url: "https://localhost:" + port, host: "localhost:" + port}
}

// TestInterceptPoolPerIdentity: the origin connection an intercepted
// tunnel's requests used goes to the upstream pool when the tunnel ends
// for the same identity only: a later tunnel of another user (or, without
// a user, from another client address) to the name gets a connection of
// its own, never the first one's (an origin that authenticates the
// connection, NTLM or Negotiate, would serve it as the first user),
// while a later tunnel of the same identity reuses its own. For each
// pairing of the client's protocol to rustle and the origin's.
func TestInterceptPoolPerIdentity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		clientH2 bool
		origin   []string // the origin's ALPN protocols; nil = h2 and http/1.1
		anon     bool     // no users: clients told apart by address
	}{
		{name: "http1-to-http1", origin: []string{"http/1.1"}},
		{name: "http1-to-h2"},
		{name: "h2-to-http1", clientH2: true, origin: []string{"http/1.1"}},
		{name: "h2-to-h2", clientH2: true},
		{name: "anonymous-http1-to-h2", anon: true},
		{name: "anonymous-h2-to-http1", anon: true, clientH2: true, origin: []string{"http/1.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := connOrigin(t, tc.origin)
			cfg := envConfig{
				rules: []intercept.Rule{{Name: "api", Match: acl.Rule{Hosts: []string{"localhost"}}}},
				roots: o.roots,
				pool:  true,
			}
			if !tc.anon {
				cfg.users = map[string]string{"alice": "pw", "bob": "pw"}
			}
			e := newEnv(t, cfg)
			// Each identity's tunnel: a user's, or one from a client
			// address of its own.
			first, second := "alice", "bob"
			if tc.anon {
				first, second = "127.0.0.1", "127.0.0.2"
			}
			conns := map[string]string{}
			tunnel := func(who string, pooled int) string {
				t.Helper()
				c := e.identityClient(t, tc.clientH2, who, tc.anon)
				resp, body := get(t, c, o.url+"/whoami")
				if resp.StatusCode != 200 || !strings.HasPrefix(body, "conn=") {
					t.Fatalf("GET as %s: %d %q", who, resp.StatusCode, body)
				}
				for other, conn := range conns {
					if other != who && conn == body {
						t.Fatalf("%s's tunnel reused %s's origin connection (%s)", who, other, body)
					}
				}
				c.CloseIdleConnections()
				// The tunnel's end hands its origin connection to the
				// pool, next to those kept before.
				proxytest.WaitFor(t, fmt.Sprintf("%d pooled origin connections", pooled), func() bool {
					return e.pool.Len() == pooled
				})
				return body
			}
			conns[first] = tunnel(first, 1)
			conns[second] = tunnel(second, 2)
			for _, who := range []string{first, second, first} {
				if got := tunnel(who, 2); got != conns[who] {
					t.Errorf("%s's later tunnel got origin %s, want its own pooled %s", who, got, conns[who])
				}
			}
		})
	}
}

// identityClient returns a Go client through the env's proxy that trusts
// the interception CA, as who: the proxy user who, or with anon a client
// without one from the loopback address who.
func (e *env) identityClient(t *testing.T, h2 bool, who string, anon bool) *http.Client {
	t.Helper()
	if !anon {
		return e.client(t, h2, who)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(who)}, Timeout: 5 * time.Second}
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: e.proxy}), DialContext: d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: e.ca}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// connAuthOrigin is a Go HTTPS origin for localhost that authenticates
// connections as NTLM does: "Authorization: NTLM negotiate:USER" is
// answered 401 with a challenge, and "NTLM authenticate:USER" on the same
// connection then authenticates the connection as USER, whose later
// requests need no Authorization ("hello USER"); a request on a
// connection not authenticated is answered 401. closed counts the
// connections that ended.
type connAuthOrigin struct {
	*tlsOrigin
	closed atomic.Int64
}

func newConnAuthOrigin(t *testing.T, protos []string) *connAuthOrigin {
	t.Helper()
	type connKey struct{}
	type connState struct {
		mu            sync.Mutex
		pending, user string
	}
	o := &connAuthOrigin{}
	cert, roots := proxytest.SelfSigned(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := r.Context().Value(connKey{}).(*connState)
		st.mu.Lock()
		defer st.mu.Unlock()
		a := r.Header.Get("Authorization")
		switch {
		case strings.HasPrefix(a, "NTLM negotiate:"):
			st.pending = strings.TrimPrefix(a, "NTLM negotiate:")
			w.Header().Set("WWW-Authenticate", "NTLM challenge")
			w.WriteHeader(http.StatusUnauthorized)
			return
		case strings.HasPrefix(a, "NTLM authenticate:") && st.pending != "" && st.pending == strings.TrimPrefix(a, "NTLM authenticate:"):
			st.user, st.pending = st.pending, ""
		case a != "" || st.user == "":
			w.Header().Set("WWW-Authenticate", "NTLM")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "hello %s", st.user)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, &connState{})
	}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			o.closed.Add(1)
		}
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: protos}
	if protos == nil {
		srv.EnableHTTP2 = true
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	o.tlsOrigin = &tlsOrigin{srv: srv, roots: roots, url: "https://localhost:" + port, host: "localhost:" + port}
	return o
}

// status GETs u with c (with an Authorization value, "" = none) and
// returns the status and body.
func status(t *testing.T, c *http.Client, u, auth string) (int, string) {
	t.Helper()
	var header []string
	if auth != "" {
		header = []string{"Authorization", auth}
	}
	resp, body := get(t, c, u, header...)
	return resp.StatusCode, body
}

// login runs the NTLM-style handshake of user with c: both legs must
// reach the same origin connection.
func login(t *testing.T, c *http.Client, o *connAuthOrigin, user string) {
	t.Helper()
	if st, body := status(t, c, o.url+"/", "NTLM negotiate:"+user); st != 401 {
		t.Fatalf("%s's first leg: %d %q, want the challenge", user, st, body)
	}
	if st, body := status(t, c, o.url+"/", "NTLM authenticate:"+user); st != 200 || body != "hello "+user {
		t.Fatalf("%s's second leg: %d %q, want hello %s (the legs reached different origin connections?)", user, st, body, user)
	}
}

// TestInterceptConnectionAuth: through intercepted tunnels of HTTP/1.1
// clients, an origin that authenticates connections (as NTLM and
// Negotiate do) completes a user's handshake (both legs on the origin
// connection the tunnel's client connection keeps; an HTTP/2 client's
// next stream may start before the previous one's connection is back in
// the pool, so its legs are not bound to one connection and it is not
// tried here) and serves the user's later requests, in that
// tunnel and, once the tunnel ended and its connection was pooled, in the
// user's next tunnel; another user's tunnel never lands on it, so is
// asked to authenticate (401), never served as the first user. After
// intercept.upstream_idle closed an idle client's origin connection, its
// next request reaches a new one, which asks again.
func TestInterceptConnectionAuth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		origin []string
	}{
		{name: "http1-to-http1", origin: []string{"http/1.1"}},
		{name: "http1-to-h2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newConnAuthOrigin(t, tc.origin)
			e := newEnv(t, envConfig{
				rules: []intercept.Rule{{Name: "intranet", Match: acl.Rule{Hosts: []string{"localhost"}}}},
				roots: o.roots,
				pool:  true,
				users: map[string]string{"alice": "pw", "bob": "pw"},
			})
			alice := e.client(t, false, "alice")
			login(t, alice, o, "alice")
			if st, body := status(t, alice, o.url+"/again", ""); st != 200 || body != "hello alice" {
				t.Fatalf("alice's next request in her tunnel: %d %q, want hello alice", st, body)
			}
			alice.CloseIdleConnections()
			proxytest.WaitFor(t, "alice's origin connection pooled", func() bool { return e.pool.Len() == 1 })
			bob := e.client(t, false, "bob")
			if st, body := status(t, bob, o.url+"/", ""); st != 401 {
				t.Fatalf("bob's request without credentials: %d %q, want 401: it reached alice's authenticated connection", st, body)
			}
			login(t, bob, o, "bob")
			bob.CloseIdleConnections()
			proxytest.WaitFor(t, "both origin connections pooled", func() bool { return e.pool.Len() == 2 })
			for _, user := range []string{"alice", "bob"} {
				c := e.client(t, false, user)
				if st, body := status(t, c, o.url+"/later", ""); st != 200 || body != "hello "+user {
					t.Errorf("%s's next tunnel: %d %q, want hello %s on the connection %s authenticated", user, st, body, user, user)
				}
				c.CloseIdleConnections()
			}
		})
	}
	t.Run("upstream-idle", func(t *testing.T) {
		t.Parallel()
		o := newConnAuthOrigin(t, []string{"http/1.1"})
		e := newEnv(t, envConfig{
			rules:        []intercept.Rule{{Name: "intranet", Match: acl.Rule{Hosts: []string{"localhost"}}}},
			roots:        o.roots,
			pool:         true,
			users:        map[string]string{"alice": "pw"},
			upstreamIdle: 2 * time.Second,
		})
		alice := e.client(t, false, "alice")
		login(t, alice, o, "alice")
		proxytest.WaitFor(t, "the idle client's origin connection closed", func() bool { return o.closed.Load() == 1 })
		if st, body := status(t, alice, o.url+"/after-idle", ""); st != 401 {
			t.Fatalf("alice's request after upstream_idle: %d %q, want 401 from a new origin connection", st, body)
		}
		login(t, alice, o, "alice")
	})
}
