package gate_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, 5*time.Second,
		"rustle/internal/gate.", "rustle/internal/tunnel.", "rustle/internal/proxytest."))
}

// users are the users of the tests' policies.
var users = map[string]string{"alice": "pw", "bob": "pw2"}

// basicAuth returns a Proxy-Authorization value for user and pass.
func basicAuth(user, pass string) []byte {
	return []byte("Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
}

// connectReq is a CONNECT to host:443 with the credentials authz.
func connectReq(host string, authz []byte) *gate.Request {
	return &gate.Request{
		Protocol: acl.Connect, Log: accesslog.ProtoConnect, Method: "CONNECT",
		Host: host, Port: 443, Target: []byte(host + ":443"), Authorization: authz,
	}
}

// connectTo is a CONNECT to addr, host:port, with the credentials authz.
func connectTo(t testing.TB, addr string, authz []byte) *gate.Request {
	t.Helper()
	host, port, err := dialer.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	r := connectReq(host, authz)
	r.Port, r.Target = port, []byte(addr)
	return r
}

// observed is a policy's metrics and access log.
type observed struct {
	m   *metrics.Metrics
	out *proxytest.LogBuffer
	al  *accesslog.Logger
}

// observe returns metrics and a JSON access log for a policy, and sets
// them in cfg.
func observe(t *testing.T, cfg *proxytest.PolicyConfig) *observed {
	t.Helper()
	o := &observed{m: metrics.New(metrics.Config{PerUser: true}), out: &proxytest.LogBuffer{}}
	al := proxytest.JSONAccessLog(t, o.out)
	o.al = al
	cfg.Listener = "test"
	cfg.Metrics = o.m.Listener("test", "http")
	cfg.UserMetrics = o.m.User
	cfg.AccessLog = al
	return o
}

// records waits for n access log records and returns them.
func (o *observed) records(t *testing.T, n int) []map[string]any {
	t.Helper()
	return proxytest.JSONRecords[map[string]any](t, o.out, n)
}

// certState returns the state of a TLS connection whose client presented
// a certificate, verified, with the common name cn ("" = none).
func certState(t *testing.T, cn string) tls.ConnectionState {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"test"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.ConnectionState{
		HandshakeComplete: true,
		PeerCertificates:  []*x509.Certificate{cert},
		VerifiedChains:    [][]*x509.Certificate{{cert}},
	}
}

func TestKind(t *testing.T) {
	tests := []struct {
		kind   gate.Kind
		status int
		name   string
		reason string // a word of the reason; "" = no reason
	}{
		{gate.OK, 200, "ok", ""},
		{gate.NeedAuth, 407, "need-auth", "authentication"},
		{gate.CoolingDown, 429, "cooling-down", "failed authentications"},
		{gate.UserLimit, 429, "user-limit", "connections"},
		{gate.Denied, 403, "denied", "policy"},
		{gate.Forbidden, 403, "forbidden", "destination"},
		{gate.Unreachable, 502, "unreachable", "unreachable"},
		{gate.TimedOut, 504, "timed-out", "timed out"},
		{gate.Overloaded, 503, "overloaded", "connections"},
		{gate.AuthUnavailable, 503, "auth-unavailable", "unavailable"},
		{gate.Kind(200), 200, "unknown", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.kind.Status(); got != tt.status {
				t.Errorf("Status() = %d, want %d", got, tt.status)
			}
			if got := tt.kind.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			got := tt.kind.Reason()
			if tt.reason == "" && got != "" || !strings.Contains(got, tt.reason) {
				t.Errorf("Reason() = %q, want one with %q", got, tt.reason)
			}
		})
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestDialKind(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name string
		err  error
		want gate.Kind
	}{
		{"nil", nil, gate.OK},
		{"forbidden", &dialer.Error{Addr: "10.0.0.1:80", Forbidden: true, Err: errors.New("private")}, gate.Forbidden},
		{"forbidden, wrapped", fmt.Errorf("x: %w", &dialer.Error{Forbidden: true, Err: errors.New("own")}), gate.Forbidden},
		{"timeout", &dialer.Error{Addr: "192.0.2.1:80", Timeout: true, Err: context.DeadlineExceeded}, gate.TimedOut},
		{"ETIMEDOUT", &dialer.Error{Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}, gate.TimedOut},
		{"deadline", context.DeadlineExceeded, gate.TimedOut},
		{"net timeout", timeoutErr{}, gate.TimedOut},
		{"refused", &dialer.Error{Addr: "127.0.0.1:1", Err: refused}, gate.Unreachable},
		{"plain ECONNREFUSED", refused, gate.Unreachable},
		{"other", errors.New("no such host"), gate.Unreachable},
		{"resolution timed out", &dialer.Error{Addr: "x.test:80", DNS: true, Err: &net.DNSError{Err: "i/o timeout", Name: "x.test", IsTimeout: true}},
			gate.Unreachable},
		{"no source", &dialer.Error{Addr: "x.test:80", Err: fmt.Errorf("%w: v6 only", dialer.ErrNoSource)}, gate.Unreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gate.DialKind(tt.err); got != tt.want {
				t.Errorf("DialKind(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}

	// A real refused dial through a grant.
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{})
	var g gate.Grant
	s := newSession(t, p)
	if k := s.Authorize(connectTo(t, proxytest.ClosedPort(t), nil), &g); k != gate.OK {
		t.Fatalf("Authorize = %v", k)
	}
	c, err := g.Dial(context.Background())
	if err == nil {
		c.Close()
		t.Fatal("dial to a closed port succeeded")
	}
	if k := gate.DialKind(err); k != gate.Unreachable {
		t.Errorf("DialKind(%v) = %v, want unreachable", err, k)
	}
	g.Finish(0, 0)
}

func TestAuthorize(t *testing.T) {
	coolDown := &limits.Config{AuthFailures: 3, AuthFailuresPerAddress: 4, AuthWindow: time.Minute, AuthCooldown: time.Minute}
	rules := []acl.Rule{
		{Name: "no-blocked", Action: acl.Deny, Hosts: []string{"blocked.example"}},
		{Name: "rest", Action: acl.Allow},
	}
	const secret = "n0pe-secret"
	wrong := basicAuth("alice", secret)
	// fail makes n failed authentications as user from the tests' client
	// address, each on a connection of its own, opened after s.
	fail := func(n int, user string) func(t *testing.T, p *gate.Policy, s *gate.Session) {
		return func(t *testing.T, p *gate.Policy, _ *gate.Session) {
			for i := range n {
				var g gate.Grant
				if k := newSession(t, p).Authorize(connectReq("example.com", basicAuth(user, secret)), &g); k != gate.NeedAuth && k != gate.CoolingDown {
					t.Fatalf("failure %d: %v, want need-auth or cooling-down", i+1, k)
				}
				g.Finish(0, 0)
			}
		}
	}
	// failNames fails once as each of n names.
	failNames := func(n int) func(t *testing.T, p *gate.Policy, s *gate.Session) {
		return func(t *testing.T, p *gate.Policy, s *gate.Session) {
			for i := range n {
				fail(1, fmt.Sprintf("guess%d", i))(t, p, s)
			}
		}
	}
	tests := []struct {
		name   string
		cfg    proxytest.PolicyConfig
		before func(t *testing.T, p *gate.Policy, s *gate.Session)
		cert   string // a verified client certificate's common name; "-" = none
		host   string // "" = example.com
		authz  []byte
		want   gate.Kind
		user   string
		rule   string
		retry  bool   // RetryAfter is set
		reason string // the access log record's reason
		logged string // the access log record's user when not user: the name tried
		// The auth failures, challenges and ACL denials counted in all.
		authFailed, challenged, denied float64
	}{
		{name: "no auth", cert: "-", want: gate.OK},
		{name: "no auth ignores credentials", cert: "-", authz: basicAuth("alice", "pw"), want: gate.OK},
		{name: "need auth without credentials: a challenge", cfg: proxytest.PolicyConfig{Users: users}, cert: "-",
			want: gate.NeedAuth, challenged: 1, reason: "auth-missing"},
		{name: "need auth with a wrong password: a failure naming the user tried", cfg: proxytest.PolicyConfig{Users: users}, cert: "-",
			authz: wrong, want: gate.NeedAuth, authFailed: 1, reason: "auth-failed", logged: "alice"},
		{name: "an unknown user tried", cfg: proxytest.PolicyConfig{Users: users}, cert: "-",
			authz: basicAuth("mallory", secret), want: gate.NeedAuth, authFailed: 1, reason: "auth-failed", logged: "mallory"},
		{name: "need auth with another scheme: nobody tried", cfg: proxytest.PolicyConfig{Users: users}, cert: "-",
			authz: []byte("Bearer abc"), want: gate.NeedAuth, authFailed: 1, reason: "auth-failed"},
		{name: "need auth with an undecodable value: nobody tried", cfg: proxytest.PolicyConfig{Users: users}, cert: "-",
			authz: []byte("Basic !!!"), want: gate.NeedAuth, authFailed: 1, reason: "auth-failed"},
		{name: "cooling down after 3 failures", cfg: proxytest.PolicyConfig{Users: users, Limits: coolDown}, cert: "-",
			before: func(t *testing.T, p *gate.Policy, s *gate.Session) {
				for i := range 2 {
					var g gate.Grant
					if k := s.Authorize(connectReq("example.com", wrong), &g); k != gate.NeedAuth {
						t.Fatalf("failure %d: %v, want need-auth", i+1, k)
					}
					g.Finish(0, 0)
				}
			},
			authz: wrong, want: gate.CoolingDown, retry: true, authFailed: 3, reason: "cooling-down", logged: "alice"},
		{name: "cooling down: the right password refused unchecked, on a connection opened before",
			cfg: proxytest.PolicyConfig{Users: users, Limits: coolDown}, cert: "-", before: fail(3, "alice"),
			authz: basicAuth("alice", "pw"), want: gate.CoolingDown, retry: true, authFailed: 3, reason: "cooling-down", logged: "alice"},
		{name: "cooling down: a guess on a connection opened before is not checked",
			cfg: proxytest.PolicyConfig{Users: users, Limits: coolDown}, cert: "-", before: fail(3, "alice"),
			authz: basicAuth("alice", "guess"), want: gate.CoolingDown, retry: true, authFailed: 3, reason: "cooling-down", logged: "alice"},
		{name: "one name cooling down leaves another from the same address",
			cfg: proxytest.PolicyConfig{Users: users, Limits: coolDown}, cert: "-", before: fail(3, "alice"),
			authz: basicAuth("bob", "pw2"), want: gate.OK, user: "bob", authFailed: 3},
		{name: "a memoised verdict stands while its name cools down",
			cfg: proxytest.PolicyConfig{Users: users, Limits: coolDown}, cert: "-",
			before: func(t *testing.T, p *gate.Policy, s *gate.Session) {
				var g gate.Grant
				if k := s.Authorize(connectReq("example.com", basicAuth("alice", "pw")), &g); k != gate.OK {
					t.Fatalf("alice: %v", k)
				}
				g.Finish(0, 0)
				fail(3, "alice")(t, p, s)
			},
			authz: basicAuth("alice", "pw"), want: gate.OK, user: "alice", authFailed: 3},
		{name: "many names from one address cool the address down",
			cfg: proxytest.PolicyConfig{Users: users, Limits: coolDown}, cert: "-", before: failNames(4),
			authz: basicAuth("bob", "pw2"), want: gate.CoolingDown, retry: true, authFailed: 4, reason: "cooling-down", logged: "bob"},
		{name: "user limit", cfg: proxytest.PolicyConfig{Users: users, Limits: &limits.Config{MaxConnsPerUser: 1}}, cert: "-",
			before: func(t *testing.T, p *gate.Policy, _ *gate.Session) {
				other := newSession(t, p)
				var g gate.Grant
				if k := other.Authorize(connectReq("example.com", basicAuth("alice", "pw")), &g); k != gate.OK {
					t.Fatalf("the other connection: %v", k)
				}
				g.Finish(0, 0) // the connection keeps the count
			},
			authz: basicAuth("alice", "pw"), want: gate.UserLimit, user: "alice", reason: "user-limit"},
		{name: "a failed name is no user of the limiter", cfg: proxytest.PolicyConfig{Users: users, Limits: &limits.Config{MaxConnsPerUser: 1}}, cert: "-",
			before: func(t *testing.T, p *gate.Policy, s *gate.Session) {
				var g gate.Grant
				if k := s.Authorize(connectReq("example.com", basicAuth("bob", secret)), &g); k != gate.NeedAuth {
					t.Fatalf("bob's wrong password: %v", k)
				}
				g.Finish(0, 0)
				if !p.Limiter.UserConn("bob") {
					t.Fatal("bob's failure counted as a connection of his")
				}
				p.Limiter.UserDone("bob")
			},
			authz: basicAuth("bob", "pw2"), want: gate.OK, user: "bob", authFailed: 1},
		{name: "denied by a rule", cfg: proxytest.PolicyConfig{Users: users, Rules: rules}, cert: "-",
			host: "blocked.example", authz: basicAuth("alice", "pw"), want: gate.Denied, user: "alice", rule: "no-blocked", denied: 1, reason: "denied"},
		{name: "allowed by a rule", cfg: proxytest.PolicyConfig{Users: users, Rules: rules}, cert: "-",
			authz: basicAuth("alice", "pw"), want: gate.OK, user: "alice", rule: "rest"},
		{name: "ok with the user", cfg: proxytest.PolicyConfig{Users: users}, cert: "-",
			authz: basicAuth("bob", "pw2"), want: gate.OK, user: "bob"},
		{name: "certificate names the user", cfg: proxytest.PolicyConfig{Users: users}, cert: "carol",
			want: gate.OK, user: "carol"},
		{name: "certificate wins over credentials", cfg: proxytest.PolicyConfig{Users: users}, cert: "carol",
			authz: wrong, want: gate.OK, user: "carol"},
		{name: "certificate without a common name", cfg: proxytest.PolicyConfig{Users: users}, cert: "",
			want: gate.NeedAuth, challenged: 1, reason: "auth-missing"},
		{name: "certificate without a common name, credentials", cfg: proxytest.PolicyConfig{Users: users}, cert: "",
			authz: basicAuth("alice", "pw"), want: gate.OK, user: "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			o := observe(t, &cfg)
			p := proxytest.NewPolicy(t, cfg)
			s := newSession(t, p)
			if tt.cert != "-" {
				s.SetTLS(certState(t, tt.cert))
				user, ok := s.Identity()
				if ok != (tt.cert != "") || user != tt.cert {
					t.Errorf("Identity() = %q, %v after a certificate for %q", user, ok, tt.cert)
				}
			}
			if tt.before != nil {
				tt.before(t, p, s)
			}
			host := tt.host
			if host == "" {
				host = "example.com"
			}
			var g gate.Grant
			k := s.Authorize(connectReq(host, tt.authz), &g)
			if k != tt.want {
				t.Fatalf("Authorize = %v, want %v", k, tt.want)
			}
			if g.User != tt.user || g.Rule != tt.rule {
				t.Errorf("User, Rule = %q, %q; want %q, %q", g.User, g.Rule, tt.user, tt.rule)
			}
			if retry := g.RetryAfter > 0 && g.RetryAfter <= time.Minute; retry != tt.retry {
				t.Errorf("RetryAfter = %v", g.RetryAfter)
			}
			if g.Session() != s {
				t.Error("Session() is not the grant's session")
			}
			g.Answer(k.Status(), 0)
			g.Finish(0, 0)
			for _, c := range []struct {
				name string
				want float64
			}{
				{"rustle_auth_failures_total", tt.authFailed},
				{"rustle_auth_challenges_total", tt.challenged},
				{"rustle_acl_denials_total", tt.denied},
			} {
				if got := proxytest.Metric(t, o.m, c.name); got != c.want {
					t.Errorf("%s: %v, want %v", c.name, got, c.want)
				}
			}
			recs := o.records(t, 1)
			rec := recs[len(recs)-1]
			if got, _ := rec["reason"].(string); got != tt.reason {
				t.Errorf("access log reason %q, want %q: %v", got, tt.reason, rec)
			}
			logged := tt.user
			if logged == "" {
				logged = tt.logged
			}
			if got, _ := rec["user"].(string); got != logged {
				t.Errorf("access log user %q, want %q", got, logged)
			}
			// Per-user series only for users who authenticated.
			if got := proxytest.Metric(t, o.m, "rustle_user_requests_total", "user", tt.logged); tt.logged != "" && tt.logged != tt.user && got != 0 {
				t.Errorf("a series for %q, who did not authenticate", tt.logged)
			}
			if out := o.out.String(); strings.Contains(out, secret) || bytes.Contains([]byte(out), wrong[len("Basic "):]) {
				t.Errorf("the access log holds a password or credentials:\n%s", out)
			}
		})
	}
}

// TestAuthorizeParallelGuesses checks that the streams of one connection
// (an HTTP/2 client's) cannot check guesses side by side: the
// credentials a session has no verdict on are checked one at a time, so
// the failure that starts the cool-down refuses every guess queued behind
// it unchecked.
func TestAuthorizeParallelGuesses(t *testing.T) {
	cfg := proxytest.PolicyConfig{Users: users, Limits: &limits.Config{AuthFailures: 3, AuthCooldown: time.Minute}}
	o := observe(t, &cfg)
	s := newSession(t, proxytest.NewPolicy(t, cfg))
	const streams = 40
	kinds := make([]gate.Kind, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			var g gate.Grant
			kinds[i] = s.Authorize(connectReq("example.com", basicAuth("alice", fmt.Sprintf("guess%d", i))), &g)
			g.Answer(kinds[i].Status(), 0)
			g.Finish(0, 0)
		})
	}
	wg.Wait()
	count := map[gate.Kind]int{}
	for _, k := range kinds {
		count[k]++
	}
	if count[gate.NeedAuth] != 2 || count[gate.CoolingDown] != streams-2 {
		t.Errorf("outcomes %v, want 2 need-auth and the rest cooling down", count)
	}
	if got := proxytest.Metric(t, o.m, "rustle_auth_failures_total"); got != 3 {
		t.Errorf("%v guesses checked and failed, want 3: the cool-down did not stop the rest", got)
	}
}

// TestAuthMemo checks the session's memo of the Proxy-Authorization value
// it accepted: the same value is accepted again, another value is checked
// on its own, and a wrong value, or one longer than 1024 bytes, is
// checked, and counted as a failure, every time.
func TestAuthMemo(t *testing.T) {
	long := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+strings.Repeat("x", 800)))
	if len(long) <= 1024 {
		t.Fatalf("the long value has %d bytes", len(long))
	}
	tests := []struct {
		name  string
		steps []struct {
			authz string
			want  gate.Kind
			user  string
		}
		authFailed float64
	}{
		{name: "same value twice, then another user", steps: []struct {
			authz string
			want  gate.Kind
			user  string
		}{
			{string(basicAuth("alice", "pw")), gate.OK, "alice"},
			{string(basicAuth("alice", "pw")), gate.OK, "alice"},
			{string(basicAuth("bob", "pw2")), gate.OK, "bob"},
			{string(basicAuth("alice", "pw")), gate.OK, "alice"},
			{string(basicAuth("alice", "pwx")), gate.NeedAuth, ""},
		}, authFailed: 1},
		{name: "a wrong value is never memoised", steps: []struct {
			authz string
			want  gate.Kind
			user  string
		}{
			{string(basicAuth("alice", "pw")), gate.OK, "alice"},
			{string(basicAuth("alice", "nope")), gate.NeedAuth, ""},
			{string(basicAuth("alice", "nope")), gate.NeedAuth, ""},
			{string(basicAuth("alice", "nope")), gate.CoolingDown, ""},
		}, authFailed: 3},
		{name: "a long value is checked every time", steps: []struct {
			authz string
			want  gate.Kind
			user  string
		}{
			{long, gate.NeedAuth, ""},
			{long, gate.NeedAuth, ""},
			{long, gate.CoolingDown, ""},
		}, authFailed: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := proxytest.PolicyConfig{
				Users:  map[string]string{"alice": "pw", "bob": "pw2"},
				Limits: &limits.Config{AuthFailures: 3, AuthWindow: time.Minute, AuthCooldown: time.Minute},
			}
			o := observe(t, &cfg)
			s := newSession(t, proxytest.NewPolicy(t, cfg))
			var g gate.Grant
			for i, st := range tt.steps {
				k := s.Authorize(connectReq("example.com", []byte(st.authz)), &g)
				if k != st.want || (k == gate.OK && g.User != st.user) {
					t.Fatalf("request %d: %v as %q, want %v as %q", i+1, k, g.User, st.want, st.user)
				}
				g.Finish(0, 0)
			}
			if got := proxytest.Metric(t, o.m, "rustle_auth_failures_total"); got != tt.authFailed {
				t.Errorf("auth failures counted: %v, want %v", got, tt.authFailed)
			}
		})
	}
}

// TestUserCounting checks that the first user of a connection is counted
// for the session's life, another user for its grant's, and that Close
// gives back the count and the admission once.
func TestUserCounting(t *testing.T) {
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: users, Limits: &limits.Config{MaxConnsPerUser: 1}})
	var released atomic.Int32
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40001"), nil, func() { released.Add(1) })
	t.Cleanup(s.Close)
	// admits reports whether a fresh connection may be user's.
	admits := func(user, pass string) bool {
		t.Helper()
		o := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40002"), nil, nil)
		defer o.Close()
		var g gate.Grant
		k := o.Authorize(connectReq("example.com", basicAuth(user, pass)), &g)
		g.Finish(0, 0)
		return k == gate.OK
	}

	var g gate.Grant
	if k := s.Authorize(connectReq("example.com", basicAuth("alice", "pw")), &g); k != gate.OK {
		t.Fatalf("alice: %v", k)
	}
	g.Finish(0, 0)
	if admits("alice", "pw") {
		t.Error("alice admitted elsewhere while the connection is hers")
	}
	if k := s.Authorize(connectReq("example.com", basicAuth("alice", "pw")), &g); k != gate.OK {
		t.Errorf("alice's second request on her connection: %v", k)
	}
	g.Finish(0, 0)

	var gb gate.Grant
	if k := s.Authorize(connectReq("example.com", basicAuth("bob", "pw2")), &gb); k != gate.OK {
		t.Fatalf("bob on alice's connection: %v", k)
	}
	if admits("bob", "pw2") {
		t.Error("bob admitted elsewhere while his grant is open")
	}
	gb.Finish(0, 0)
	gb.Finish(0, 0) // idempotent: gives back once
	if !admits("bob", "pw2") {
		t.Error("bob refused after his grant finished")
	}
	// A grant left open is finished by the next Authorize.
	if k := s.Authorize(connectReq("example.com", basicAuth("bob", "pw2")), &gb); k != gate.OK {
		t.Fatalf("bob again: %v", k)
	}
	if k := s.Authorize(connectReq("example.com", basicAuth("alice", "pw")), &gb); k != gate.OK {
		t.Fatalf("alice on the reused grant: %v", k)
	}
	if !admits("bob", "pw2") {
		t.Error("bob refused after the grant was reused")
	}
	gb.Finish(0, 0)

	if released.Load() != 0 {
		t.Fatalf("admission released %d times before Close", released.Load())
	}
	s.Close()
	s.Close()
	if n := released.Load(); n != 1 {
		t.Errorf("admission released %d times, want 1", n)
	}
	if !admits("alice", "pw") {
		t.Error("alice refused after her connection closed")
	}
	if err := context.Cause(s.Context()); !errors.Is(err, context.Canceled) {
		t.Errorf("closed session's context: %v, want canceled", err)
	}
}

// tcpPair returns the two ends of a loopback TCP connection: the client's
// and the one a proxy accepted.
func tcpPair(t *testing.T) (client, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		a.Close()
	})
	return c, a
}

// tlsPair returns the two ends of a loopback TLS connection, its
// handshake done: the client's, and the proxy's, made over
// tunnel.RecordConn(raw) as the https port makes it.
func tlsPair(t *testing.T) (client, served *tls.Conn, raw *net.TCPConn) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	c, a := tcpPair(t)
	client = tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	served = tls.Server(tunnel.RecordConn(a), &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	deadline := time.Now().Add(10 * time.Second)
	client.SetDeadline(deadline)
	served.SetDeadline(deadline)
	errc := make(chan error, 1)
	go func() { errc <- served.Handshake() }()
	if err := errors.Join(client.Handshake(), <-errc); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	client.SetDeadline(time.Time{})
	served.SetDeadline(time.Time{})
	return client, served, a
}

// newEngine starts a tunnel engine, closed at the end of the test.
func newEngine(t *testing.T) *tunnel.Engine {
	t.Helper()
	e, err := tunnel.New(tunnel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// dialGrant authorizes on s a CONNECT to addr as user, dials it with the
// grant and answers 200.
func dialGrant(t *testing.T, s *gate.Session, user, pass, addr string) (*gate.Grant, net.Conn) {
	t.Helper()
	g := new(gate.Grant)
	if k := s.Authorize(connectTo(t, addr, basicAuth(user, pass)), g); k != gate.OK {
		t.Fatalf("%s: %v", user, k)
	}
	upc, err := g.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g.Answer(200, 0)
	return g, upc
}

// echoThrough writes msg into c and reads it back.
func echoThrough(c net.Conn, msg string) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echoed %q, want %q", buf, msg)
	}
	return nil
}

// endTunnel half-closes a tunnel's client end and waits for the upstream's
// end of stream.
func endTunnel(t *testing.T, c net.Conn) {
	t.Helper()
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); err != nil || len(b) > 0 {
		t.Errorf("tunnel end: %q, %v; want end of stream", b, err)
	}
	c.Close()
}

// TestTunnel relays a tunnel through each of its paths and checks that
// the bytes each way reach the metrics and the access log, and when the
// connection's admission is given back.
func TestTunnel(t *testing.T) {
	const msg = "hello, tunnel" // 13 bytes each way
	tests := []struct {
		name    string
		limits  *limits.Config
		engine  bool
		pipe    bool // the client is a net.Pipe end: the portable relay
		tls     bool // the client is TLS over tunnel.RecordConn
		closed  bool // the engine is closed: AddTLS refuses
		handoff bool // the tunnel lives on in the engine
	}{
		{name: "engine", limits: &limits.Config{MaxConnsPerUser: 1}, engine: true, handoff: true},
		{name: "TLS on the engine", limits: &limits.Config{MaxConnsPerUser: 1}, engine: true, tls: true, handoff: true},
		{name: "TLS relay", limits: &limits.Config{MaxConnsPerUser: 1}, tls: true},
		{name: "TLS relay, the engine refused", limits: &limits.Config{MaxConnsPerUser: 1}, engine: true, closed: true, tls: true},
		{name: "portable relay", limits: &limits.Config{MaxConnsPerUser: 1}, engine: true, pipe: true},
		{name: "paced", limits: &limits.Config{MaxConnsPerUser: 1, UserBytesPerSecond: 1 << 20}, engine: true},
		{name: "no engine", limits: &limits.Config{MaxConnsPerUser: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := proxytest.NewEcho(t)
			cfg := proxytest.PolicyConfig{Users: users, Limits: tt.limits, Revoked: new(gate.Registry)}
			o := observe(t, &cfg)
			p := proxytest.NewPolicy(t, cfg)
			var eng *tunnel.Engine
			if tt.engine {
				eng = newEngine(t)
				if tt.closed {
					eng.Close()
				}
			}
			var client, served, attached net.Conn
			switch {
			case tt.pipe:
				client, served = net.Pipe()
				t.Cleanup(func() {
					client.Close()
					served.Close()
				})
				attached = served
			case tt.tls:
				// The server attaches the socket under TLS.
				client, served, attached = tlsPair(t)
			default:
				client, served = tcpPair(t)
				attached = served
			}
			var released atomic.Int32
			s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40003"), eng, func() { released.Add(1) })
			s.Attach(attached)
			t.Cleanup(s.Close)

			g, upc := dialGrant(t, s, "alice", "pw", echo.Addr)
			done := make(chan bool, 1)
			go func() { done <- g.Tunnel(served, upc, nil) }()
			if err := echoThrough(client, msg); err != nil {
				t.Fatal(err)
			}
			if tt.handoff {
				if !<-done {
					t.Fatal("Tunnel did not hand the tunnel to the engine")
				}
				s.Close() // the serving goroutine returns; the tunnel carries on
				if n := released.Load(); n != 0 {
					t.Fatalf("admission released %d times while the tunnel is open", n)
				}
				if err := echoThrough(client, msg); err != nil {
					t.Fatalf("after the session closed: %v", err)
				}
				endTunnel(t, client)
				proxytest.WaitFor(t, "the admission released", func() bool { return released.Load() == 1 })
			} else {
				endTunnel(t, client)
				if <-done {
					t.Fatal("Tunnel handed off a tunnel it relayed itself")
				}
				s.Close()
			}
			if n := released.Load(); n != 1 {
				t.Errorf("admission released %d times, want 1", n)
			}
			want := float64(len(msg))
			if tt.handoff {
				want *= 2
			}
			rec := o.records(t, 1)[0]
			if rec["bytes_up"] != want || rec["bytes_down"] != want || rec["user"] != "alice" ||
				rec["method"] != "CONNECT" || rec["status"] != float64(200) || rec["upstream"] != echo.Addr || rec["reason"] != nil && rec["reason"] != "" {
				t.Errorf("access log record %v, want %v bytes each way", rec, want)
			}
			if got := proxytest.Metric(t, o.m, "rustle_bytes_total"); got != 2*want {
				t.Errorf("bytes counted: %v, want %v", got, 2*want)
			}
			if got := proxytest.Metric(t, o.m, "rustle_tunnels_total"); got != 1 {
				t.Errorf("tunnels counted: %v, want 1", got)
			}
			if got := proxytest.Metric(t, o.m, "rustle_upstream_dial_duration_seconds"); got != 1 {
				t.Errorf("dials observed: %v, want 1", got)
			}
			// The user's count went back with the tunnel.
			o2 := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40004"), nil, nil)
			var g2 gate.Grant
			if k := o2.Authorize(connectReq("127.0.0.1", basicAuth("alice", "pw")), &g2); k != gate.OK {
				t.Errorf("alice after her tunnel ended: %v", k)
			}
			g2.Finish(0, 0)
			o2.Close()
			proxytest.WaitFor(t, "the registry empty", func() bool { return cfg.Revoked.Users() == 0 })
		})
	}
}

// TestRegistryRevoke checks that Revoke ends the sessions and engine
// tunnels of the users it is told to, and only those, and that sessions
// and tunnels leave the registry when they end.
func TestRegistryRevoke(t *testing.T) {
	if n := (*gate.Registry)(nil).Revoke(func(string, string) bool { return false }); n != 0 {
		t.Errorf("nil registry revoked %d", n)
	}
	reg := new(gate.Registry)
	cfg := proxytest.PolicyConfig{Users: users, Limits: &limits.Config{}, Revoked: reg}
	o := observe(t, &cfg)
	p := proxytest.NewPolicy(t, cfg)
	eng := newEngine(t)
	echo := proxytest.NewEcho(t)

	// session opens a session on a pipe whose far end it returns.
	type held struct {
		s    *gate.Session
		peer net.Conn
	}
	session := func(how func(s *gate.Session)) held {
		t.Helper()
		a, b := net.Pipe()
		t.Cleanup(func() {
			a.Close()
			b.Close()
		})
		s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40005"), nil, nil)
		s.Attach(b)
		t.Cleanup(s.Close)
		how(s)
		return held{s, a}
	}
	authorize := func(user, pass string) func(s *gate.Session) {
		return func(s *gate.Session) {
			var g gate.Grant
			if k := s.Authorize(connectReq("example.com", basicAuth(user, pass)), &g); k != gate.OK {
				t.Fatalf("%s: %v", user, k)
			}
			g.Finish(0, 0)
		}
	}
	alice := session(authorize("alice", "pw"))
	bob := session(authorize("bob", "pw2"))
	bobLogin := session(func(s *gate.Session) {
		var g gate.Grant
		if _, k := s.Login([]byte("bob"), []byte("pw2"), &g); k != gate.OK {
			t.Fatalf("bob's login: %v", k)
		}
	})
	carol := session(func(s *gate.Session) { s.SetTLS(certState(t, "carol")) })
	// Bob as a second user of alice's connection (an h2 stream): the
	// connection is his too.
	shared := session(authorize("alice", "pw"))
	var sharedGrant gate.Grant
	if k := shared.s.Authorize(connectReq("example.com", basicAuth("bob", "pw2")), &sharedGrant); k != gate.OK {
		t.Fatalf("bob on alice's connection: %v", k)
	}

	// tunnel opens an engine tunnel of user, TLS if overTLS, and returns
	// its client end.
	tunnelOf := func(user, pass string, overTLS bool) net.Conn {
		t.Helper()
		var client, served, attached net.Conn
		if overTLS {
			client, served, attached = tlsPair(t)
		} else {
			client, served = tcpPair(t)
			attached = served
		}
		s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40006"), eng, nil)
		s.Attach(attached)
		defer s.Close()
		g, upc := dialGrant(t, s, user, pass, echo.Addr)
		if !g.Tunnel(served, upc, nil) {
			t.Fatal("the tunnel was not handed to the engine")
		}
		if err := echoThrough(client, "x"); err != nil {
			t.Fatal(err)
		}
		return client
	}
	aliceTunnel := tunnelOf("alice", "pw", false)
	bobTunnel := tunnelOf("bob", "pw2", false)
	aliceTLSTunnel := tunnelOf("alice", "pw", true)
	bobTLSTunnel := tunnelOf("bob", "pw2", true)

	if n := reg.Users(); n != 3 {
		t.Errorf("Users() = %d, want 3 (alice, bob, carol)", n)
	}
	if n := reg.Revoke(func(string, string) bool { return true }); n != 0 {
		t.Errorf("Revoke keeping everyone revoked %d", n)
	}
	if n := reg.Revoke(func(_, u string) bool { return u != "bob" }); n != 1 {
		t.Errorf("Revoke(bob) = %d, want 1", n)
	}

	for _, tc := range []struct {
		name    string
		h       held
		revoked bool
	}{
		{"alice", alice, false},
		{"bob", bob, true},
		{"bob's login", bobLogin, true},
		{"carol's certificate", carol, false},
		{"alice's connection with bob's grant", shared, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.h.s.Context()
			if got := ctx.Err() != nil; got != tc.revoked {
				t.Fatalf("context done: %v, want %v", got, tc.revoked)
			}
			// A kept session's connection stays open past a short wait;
			// a revoked one's is closed, by a goroutine of its own
			// (which a loaded machine may run late): it is given
			// seconds.
			wait := 50 * time.Millisecond
			if tc.revoked {
				wait = 10 * time.Second
			}
			tc.h.peer.SetReadDeadline(time.Now().Add(wait))
			_, err := tc.h.peer.Read(make([]byte, 1))
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			if !tc.revoked {
				if !timedOut {
					t.Errorf("the connection of a kept session: %v, want it open", err)
				}
				return
			}
			if cause := context.Cause(ctx); !errors.Is(cause, gate.ErrRevoked) {
				t.Errorf("context's cause %v, want ErrRevoked", cause)
			}
			if timedOut || err == nil {
				t.Errorf("the connection of a revoked session: %v, want it closed", err)
			}
		})
	}
	sharedGrant.Finish(0, 0)

	for _, c := range []net.Conn{bobTunnel, bobTLSTunnel} {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if b, err := io.ReadAll(c); len(b) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("bob's tunnel (%T) after the revocation: %q, %v; want it ended", c, b, err)
		}
	}
	for _, c := range []net.Conn{aliceTunnel, aliceTLSTunnel} {
		if err := echoThrough(c, "y"); err != nil {
			t.Errorf("alice's tunnel (%T) after bob's revocation: %v", c, err)
		}
	}
	for _, rec := range o.records(t, 2) {
		if rec["user"] != "bob" || rec["reason"] != accesslog.ReasonRevoked || rec["bytes_up"] != float64(1) {
			t.Errorf("bob's tunnel's record %v, want reason %q", rec, accesslog.ReasonRevoked)
		}
	}

	// Everything that ends leaves the registry.
	endTunnel(t, aliceTunnel)
	endTunnel(t, aliceTLSTunnel)
	for _, h := range []held{alice, bob, bobLogin, carol, shared} {
		h.s.Close()
	}
	proxytest.WaitFor(t, "the registry empty", func() bool { return reg.Users() == 0 })
	if n := reg.Revoke(func(string, string) bool { return false }); n != 0 {
		t.Errorf("Revoke on an empty registry = %d", n)
	}
}

// TestListenerUsers checks a policy restricted to some of the users, as
// a listener's users key makes it: another user's right credentials are
// refused as wrong ones are (Basic, SOCKS5 login), counted as a failed
// authentication, and a client certificate naming another user is no
// identity.
func TestListenerUsers(t *testing.T) {
	cfg := proxytest.PolicyConfig{Users: users, Only: []string{"alice"}, Limits: &limits.Config{}}
	o := observe(t, &cfg)
	p := proxytest.NewPolicy(t, cfg)
	if !p.RequiresAuth() || p.Challenge() == "" {
		t.Fatalf("a restricted policy: RequiresAuth %v, challenge %q", p.RequiresAuth(), p.Challenge())
	}
	tests := []struct {
		name  string
		setup func(s *gate.Session) // nil = none
		authz []byte
		want  gate.Kind
		fails float64 // failed authentications counted
	}{
		{"listed user", nil, basicAuth("alice", "pw"), gate.OK, 0},
		{"unlisted user, right password", nil, basicAuth("bob", "pw2"), gate.NeedAuth, 1},
		{"unlisted user's SOCKS5 login", func(s *gate.Session) {
			if _, k := s.Login([]byte("bob"), []byte("pw2"), new(gate.Grant)); k != gate.NeedAuth {
				t.Errorf("bob's login: %v, want %v", k, gate.NeedAuth)
			}
		}, nil, gate.NeedAuth, 1}, // the login; the request without credentials is a challenge
		{"listed user's SOCKS5 login", func(s *gate.Session) {
			if _, k := s.Login([]byte("alice"), []byte("pw"), new(gate.Grant)); k != gate.OK {
				t.Errorf("alice's login: %v, want ok", k)
			}
		}, nil, gate.OK, 0},
		{"listed user's certificate", func(s *gate.Session) { s.SetTLS(certState(t, "alice")) }, nil, gate.OK, 0},
		{"unlisted user's certificate", func(s *gate.Session) {
			s.SetTLS(certState(t, "carol"))
			if u, ok := s.Identity(); ok {
				t.Errorf("identity %q from a certificate of a user not on the listener", u)
			}
		}, nil, gate.NeedAuth, 0}, // no identity, no credentials: a challenge
		{"unlisted user's certificate, listed user's password", func(s *gate.Session) { s.SetTLS(certState(t, "carol")) },
			basicAuth("alice", "pw"), gate.OK, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each from its own address: no cool-down carries over.
			s := p.NewSession(context.Background(), netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 3, byte(i + 1)}), 40000), nil, nil)
			defer s.Close()
			before := proxytest.Metric(t, o.m, "rustle_auth_failures_total")
			if tt.setup != nil {
				tt.setup(s)
			}
			var g gate.Grant
			k := s.Authorize(connectReq("example.com", tt.authz), &g)
			g.Finish(0, 0)
			if k != tt.want {
				t.Errorf("Authorize = %v, want %v", k, tt.want)
			}
			if got := proxytest.Metric(t, o.m, "rustle_auth_failures_total") - before; got != tt.fails {
				t.Errorf("failed authentications counted: %v, want %v", got, tt.fails)
			}
		})
	}
}

// TestRegistryRevokeByListener checks that Revoke ends a user's sessions
// and engine tunnels on the listeners keep names and not the user's
// sessions and tunnels on another listener of the same registry.
func TestRegistryRevokeByListener(t *testing.T) {
	reg := new(gate.Registry)
	eng := newEngine(t)
	echo := proxytest.NewEcho(t)
	policies := map[string]*gate.Policy{}
	for _, name := range []string{"a", "b"} {
		policies[name] = proxytest.NewPolicy(t, proxytest.PolicyConfig{Listener: name, Users: users, Revoked: reg})
	}
	// session authorizes bob on the listener's policy, on a pipe whose far
	// end it returns.
	session := func(listener string) (*gate.Session, net.Conn) {
		t.Helper()
		a, b := net.Pipe()
		t.Cleanup(func() {
			a.Close()
			b.Close()
		})
		s := policies[listener].NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40007"), nil, nil)
		s.Attach(b)
		t.Cleanup(s.Close)
		var g gate.Grant
		if k := s.Authorize(connectReq("example.com", basicAuth("bob", "pw2")), &g); k != gate.OK {
			t.Fatalf("bob on %s: %v", listener, k)
		}
		g.Finish(0, 0)
		return s, a
	}
	// tunnel opens an engine tunnel of bob's on the listener.
	tunnelOn := func(listener string) net.Conn {
		t.Helper()
		client, served := tcpPair(t)
		s := policies[listener].NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40008"), eng, nil)
		s.Attach(served)
		defer s.Close()
		var g gate.Grant
		if k := s.Authorize(connectTo(t, echo.Addr, basicAuth("bob", "pw2")), &g); k != gate.OK {
			t.Fatalf("bob on %s: %v", listener, k)
		}
		upc, err := g.Dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		g.Answer(200, 0)
		if !g.Tunnel(served, upc, nil) {
			t.Fatal("the tunnel was not handed to the engine")
		}
		if err := echoThrough(client, "x"); err != nil {
			t.Fatal(err)
		}
		return client
	}
	onA, _ := session("a")
	onB, _ := session("b")
	tunnelA, tunnelB := tunnelOn("a"), tunnelOn("b")

	var asked []string
	n := reg.Revoke(func(listener, user string) bool {
		asked = append(asked, listener+"/"+user)
		return listener != "a"
	})
	if n != 1 {
		t.Errorf("Revoke(bob on a) = %d, want 1 user", n)
	}
	for _, want := range []string{"a/bob", "b/bob"} {
		if !slices.Contains(asked, want) {
			t.Errorf("keep asked about %q, not %s", asked, want)
		}
	}
	if cause := context.Cause(onA.Context()); !errors.Is(cause, gate.ErrRevoked) {
		t.Errorf("bob's session on a: cause %v, want ErrRevoked", cause)
	}
	if err := onB.Context().Err(); err != nil {
		t.Errorf("bob's session on b: %v, want it open", err)
	}
	tunnelA.SetReadDeadline(time.Now().Add(2 * time.Second))
	if b, err := io.ReadAll(tunnelA); len(b) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("bob's tunnel on a after the revocation: %q, %v; want it ended", b, err)
	}
	if err := echoThrough(tunnelB, "y"); err != nil {
		t.Errorf("bob's tunnel on b after the revocation on a: %v", err)
	}
	endTunnel(t, tunnelB)
	onA.Close()
	onB.Close()
	proxytest.WaitFor(t, "the registry empty", func() bool { return reg.Users() == 0 })
}

// TestReject checks what a request refused before it could be decided
// leaves: one access log record with what was parsed of it, its status
// and reason; a request counted only when something was answered; and
// one debug line naming the cause.
func TestReject(t *testing.T) {
	tests := []struct {
		name           string
		req            gate.Request
		status         int
		reason         string
		cause          error
		protocol       string // as logged in JSON
		method, target string
		counted        float64
	}{
		{"malformed head", gate.Request{Log: accesslog.ProtoHTTP, Method: "POST", Target: []byte("http://example.com/a")},
			400, accesslog.ReasonSmuggling, errors.New("http1: both Content-Length and Transfer-Encoding"), "http", "POST", "http://example.com/a", 1},
		{"nothing parsed", gate.Request{Log: accesslog.ProtoHTTP}, 431, accesslog.ReasonHeadTooLarge, nil, "http", "", "", 1},
		{"nothing answered", gate.Request{Target: []byte("sni.example")}, 0, accesslog.ReasonTLSHandshake,
			errors.New("remote error: tls: bad certificate"), "", "", "sni.example", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &proxytest.LogBuffer{}
			cfg := proxytest.PolicyConfig{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			o := observe(t, &cfg)
			s := newSession(t, proxytest.NewPolicy(t, cfg))
			var g gate.Grant
			// A grant a previous request left is replaced, not reported again.
			if k := s.Authorize(connectReq("example.com", nil), &g); k != gate.OK {
				t.Fatalf("Authorize: %v", k)
			}
			g.Answer(200, 0)
			g.Finish(0, 0)
			s.Reject(&tt.req, &g, tt.status, tt.reason, tt.cause)
			g.Finish(0, 0) // idempotent
			recs := o.records(t, 2)
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2: %v", len(recs), recs)
			}
			rec := recs[1]
			if rec["reason"] != tt.reason || rec["status"] != float64(tt.status) || rec["method"] != tt.method ||
				rec["target"] != tt.target || rec["protocol"] != tt.protocol || rec["user"] != "" {
				t.Errorf("record %v, want status %d, reason %s, method %q, target %q", rec, tt.status, tt.reason, tt.method, tt.target)
			}
			if got := proxytest.Metric(t, o.m, "rustle_requests_total", "code", "4xx"); got != tt.counted {
				t.Errorf("4xx requests counted %v, want %v", got, tt.counted)
			}
			if got := proxytest.Metric(t, o.m, "rustle_requests_total", "code", "other"); got != 0 {
				t.Errorf("requests counted without a status: %v", got)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], `msg="gate: request refused"`) ||
				!strings.Contains(lines[0], "reason="+tt.reason) || !strings.Contains(lines[0], fmt.Sprintf("status=%d", tt.status)) {
				t.Fatalf("debug lines %q, want one refusal with reason %s", lines, tt.reason)
			}
			if hasErr := strings.Contains(lines[0], " err="); hasErr != (tt.cause != nil) {
				t.Errorf("debug line %q: err attribute %v, want %v", lines[0], hasErr, tt.cause != nil)
			}
		})
	}
}

// TestLoggableTarget checks that a target whose authority carries
// userinfo is not logged, and that any other is, '@' elsewhere included.
func TestLoggableTarget(t *testing.T) {
	for _, tt := range []struct {
		target string
		logged bool
	}{
		{"http://example.com/a", true},
		{"http://example.com/a@b?c=d@e", true},
		{"http://example.com?q=a@b", true},
		{"example.com:443", true},
		{"/a@b", true},
		{"", true},
		{"http://alice:pw@example.com/", false},
		{"HTTP://alice@example.com", false},
		{"http://a:b@c@example.com/", false},
		{"alice:pw@example.com:443", false},
		{"ws://alice:pw@example.com?x", false},
	} {
		got := gate.LoggableTarget([]byte(tt.target))
		if (got != nil || tt.target == "") != tt.logged || got != nil && string(got) != tt.target {
			t.Errorf("LoggableTarget(%q) = %q, want logged %v", tt.target, got, tt.logged)
		}
	}
}

// TestRevokeDuringHandoff checks that a revocation that comes after the
// engine has taken a tunnel and before the tunnel is registered for
// revocation still cuts it: the revocation ends the session, whose
// connection the engine holds by then, and cannot see the tunnel yet.
// (TestClusterRevocation in internal/server lost tunnels this way.)
func TestRevokeDuringHandoff(t *testing.T) {
	reg := new(gate.Registry)
	cfg := proxytest.PolicyConfig{Users: users, Limits: &limits.Config{}, Revoked: reg}
	p := proxytest.NewPolicy(t, cfg)
	eng := newEngine(t)
	echo := proxytest.NewEcho(t)
	revoked := 0
	t.Cleanup(gate.SetAfterEngineAdd(func() {
		revoked = reg.Revoke(func(_, u string) bool { return u != "alice" })
	}))

	client, served := tcpPair(t)
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40007"), eng, nil)
	s.Attach(served)
	defer s.Close()
	g, upc := dialGrant(t, s, "alice", "pw", echo.Addr)
	if !g.Tunnel(served, upc, nil) {
		t.Fatal("the tunnel was not handed to the engine")
	}
	if revoked != 1 {
		t.Fatalf("the revocation during the hand-off revoked %d users, want 1 (alice's session)", revoked)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	client.Write([]byte("x"))
	if b, err := io.ReadAll(client); len(b) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("alice's tunnel after a revocation during its hand-off: %q, %v; want it cut", b, err)
	}
}
