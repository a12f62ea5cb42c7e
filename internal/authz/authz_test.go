package authz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/authz"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// opaPolicy is the policy TestOPA's server runs: alice may reach port
// 443, with a header and a ttl; members of ops may reach anything from
// 192.0.2.0/24; a tunnel is allowed by its server name.
const opaPolicy = `package rustle.authz

default allow := false

allow if {
	input.user == "alice"
	input.port == 443
}

allow if {
	"ops" in input.groups
	net.cidr_contains("192.0.2.0/24", input.client)
}

allow if input.sni == "allowed.example"

headers := {"X-Tenant": "team-a"} if input.user == "alice"

ttl := 30 if input.user == "alice"
`

// checkHeader is a CheckHeader that refuses the fields wire's does not
// pass: Connection and values with control characters.
func checkHeader(name, value string) error {
	if strings.EqualFold(name, "connection") {
		return fmt.Errorf("%q is hop-by-hop", name)
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("the value of %q has a control character", name)
	}
	return nil
}

func newClient(t *testing.T, cfg authz.Config) *authz.Client {
	t.Helper()
	if cfg.CheckHeader == nil {
		cfg.CheckHeader = checkHeader
	}
	c, err := authz.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestOPA asks a real Open Policy Agent server about documents its
// policy allows and denies: the document's fields are those the policy
// reads (user, port, groups, client, sni), the result object's allow,
// headers and ttl are taken, a boolean result (a rule's own path) too,
// and a path with no policy (OPA answers {}) is an error, not a denial.
func TestOPA(t *testing.T) {
	opa := proxytest.StartOPA(t, opaPolicy)
	c := newClient(t, authz.Config{URL: opa.URL + "/v1/data/rustle/authz", Timeout: 5 * time.Second})
	alice := authz.Input{Listener: "main", User: "alice", Client: netip.MustParseAddr("198.51.100.1"),
		Host: "example.com", Port: 443, Method: "CONNECT", Protocol: "connect"}
	for _, tt := range []struct {
		name    string
		in      authz.Input
		allow   bool
		headers []authz.Header
	}{
		{"alice to 443", alice, true, []authz.Header{{Name: "X-Tenant", Value: "team-a"}}},
		{"alice to 80", func() authz.Input { in := alice; in.Port = 80; return in }(), false, nil},
		{"bob", authz.Input{User: "bob", Client: netip.MustParseAddr("198.51.100.1"), Host: "example.com", Port: 443}, false, nil},
		{"ops from 192.0.2.0/24", authz.Input{User: "carol", Groups: []string{"dev", "ops"}, Client: netip.MustParseAddr("192.0.2.9"),
			Addr: netip.MustParseAddr("203.0.113.5"), Port: 22, Method: "CONNECT", Protocol: "socks5"}, true, nil},
		{"ops from elsewhere", authz.Input{User: "carol", Groups: []string{"ops"}, Client: netip.MustParseAddr("198.51.100.9"),
			Host: "example.com", Port: 22}, false, nil},
		{"by server name", authz.Input{Client: netip.MustParseAddr("198.51.100.1"), Host: "allowed.example", Port: 8443,
			Method: "CONNECT", Protocol: "connect", SNI: "allowed.example"}, true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := c.Decide(context.Background(), &tt.in, nil)
			if d.Err != nil || d.Allow != tt.allow || !reflect.DeepEqual(d.Headers, tt.headers) {
				t.Fatalf("Decide = %+v, want allow %v, headers %v", d, tt.allow, tt.headers)
			}
			if d.Cached {
				t.Errorf("the first decision came from the cache")
			}
			d, _ = c.Decide(context.Background(), &tt.in, nil)
			if !d.Cached || d.Allow != tt.allow {
				t.Errorf("the second decision = %+v, want the first from the cache", d)
			}
		})
	}
	t.Run("a rule's own path", func(t *testing.T) {
		c := newClient(t, authz.Config{URL: opa.URL + "/v1/data/rustle/authz/allow", Timeout: 5 * time.Second})
		if d, _ := c.Decide(context.Background(), &alice, nil); d.Err != nil || !d.Allow || d.Headers != nil {
			t.Errorf("Decide = %+v, want an allow without headers", d)
		}
	})
	t.Run("no policy at the path", func(t *testing.T) {
		c := newClient(t, authz.Config{URL: opa.URL + "/v1/data/rustle/nothing", Timeout: 5 * time.Second, OnError: authz.Allow})
		d, _ := c.Decide(context.Background(), &alice, nil)
		var e *authz.Error
		if !errors.As(d.Err, &e) || e.Kind != metrics.AuthzMalformed || !d.Allow {
			t.Errorf("Decide = %+v, want a malformed answer, allowed by on_error", d)
		}
	})
}

// answer returns a DecisionService function answering body to every
// document.
func answer(body string) func(map[string]any) proxytest.DecisionAnswer {
	return func(map[string]any) proxytest.DecisionAnswer { return proxytest.DecisionAnswer{Body: body} }
}

// TestErrors checks what a request gets when the service cannot decide:
// slow, down, a status other than 200, garbage, no result, a result of
// another shape, a bad ttl, a header the check refuses, an answer over
// the bound. Under on_error = "deny" it is refused, under "allow" let
// through; either way Err says why, of the kind the metrics count, and
// nothing is cached.
func TestErrors(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	down := proxytest.StartDecisionService(t, answer(`{"result":true}`))
	down.Close()
	for _, tt := range []struct {
		name string
		url  string
		a    proxytest.DecisionAnswer
		kind metrics.AuthzError
		text string
	}{
		{"slow", "", proxytest.DecisionAnswer{Body: `{"result":true}`, Hold: hold}, metrics.AuthzTimeout, "no answer within"},
		{"down", down.URL, proxytest.DecisionAnswer{}, metrics.AuthzUnreachable, "connect"},
		{"status 500", "", proxytest.DecisionAnswer{Status: 500, Body: `{"result":true}`}, metrics.AuthzStatus, "500"},
		{"status 302", "", proxytest.DecisionAnswer{Status: 302, Body: `{"result":true}`}, metrics.AuthzStatus, "302"},
		{"garbage", "", proxytest.DecisionAnswer{Body: "<html>allow</html>"}, metrics.AuthzMalformed, "not a JSON object"},
		{"empty", "", proxytest.DecisionAnswer{Body: ""}, metrics.AuthzMalformed, "not a JSON object"},
		{"no result", "", proxytest.DecisionAnswer{Body: `{}`}, metrics.AuthzMalformed, `no "result"`},
		{"null result", "", proxytest.DecisionAnswer{Body: `{"result":null}`}, metrics.AuthzMalformed, `no "result"`},
		{"a number", "", proxytest.DecisionAnswer{Body: `{"result":1}`}, metrics.AuthzMalformed, "neither"},
		{"a string", "", proxytest.DecisionAnswer{Body: `{"result":"allow"}`}, metrics.AuthzMalformed, "neither"},
		{"no allow", "", proxytest.DecisionAnswer{Body: `{"result":{"ttl":5}}`}, metrics.AuthzMalformed, `no boolean "allow"`},
		{"allow a string", "", proxytest.DecisionAnswer{Body: `{"result":{"allow":"yes"}}`}, metrics.AuthzMalformed, "result"},
		{"negative ttl", "", proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"ttl":-1}}`}, metrics.AuthzMalformed, "ttl"},
		{"ttl a string", "", proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"ttl":"5s"}}`}, metrics.AuthzMalformed, "ttl"},
		{"hop-by-hop header", "", proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"headers":{"Connection":"close"}}}`},
			metrics.AuthzMalformed, "Connection"},
		{"header injection", "", proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"headers":{"X-A":"a\r\nX-B: b"}}}`},
			metrics.AuthzMalformed, "control character"},
		{"headers not strings", "", proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"headers":{"X-A":1}}}`},
			metrics.AuthzMalformed, "result"},
		{"too many headers", "", proxytest.DecisionAnswer{Body: manyHeaders(authz.MaxHeaders + 1)}, metrics.AuthzMalformed, "headers"},
		{"too large", "", proxytest.DecisionAnswer{Body: `{"result":true,"pad":"` + strings.Repeat("x", authz.MaxAnswerBytes) + `"}`},
			metrics.AuthzMalformed, "over"},
	} {
		for _, onError := range []authz.OnError{authz.Deny, authz.Allow} {
			t.Run(tt.name+"/"+onError.String(), func(t *testing.T) {
				url := tt.url
				var svc *proxytest.DecisionService
				if url == "" {
					a := tt.a
					svc = proxytest.StartDecisionService(t, func(map[string]any) proxytest.DecisionAnswer { return a })
					url = svc.URL
				}
				m := metrics.New(metrics.Config{}).Authz()
				c := newClient(t, authz.Config{URL: url, Timeout: 300 * time.Millisecond, OnError: onError, Metrics: m})
				in := authz.Input{User: "alice", Host: "example.com", Port: 443}
				for i := range 2 {
					t0 := time.Now()
					d, _ := c.Decide(context.Background(), &in, nil)
					var e *authz.Error
					if !errors.As(d.Err, &e) || e.Kind != tt.kind || !strings.Contains(d.Err.Error(), tt.text) {
						t.Fatalf("decision %d: Err = %v, want a %s error saying %q", i, d.Err, tt.kind, tt.text)
					}
					if d.Allow != (onError == authz.Allow) || d.Cached || d.Headers != nil {
						t.Errorf("decision %d = %+v, want allow %v, uncached, no headers", i, d, onError == authz.Allow)
					}
					if took := time.Since(t0); took > 3*time.Second {
						t.Errorf("decision %d took %s, past the timeout", i, took)
					}
				}
				if svc != nil && svc.Calls() != 2 {
					t.Errorf("the service was called %d times, want 2: an error is not cached", svc.Calls())
				}
			})
		}
	}
}

// manyHeaders returns an allowing answer with n headers.
func manyHeaders(n int) string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("X-H%d", i)] = "v"
	}
	b, _ := json.Marshal(map[string]any{"result": map[string]any{"allow": true, "headers": h}})
	return string(b)
}

// TestBusy checks the concurrency limit: with max_in_flight 1 and the
// service hung, a decision about another document waits for the one
// call to be free, and fails busy when the wait leaves it too little
// time; a decision about the same document waits for the call in
// flight rather than making another, and takes its answer once it
// comes.
func TestBusy(t *testing.T) {
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	svc := proxytest.StartDecisionService(t, func(in map[string]any) proxytest.DecisionAnswer {
		if in["user"] == "other" && in["port"] == 80.0 {
			return proxytest.DecisionAnswer{Body: `{"result":true}`}
		}
		return proxytest.DecisionAnswer{Body: `{"result":true}`, Hold: hold}
	})
	slow := authz.Input{User: "slow", Host: "example.com", Port: 443}
	other := authz.Input{User: "other", Host: "example.com", Port: 443}

	t.Run("another document", func(t *testing.T) {
		m := metrics.New(metrics.Config{})
		c := newClient(t, authz.Config{URL: svc.URL, Timeout: 300 * time.Millisecond, MaxInFlight: 1, Metrics: m.Authz()})
		n := len(svc.Inputs())
		first := make(chan authz.Decision, 1)
		go func() { d, _ := c.Decide(context.Background(), &slow, nil); first <- d }()
		proxytest.WaitFor(t, "the hung call", func() bool { return callsOf(svc, n, "slow") == 1 })
		d, _ := c.Decide(context.Background(), &other, nil)
		var e *authz.Error
		if !errors.As(d.Err, &e) || e.Kind != metrics.AuthzBusy || d.Allow || !strings.Contains(d.Err.Error(), "max_in_flight") {
			t.Errorf("a decision while the one call is busy = %+v, want refused busy", d)
		}
		if d := <-first; !errors.As(d.Err, &e) || e.Kind != metrics.AuthzTimeout {
			t.Errorf("the hung call's decision = %+v, want a timeout", d)
		}
		if got := counter(t, m, "rustle_authz_errors_total", "busy"); got != 1 {
			t.Errorf("rustle_authz_errors_total{error=busy} = %v, want 1", got)
		}
	})

	t.Run("the same document", func(t *testing.T) {
		m := metrics.New(metrics.Config{})
		c := newClient(t, authz.Config{URL: svc.URL, Timeout: 10 * time.Second, MaxInFlight: 1, Metrics: m.Authz()})
		n := len(svc.Inputs())
		done := make(chan authz.Decision, 2)
		go func() { d, _ := c.Decide(context.Background(), &slow, nil); done <- d }()
		proxytest.WaitFor(t, "the hung call", func() bool { return callsOf(svc, n, "slow") == 1 })
		go func() { d, _ := c.Decide(context.Background(), &slow, nil); done <- d }()
		proxytest.WaitFor(t, "the second decision", func() bool { return counter(t, m, "rustle_authz_cache_lookups_total", "miss") == 2 })
		release()
		for range 2 {
			if d := <-done; d.Err != nil || !d.Allow {
				t.Errorf("a decision on the hung document = %+v, want its allow", d)
			}
		}
		if got := callsOf(svc, n, "slow"); got != 1 {
			t.Errorf("the service was called %d times, want 1: the same document's decision waits for the call in flight", got)
		}
		free := authz.Input{User: "other", Host: "example.com", Port: 80}
		if d, _ := c.Decide(context.Background(), &free, nil); d.Err != nil || !d.Allow {
			t.Errorf("a decision once the call is free = %+v, want an allow", d)
		}
	})
}

// callsOf returns how many of the documents the service was sent after
// its first from had user as their user. The tests count one user's
// documents, not all calls: a decision that waited for a free call may
// still reach the service after its own deadline (the request was
// written), and that late call lands whenever the service reads it.
func callsOf(svc *proxytest.DecisionService, from int, user string) int {
	n := 0
	for _, in := range svc.Inputs()[from:] {
		if in["user"] == user {
			n++
		}
	}
	return n
}

// TestCache checks the cache: a decision is kept for the answer's ttl
// (at most cache_ttl), one with ttl 0 not at all, the least recently
// used is evicted first, and the key is the whole document.
func TestCache(t *testing.T) {
	svc := proxytest.StartDecisionService(t, func(in map[string]any) proxytest.DecisionAnswer {
		switch in["user"] {
		case "nocache":
			return proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"ttl":0}}`}
		case "short":
			return proxytest.DecisionAnswer{Body: `{"result":{"allow":false,"ttl":0.05}}`}
		}
		return proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"ttl":3600}}`}
	})
	c := newClient(t, authz.Config{URL: svc.URL, CacheSize: 2, CacheTTL: time.Hour})
	ask := func(user string, port uint16) authz.Decision {
		t.Helper()
		d, _ := c.Decide(context.Background(), &authz.Input{User: user, Host: "example.com", Port: port}, nil)
		if d.Err != nil {
			t.Fatalf("Decide(%s, %d): %v", user, port, d.Err)
		}
		return d
	}
	calls := func(want int64) {
		t.Helper()
		if got := svc.Calls(); got != want {
			t.Fatalf("the service was called %d times, want %d", got, want)
		}
	}
	ask("a", 443)
	ask("a", 443)
	calls(1)
	ask("a", 8443) // another document
	calls(2)
	ask("a", 443) // a is now the most recent
	ask("b", 443) // evicts a:8443
	calls(3)
	if !ask("a", 443).Cached {
		t.Error("a:443, used lately, was evicted")
	}
	if ask("a", 8443).Cached {
		t.Error("a:8443, the least recently used, was kept")
	}
	calls(4)
	ask("nocache", 443)
	ask("nocache", 443)
	calls(6)
	if d := ask("short", 443); d.Allow {
		t.Fatalf("short = %+v, want a denial", d)
	}
	proxytest.WaitFor(t, "the short ttl to pass", func() bool { return !ask("short", 443).Cached })

	t.Run("cache_ttl bounds ttl", func(t *testing.T) {
		c := newClient(t, authz.Config{URL: svc.URL, CacheTTL: 50 * time.Millisecond})
		in := authz.Input{User: "a", Host: "bounded.example", Port: 443}
		c.Decide(context.Background(), &in, nil)
		proxytest.WaitFor(t, "cache_ttl to pass", func() bool { d, _ := c.Decide(context.Background(), &in, nil); return !d.Cached })
	})
	t.Run("no cache", func(t *testing.T) {
		c := newClient(t, authz.Config{URL: svc.URL, CacheSize: -1})
		in := authz.Input{User: "a", Host: "uncached.example", Port: 443}
		n := svc.Calls()
		for range 3 {
			if d, _ := c.Decide(context.Background(), &in, nil); d.Cached || !d.Allow {
				t.Fatalf("Decide = %+v, want an uncached allow", d)
			}
		}
		if got := svc.Calls() - n; got != 3 {
			t.Errorf("%d calls for 3 decisions without a cache", got)
		}
	})
}

// TestSameDocumentOnce checks that decisions on one document asked at
// once make one call.
func TestSameDocumentOnce(t *testing.T) {
	hold := make(chan struct{})
	svc := proxytest.StartDecisionService(t, func(map[string]any) proxytest.DecisionAnswer {
		return proxytest.DecisionAnswer{Body: `{"result":false}`, Hold: hold}
	})
	m := metrics.New(metrics.Config{})
	c := newClient(t, authz.Config{URL: svc.URL, Timeout: 5 * time.Second, Metrics: m.Authz()})
	const n = 20
	var wg sync.WaitGroup
	results := make(chan authz.Decision, n)
	for range n {
		wg.Go(func() {
			d, _ := c.Decide(context.Background(), &authz.Input{User: "u", Host: "example.com", Port: 443}, nil)
			results <- d
		})
	}
	proxytest.WaitFor(t, "every decision", func() bool { return counter(t, m, "rustle_authz_cache_lookups_total", "miss") == n })
	close(hold)
	wg.Wait()
	close(results)
	for d := range results {
		if d.Err != nil || d.Allow {
			t.Errorf("Decide = %+v, want the denial", d)
		}
	}
	if got := svc.Calls(); got != 1 {
		t.Errorf("%d calls for %d decisions at once on one document, want 1", got, n)
	}
	if got := counter(t, m, "rustle_authz_decisions_total", "deny"); got != n {
		t.Errorf("rustle_authz_decisions_total{result=deny} = %v, want %d", got, n)
	}
}

// TestContextEndsWait checks that a request that ends (its client gone)
// stops waiting for its decision, without ending the call another
// decision waits for.
func TestContextEndsWait(t *testing.T) {
	hold := make(chan struct{})
	svc := proxytest.StartDecisionService(t, func(map[string]any) proxytest.DecisionAnswer {
		return proxytest.DecisionAnswer{Body: `{"result":true}`, Hold: hold}
	})
	c := newClient(t, authz.Config{URL: svc.URL, Timeout: 5 * time.Second})
	in := authz.Input{User: "u", Host: "example.com", Port: 443}
	leader := make(chan authz.Decision, 1)
	go func() { d, _ := c.Decide(context.Background(), &in, nil); leader <- d }()
	proxytest.WaitFor(t, "the call", func() bool { return svc.Calls() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, _ := c.Decide(ctx, &in, nil); d.Err == nil || d.Allow {
		t.Errorf("a decision whose request ended = %+v, want refused", d)
	}
	close(hold)
	if d := <-leader; d.Err != nil || !d.Allow {
		t.Errorf("the decision the call was for = %+v, want its allow", d)
	}
}

// TestToken checks that the bearer token goes in Authorization, and that
// the service's failure is logged once, with the url and never the
// token, and its recovery once.
func TestToken(t *testing.T) {
	var mu sync.Mutex
	var fail bool
	svc := proxytest.StartDecisionService(t, func(in map[string]any) proxytest.DecisionAnswer {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return proxytest.DecisionAnswer{Status: 503}
		}
		return proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"ttl":0}}`}
	})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := newClient(t, authz.Config{URL: svc.URL, Token: "s3cret-token-value", Logger: log})
	in := authz.Input{User: "u", Host: "example.com", Port: 443}
	if d, _ := c.Decide(context.Background(), &in, nil); !d.Allow {
		t.Fatalf("Decide = %+v", d)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	for range 3 {
		c.Decide(context.Background(), &in, nil)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	c.Decide(context.Background(), &in, nil)
	if a := svc.Authorizations(); len(a) != 5 || a[0] != "Bearer s3cret-token-value" {
		t.Errorf("Authorization fields = %q, want the bearer token on each of the 5 calls", a)
	}
	out := logs.String()
	if strings.Count(out, "decision service failed") != 1 || strings.Count(out, "answers again") != 1 {
		t.Errorf("logs = %q, want one failure and one recovery line", out)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("logs %q hold the token", out)
	}
}

// TestDocument checks that the document is JSON that decodes to the
// input's fields, escaping what needs it.
func TestDocument(t *testing.T) {
	for _, in := range []authz.Input{
		{},
		{Listener: "main", User: "alice", Groups: []string{"dev", "ops"}, Client: netip.MustParseAddr("192.0.2.1"),
			Host: "example.com", Port: 443, Method: "CONNECT", Protocol: "connect", SNI: "example.com"},
		{User: "quote\"back\\slash\nnew\tline\x01\x7f", Host: "bad\xffutf8", Groups: []string{"é", "\u2028"},
			Client: netip.MustParseAddr("fe80::1%eth0"), Addr: netip.MustParseAddr("2001:db8::1"), Port: 65535},
	} {
		b := in.AppendDocument(nil)
		var doc struct {
			Input struct {
				Listener, User, Client, Host, Method, Protocol, SNI string
				Groups                                              []string
				Port                                                int
			}
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		host := in.Host
		if host == "" && in.Addr.IsValid() {
			host = in.Addr.String()
		}
		client := ""
		if in.Client.IsValid() {
			client = in.Client.WithZone("").String()
		}
		got := doc.Input
		if got.Listener != in.Listener || got.User != strings.ToValidUTF8(in.User, "\ufffd") || got.Client != client ||
			got.Host != strings.ToValidUTF8(host, "\ufffd") || got.Port != int(in.Port) || got.Method != in.Method ||
			got.Protocol != in.Protocol || got.SNI != in.SNI || len(got.Groups) != len(in.Groups) {
			t.Errorf("%s decodes to %+v, want %+v", b, got, in)
		}
	}
}

// TestWarmDecisionAllocates checks that a decision from the cache
// allocates nothing, as BenchmarkDecideWarm reports.
func TestWarmDecisionAllocates(t *testing.T) {
	svc := proxytest.StartDecisionService(t, answer(`{"result":{"allow":true,"headers":{"X-Tenant":"a"}}}`))
	c := newClient(t, authz.Config{URL: svc.URL, Metrics: metrics.New(metrics.Config{}).Authz()})
	in := authz.Input{Listener: "main", User: "alice", Groups: []string{"dev"}, Client: netip.MustParseAddr("192.0.2.1"),
		Host: "example.com", Port: 443, Method: "CONNECT", Protocol: "connect"}
	buf := make([]byte, 0, 512)
	d, buf := c.Decide(context.Background(), &in, buf)
	if d.Err != nil || !d.Allow {
		t.Fatalf("Decide = %+v", d)
	}
	if n := testing.AllocsPerRun(100, func() {
		d, buf = c.Decide(context.Background(), &in, buf)
	}); n != 0 || !d.Cached {
		t.Errorf("a warm decision allocates %v times (cached %v), want 0", n, d.Cached)
	}
}

// BenchmarkDecideWarm is the cost of asking the decision service about a
// request whose decision is cached: the document built, the cache looked
// up, the metrics counted.
func BenchmarkDecideWarm(b *testing.B) {
	svc := proxytest.StartDecisionService(b, answer(`{"result":true}`))
	c, err := authz.New(authz.Config{URL: svc.URL, Metrics: metrics.New(metrics.Config{}).Authz()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	in := authz.Input{Listener: "main", User: "alice", Groups: []string{"dev", "ops"}, Client: netip.MustParseAddr("192.0.2.1"),
		Host: "www.example.com", Port: 443, Method: "CONNECT", Protocol: "connect"}
	buf := make([]byte, 0, 512)
	d, buf := c.Decide(context.Background(), &in, buf)
	if d.Err != nil {
		b.Fatal(d.Err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 512)
		d := authz.Decision{Cached: true}
		for pb.Next() {
			d, buf = c.Decide(context.Background(), &in, buf)
		}
		if !d.Cached {
			b.Error("not from the cache")
		}
	})
}

// counter returns the value of the series name{result=label} in m.
func counter(t *testing.T, m *metrics.Metrics, name, label string) float64 {
	t.Helper()
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetValue() == label {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
