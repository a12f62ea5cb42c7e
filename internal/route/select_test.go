package route

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
)

func parents(t *testing.T, n int) []*Parent {
	t.Helper()
	ps := make([]*Parent, n)
	for i := range ps {
		p, err := NewParent(ParentConfig{Name: fmt.Sprintf("p%d", i), URL: fmt.Sprintf("http://127.0.0.1:%d", 3128+i),
			ConnectTimeout: 10 * time.Second, Health: HealthConfig{MaxFails: 2, Window: 10 * time.Second, Cooldown: 30 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	return ps
}

// down marks p down at now.
func down(p *Parent, now time.Time) {
	for !p.health.Failed(now) {
	}
}

// TestPickHashed checks that hashed selections keep a key on one parent
// across 1,000 picks, that different keys spread, and that a parent going
// down moves only its own keys.
func TestPickHashed(t *testing.T) {
	for _, sel := range []Select{HashHost, HashUser, HashSession} {
		t.Run(sel.String(), func(t *testing.T) {
			ps := parents(t, 4)
			g := NewGroup(ps, sel, "")
			now := time.Now()
			first := map[string]*Parent{}
			used := map[*Parent]bool{}
			for i := range 64 {
				k := Key{Host: fmt.Sprintf("h%d.test", i), User: fmt.Sprintf("u%d-session-%d", i, i)}
				p := g.Pick(k, now, nil)
				for range 1000 {
					if q := g.Pick(k, now, nil); q != p {
						t.Fatalf("key %v moved from %s to %s", k, p.Name(), q.Name())
					}
				}
				first[k.Host] = p
				used[p] = true
			}
			if len(used) < 3 {
				t.Errorf("64 keys used only %d of 4 parents", len(used))
			}
			// A parent down moves its keys only.
			down(ps[0], now)
			for i := range 64 {
				k := Key{Host: fmt.Sprintf("h%d.test", i), User: fmt.Sprintf("u%d-session-%d", i, i)}
				p := g.Pick(k, now, nil)
				if p == ps[0] {
					t.Fatalf("picked the parent that is down")
				}
				if was := first[k.Host]; was != ps[0] && p != was {
					t.Errorf("key %v moved from %s to %s though its parent is up", k, was.Name(), p.Name())
				}
			}
		})
	}
}

// TestPickSession checks the session separator: hash-user keeps all of a
// user's sessions on one parent, hash-session gives them their own.
func TestPickSession(t *testing.T) {
	ps := parents(t, 8)
	now := time.Now()
	for _, tt := range []struct {
		sel  Select
		sep  string
		same bool
	}{
		{HashUser, "", true},
		{HashUser, "+", false}, // the default separator is not this one's
		{HashSession, "", false},
	} {
		g := NewGroup(ps, tt.sel, tt.sep)
		got := map[*Parent]bool{}
		for i := range 32 {
			got[g.Pick(Key{User: fmt.Sprintf("alice-session-%d", i)}, now, nil)] = true
		}
		if same := len(got) == 1; same != tt.same {
			t.Errorf("%v sep %q: 32 sessions on %d parents", tt.sel, tt.sep, len(got))
		}
	}
}

// TestPickOrder checks round-robin, first-available and random, with a
// parent down and with all down.
func TestPickOrder(t *testing.T) {
	ps := parents(t, 3)
	now := time.Now()
	rr := NewGroup(ps, RoundRobin, "")
	var names []string
	for range 6 {
		names = append(names, rr.Pick(Key{}, now, nil).Name())
	}
	if got := strings.Join(names, ","); got != "p0,p1,p2,p0,p1,p2" {
		t.Errorf("round-robin %s", got)
	}
	fa := NewGroup(ps, FirstAvailable, "")
	if p := fa.Pick(Key{}, now, nil); p != ps[0] {
		t.Errorf("first-available picked %s", p.Name())
	}
	if p := fa.Pick(Key{}, now, ps[0]); p != ps[1] {
		t.Errorf("first-available except p0 picked %s", p.Name())
	}
	down(ps[0], now)
	if p := fa.Pick(Key{}, now, nil); p != ps[1] {
		t.Errorf("first-available with p0 down picked %s", p.Name())
	}
	rnd := NewGroup(ps, Random, "")
	seen := map[*Parent]bool{}
	for range 200 {
		seen[rnd.Pick(Key{}, now, nil)] = true
	}
	if len(seen) != 2 || seen[ps[0]] {
		t.Errorf("random picked %v", seen)
	}
	down(ps[1], now)
	down(ps[2], now)
	for _, g := range []*Group{rr, fa, rnd, NewGroup(ps, HashHost, "")} {
		if p := g.Pick(Key{Host: "a"}, now, nil); p != nil {
			t.Errorf("%v picked %s with all down", g.Select(), p.Name())
		}
	}
	refuse := &Route{name: "r", group: fa}
	if _, err := refuse.Pick(Key{}); !errors.Is(err, ErrNoParent) {
		t.Errorf("all down, no fallback: %v", err)
	}
	fallback := &Route{name: "r", group: fa, fallback: true}
	if p, err := fallback.Pick(Key{}); p != nil || err != nil {
		t.Errorf("all down, fallback direct: %v, %v", p, err)
	}
}

// TestHealth checks the passive health transitions in fake time: N
// failures within the window put a parent down, failures spread wider
// do not, the cool-down ends in probation, where one failure puts it
// down again and a success brings it up.
func TestHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := parents(t, 1)[0]
		h := p.Health()
		var changes []bool
		h.onChange = func(up bool) { changes = append(changes, up) }
		if h.Failed(time.Now()) || !h.Up(time.Now()) {
			t.Fatal("one failure of two put it down")
		}
		time.Sleep(11 * time.Second) // past the window
		if h.Failed(time.Now()) {
			t.Fatal("failures 11s apart (window 10s) put it down")
		}
		time.Sleep(time.Second)
		if !h.Failed(time.Now()) || h.Up(time.Now()) {
			t.Fatal("two failures within the window left it up")
		}
		time.Sleep(29 * time.Second)
		if h.Up(time.Now()) {
			t.Fatal("up before the cool-down ended")
		}
		time.Sleep(time.Second)
		if !h.Up(time.Now()) {
			t.Fatal("still down after the cool-down")
		}
		if !h.Failed(time.Now()) || h.Up(time.Now()) {
			t.Fatal("a failure on probation left it up")
		}
		time.Sleep(30 * time.Second)
		h.Succeeded()
		if !h.Up(time.Now()) {
			t.Fatal("down after a success")
		}
		if h.Failed(time.Now()) {
			t.Fatal("one failure after the success put it down")
		}
		if fmt.Sprint(changes) != "[false true]" {
			t.Errorf("changes %v, want [false true]", changes)
		}
	})
}

// TestTable checks first-match-wins, the direct default, and the
// errors at compile time.
func TestTable(t *testing.T) {
	cfg := tableConfig(Config{
		Parents: []ParentConfig{
			{Name: "squid", URL: "http://127.0.0.1:3128"},
			{Name: "dante", URL: "socks5://127.0.0.1:1080"},
		},
		Routes: []RouteConfig{
			{Name: "intranet", Match: acl.Rule{Hosts: []string{".corp.test"}}, Via: []string{"direct"}},
			{Name: "scrapers", Match: acl.Rule{Groups: []string{"fleet"}}, Via: []string{"squid", "dante"}, Select: "hash-session"},
			{Match: acl.Rule{Ports: []string{"443"}}, Via: []string{"dante"}, Fallback: "direct"},
		},
		Groups: map[string][]string{"fleet": {"bob"}},
	})
	tab, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		r    acl.Request
		want string
	}{
		{acl.Request{Host: "www.corp.test", Port: 443, User: "bob"}, "intranet"},
		{acl.Request{Host: "a.test", Port: 80, User: "bob"}, "scrapers"},
		{acl.Request{Host: "a.test", Port: 443}, "routes[2]"},
		{acl.Request{Host: "a.test", Port: 80}, ""},
	}
	for _, tt := range tests {
		r := tab.Match(tt.r)
		name := ""
		if r != nil {
			name = r.Name()
		}
		if name != tt.want {
			t.Errorf("Match(%+v) = %q, want %q", tt.r, name, tt.want)
		}
	}
	if !tab.Match(tests[0].r).Direct() || tab.Match(tests[1].r).Direct() {
		t.Error("Direct wrong")
	}
	if tab.Parent("squid") == nil || len(tab.Parents()) != 2 {
		t.Error("parents missing")
	}

	for _, tt := range []struct {
		name string
		mod  func(c *Config)
		want string
	}{
		{"unknown parent", func(c *Config) { c.Routes[1].Via = []string{"squid", "nope"} }, `route scrapers: via: parent "nope" is not defined`},
		{"duplicate parent", func(c *Config) { c.Parents[1].Name = "squid" }, "parent squid: name given twice"},
		{"bad url", func(c *Config) { c.Parents[0].URL = "gopher://x:1" }, `parent squid: scheme "gopher"`},
		{"bad select", func(c *Config) { c.Routes[1].Select = "fastest" }, "route scrapers: select"},
		{"bad fallback", func(c *Config) { c.Routes[2].Fallback = "squid" }, "route routes[2]: fallback"},
		{"direct in group", func(c *Config) { c.Routes[1].Via = []string{"squid", "direct"} }, "cannot be one of a group"},
		{"empty via", func(c *Config) { c.Routes[1].Via = nil }, "via: is empty"},
		{"bad criterion", func(c *Config) { c.Routes[0].Match.Hosts = []string{"a b"} }, "matcher intranet: hosts"},
		{"reserved name", func(c *Config) { c.Parents[0].Name = "direct" }, "reserved"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.Parents = append([]ParentConfig(nil), cfg.Parents...)
			c.Routes = append([]RouteConfig(nil), cfg.Routes...)
			for i := range c.Routes {
				c.Routes[i].Match.Hosts = append([]string(nil), c.Routes[i].Match.Hosts...)
			}
			tt.mod(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one with %q", err, tt.want)
			}
		})
	}
}

// TestDecisionAllocs checks that a route decision (match and pick)
// allocates nothing.
func TestDecisionAllocs(t *testing.T) {
	tab := benchTable(t)
	for _, r := range benchRequests {
		if n := testing.AllocsPerRun(200, func() { decide(tab, r) }); n != 0 {
			t.Errorf("deciding %+v allocates %v times", r, n)
		}
	}
}

var benchRequests = []acl.Request{
	{Host: "www.example.com", Port: 443, Method: "CONNECT", Protocol: acl.Connect, User: "alice-session-42"},
	{Host: "api.corp.test", Port: 80, Method: "GET", Protocol: acl.HTTP, User: "bob"},
	{Host: "nomatch.test", Port: 8080, Method: "GET", Protocol: acl.HTTP},
}

func benchTable(tb testing.TB) *Table {
	tb.Helper()
	tab, err := New(tableConfig(Config{
		Parents: []ParentConfig{
			{Name: "a", URL: "http://127.0.0.1:3128"}, {Name: "b", URL: "http://127.0.0.1:3129"},
			{Name: "c", URL: "socks5://127.0.0.1:1080"},
		},
		Routes: []RouteConfig{
			{Name: "corp", Match: acl.Rule{Hosts: []string{".corp.test", "10.0.0.0/8"}}, Via: []string{"direct"}},
			{Name: "fleet", Match: acl.Rule{Users: []string{"alice-session-42"}}, Via: []string{"a", "b", "c"}, Select: "hash-session"},
			{Name: "web", Match: acl.Rule{Ports: []string{"443", "80"}}, Via: []string{"a", "b"}, Select: "round-robin"},
		},
	}))
	if err != nil {
		tb.Fatal(err)
	}
	return tab
}

var sink *Parent

func decide(tab *Table, r acl.Request) {
	if rt := tab.Match(r); rt != nil {
		sink, _ = rt.Pick(Key{Host: r.Host, User: r.User})
	}
}

// BenchmarkDecide measures a route decision on the keep-alive path: the
// route table's match and the parent's pick.
func BenchmarkDecide(b *testing.B) {
	tab := benchTable(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		decide(tab, benchRequests[i%len(benchRequests)])
	}
}

// TestProbes checks the active health check: a probe brings a parent
// that is down back up (a TCP connect, and a CONNECT to a target), puts
// a dead one down, and Close stops and joins the probe loops.
func TestProbes(t *testing.T) {
	live := fakeParent(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if req, err := http.ReadRequest(br); err == nil && req.Method == "CONNECT" {
			c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
		}
	})
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	const every = 5 * time.Millisecond
	tab, err := New(tableConfig(Config{Parents: []ParentConfig{
		{Name: "tcp", URL: "http://" + live, Probe: ProbeConfig{Interval: every}},
		{Name: "connect", URL: "http://" + live, Probe: ProbeConfig{Interval: every, Target: "origin.test:443"}},
		{Name: "dead", URL: "http://" + dead, Health: HealthConfig{MaxFails: 2}, Probe: ProbeConfig{Interval: every}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	down(tab.Parent("tcp"), now)
	down(tab.Parent("connect"), now)
	before := runtime.NumGoroutine()
	tab.Start(testDialer(t))
	waitUntil(t, "the probes to bring tcp and connect up and put dead down", func() bool {
		n := time.Now()
		return tab.Parent("tcp").Health().Up(n) && tab.Parent("connect").Health().Up(n) && !tab.Parent("dead").Health().Up(n)
	})
	if !tab.Healthy(time.Now()) {
		t.Error("Healthy = false with no route")
	}
	tab.Close() // joins the probe loops
	waitUntil(t, "as many goroutines as before Start", func() bool { return runtime.NumGoroutine() <= before })
}

// waitUntil polls cond until it holds, failing after 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
