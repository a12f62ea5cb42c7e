package server

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// The egress rig: rustle runs in namespace P, the origin in namespace O,
// joined by a veth pair; every address is from the documentation ranges
// and exists only inside the two namespaces.
//
//	P: vp 192.0.2.1/24 192.0.2.2/24 2001:db8:a::1/64 2001:db8:a::2/64
//	   lo 203.0.113.7/32 2001:db8::7/128, local routes 2001:db8:1::/64 (the prefix)
//	   and 198.51.100.0/24 (an IPv4 prefix and a freebind address), none
//	   for 198.18.7.7 (a freebind address without one)
//	   vx0 (one end of a second veth pair, no address nor route through it)
//	O: vo 192.0.2.100/24 2001:db8:a::100/64, routes back to 203.0.113.0/24,
//	   198.51.100.0/24, 198.18.7.7, 2001:db8::7 and 2001:db8:1::/64 through P
const (
	egressOrigin4 = "192.0.2.100"
	egressOrigin6 = "2001:db8:a::100"
	egressPrefix  = "2001:db8:1::/64"
	// egressLocal4 has a local route in P, as docs/operations.md says an
	// IPv4 prefix and a freebind address need; egressNoRoute4 has none.
	egressLocal4   = "198.51.100.0/24"
	egressNoRoute4 = "198.18.7.7"
	egressPort     = "8080"
)

// TestEgressNetns checks the source addresses upstream connections come
// from, as an origin in another namespace sees them: 1,000 connections
// through a /64 prefix come from 1,000 addresses of it, while one session
// key keeps one; the family follows the destination (an IPv4 origin gets
// the IPv4 bind address); an IPv4 prefix and a freebind address work with
// the local route docs/operations.md asks for, and not without it;
// bind_same connects from the address the client
// reached; a destination of a family with no source address is a 502
// (no-source); an interface binds the socket (through one that does not
// lead to the origin the connection fails); a pooled upstream stays with
// its session; users and groups take their rules' sources. The access
// log's source field is the address the origin saw.
func TestEgressNetns(t *testing.T) {
	if originNS, child := proxytest.NetnsChild(); child {
		egressChild(t, originNS)
		return
	}
	proxytest.RequireNetns(t)
	p := proxytest.NewNetns(t, "rustle-p")
	o := proxytest.NewNetns(t, "rustle-o")
	ip := func(args ...string) { t.Helper(); proxytest.IP(t, args...) }
	ip("-n", p, "link", "add", "vp", "type", "veth", "peer", "name", "vo", "netns", o)
	for _, a := range []string{"192.0.2.1/24", "192.0.2.2/24"} {
		ip("-n", p, "addr", "add", a, "dev", "vp")
	}
	for _, a := range []string{"2001:db8:a::1/64", "2001:db8:a::2/64"} {
		ip("-n", p, "addr", "add", a, "dev", "vp", "nodad")
	}
	ip("-n", p, "addr", "add", "203.0.113.7/32", "dev", "lo")
	ip("-n", p, "addr", "add", "2001:db8::7/128", "dev", "lo", "nodad")
	ip("-n", p, "link", "set", "vp", "up")
	ip("-n", p, "-6", "route", "add", "local", egressPrefix, "dev", "lo")
	ip("-n", p, "route", "add", "local", egressLocal4, "dev", "lo")
	ip("-n", p, "link", "add", "vx0", "type", "veth", "peer", "name", "vx1")
	ip("-n", p, "link", "set", "vx0", "up")
	ip("-n", o, "addr", "add", egressOrigin4+"/24", "dev", "vo")
	ip("-n", o, "addr", "add", egressOrigin6+"/64", "dev", "vo", "nodad")
	ip("-n", o, "link", "set", "vo", "up")
	ip("-n", o, "route", "add", "203.0.113.0/24", "via", "192.0.2.1")
	ip("-n", o, "route", "add", egressLocal4, "via", "192.0.2.1")
	ip("-n", o, "route", "add", egressNoRoute4+"/32", "via", "192.0.2.1")
	ip("-n", o, "-6", "route", "add", "2001:db8::7/128", "via", "2001:db8:a::1")
	ip("-n", o, "-6", "route", "add", egressPrefix, "via", "2001:db8:a::1")
	proxytest.RunInNetns(t, p, o)
}

// egressChild is TestEgressNetns inside namespace P, the origin's
// namespace being originNS.
func egressChild(t *testing.T, originNS string) {
	origin := startSourceOrigin(t, originNS)
	src := `
upstream = { max_idle_per_host = -1 }
timeouts = { connect = "3s" }

[auth]
users = [{ name = "alice-session-42", password = "pw" }, { name = "alice-session-43", password = "pw" },
  { name = "carol", password = "pw" }, { name = "dave-session-7", password = "pw" }, { name = "erin", password = "pw" }]

[acl.groups]
team = ["dave"]

[egress]
bind = ["2001:db8:1::/64", "203.0.113.7"]

[[egress.rules]]
users = ["carol"]
bind = ["2001:db8::7"]

[[egress.rules]]
groups = ["team"]
bind = ["192.0.2.2", "2001:db8:a::2"]

[[listen]]
name = "prefix"
address = "127.0.0.1:0"
auth = "none"

[[listen]]
name = "session"
address = "127.0.0.2:0"
auth = "basic"

[[listen]]
name = "same"
address = ":0"
auth = "none"
allow_open = true
egress = { bind_same = true }

[[listen]]
name = "only6"
address = "127.0.0.3:0"
auth = "none"
egress = { bind = ["2001:db8::7"] }

[[listen]]
name = "dummy"
address = "127.0.0.4:0"
auth = "none"
egress = { interface = "vx0" }

[[listen]]
name = "veth"
address = "127.0.0.5:0"
auth = "none"
egress = { interface = "vp", bind = ["192.0.2.2"] }

[[listen]]
name = "prefix4"
address = "127.0.0.8:0"
auth = "none"
egress = { bind = ["198.51.100.0/25"] }

[[listen]]
name = "freebind4"
address = "127.0.0.9:0"
auth = "none"
egress = { bind = ["198.51.100.200"], freebind = true }

[[listen]]
name = "noroute4"
address = "127.0.0.10:0"
auth = "none"
egress = { bind = ["198.18.7.7"], freebind = true }

[[routes]]
name = "erin"
users = ["erin", "carol"]
via = "direct"
egress = { bind = ["2001:db8:a::2", "192.0.2.2"] }
`
	cfg, err := config.Parse([]byte(src), "egress.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Workers = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	access := &logBuffer{}
	_, addrs := startLogged(t, cfg, slog.New(slog.DiscardHandler), access)
	url6 := "http://[" + egressOrigin6 + "]:" + egressPort + "/"
	url4 := "http://" + egressOrigin4 + ":" + egressPort + "/"

	// One connection first, so that the origin's namespace has resolved
	// its neighbour on the veth before the burst.
	if got, err := sourceVia(addrs["only6"], url6, ""); err != nil || got != "2001:db8::7" {
		t.Fatalf("warm-up through only6: source %q, %v; want 2001:db8::7", got, err)
	}

	t.Run("a prefix gives each connection its own address", func(t *testing.T) {
		prefix := netip.MustParsePrefix(egressPrefix)
		const n = 1000
		seen := make(map[string]bool)
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, n)
		work := make(chan int)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					got, err := sourceVia(addrs["prefix"], url6, "")
					if err != nil {
						errs <- err
						continue
					}
					a, err := netip.ParseAddr(got)
					if err != nil || !prefix.Contains(a) {
						errs <- fmt.Errorf("source %q is not in %s", got, prefix)
						continue
					}
					mu.Lock()
					seen[got] = true
					mu.Unlock()
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(seen) != n {
			t.Fatalf("%d connections came from %d addresses, want %d", n, len(seen), n)
		}
		if got := originSources(origin, prefix); got < n {
			t.Fatalf("the origin saw %d connections from the prefix, want %d", got, n)
		}
	})

	t.Run("the family follows the destination", func(t *testing.T) {
		if got, err := sourceVia(addrs["prefix"], url4, ""); err != nil || got != "203.0.113.7" {
			t.Fatalf("IPv4 origin: source %q, %v; want 203.0.113.7", got, err)
		}
	})

	t.Run("IPv4 prefixes and freebind addresses need a local route", func(t *testing.T) {
		prefix := netip.MustParsePrefix("198.51.100.0/25")
		for range 5 {
			got, err := sourceVia(addrs["prefix4"], url4, "")
			if a, perr := netip.ParseAddr(got); err != nil || perr != nil || !prefix.Contains(a) {
				t.Fatalf("IPv4 prefix with its local route: source %q, %v; want an address of %s", got, err, prefix)
			}
		}
		if got, err := sourceVia(addrs["freebind4"], url4, ""); err != nil || got != "198.51.100.200" {
			t.Fatalf("freebind address with its local route: source %q, %v; want 198.51.100.200", got, err)
		}
		// The origin answers 198.18.7.7 through P, whose kernel, with no
		// local route for it, does not take the answer in.
		if status, body, err := getVia(addrs["noroute4"], url4, ""); err != nil || status != 502 && status != 504 {
			t.Errorf("freebind address without a local route: %d %q %v; want 502 or 504", status, body, err)
		}
	})

	t.Run("a session key keeps its address", func(t *testing.T) {
		first := map[string]string{}
		for i := range 20 {
			for _, user := range []string{"alice-session-42", "alice-session-43"} {
				got, err := sourceVia(addrs["session"], url6, user)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					first[user] = got
				} else if got != first[user] {
					t.Fatalf("%s: connection %d from %s, the first from %s", user, i, got, first[user])
				}
			}
		}
		if first["alice-session-42"] == first["alice-session-43"] {
			t.Fatalf("two session keys share %s", first["alice-session-42"])
		}
	})

	_, port, _ := net.SplitHostPort(addrs["same"])
	t.Run("bind_same connects from the address the client reached", func(t *testing.T) {
		for _, tc := range []struct{ reached, url string }{
			{"2001:db8:a::2", url6}, {"2001:db8:a::1", url6}, {"192.0.2.2", url4}, {"192.0.2.1", url4},
		} {
			got, err := sourceVia(net.JoinHostPort(tc.reached, port), tc.url, "")
			if err != nil || got != tc.reached {
				t.Errorf("reached %s, %s: source %q, %v; want %s", tc.reached, tc.url, got, err, tc.reached)
			}
		}
	})

	t.Run("a family without a source address is a 502", func(t *testing.T) {
		for _, tc := range []struct{ proxy, url string }{
			{net.JoinHostPort("192.0.2.2", port), url6}, // bind_same reached over IPv4
			{addrs["only6"], url4},
		} {
			status, body, err := getVia(tc.proxy, tc.url, "")
			if err != nil || status != 502 || !strings.Contains(body, "no source address") {
				t.Errorf("through %s to %s: %d %q %v; want 502 naming the missing source", tc.proxy, tc.url, status, body, err)
			}
		}
	})

	t.Run("interface", func(t *testing.T) {
		// Bound to vx0, the SYN goes out there (on-link, unanswered)
		// and never reaches the origin, which it would unbound.
		if status, body, err := getVia(addrs["dummy"], url4, ""); err != nil || status != 502 && status != 504 {
			t.Errorf("bound to an interface that does not lead to the origin: %d %q %v; want 502 or 504", status, body, err)
		}
		if got, err := sourceVia(addrs["veth"], url4, ""); err != nil || got != "192.0.2.2" {
			t.Errorf("bound to the veth: source %q, %v; want 192.0.2.2", got, err)
		}
	})

	t.Run("a pooled upstream keeps to its session", func(t *testing.T) {
		src := `
[auth]
users = [{ name = "bob-session-1", password = "pw" }, { name = "bob-session-2", password = "pw" }]
[egress]
bind = ["2001:db8:1::/64"]
[[listen]]
name = "pooled"
address = "127.0.0.6:0"
`
		cfg, err := config.Parse([]byte(src), "pool.toml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Workers = 1
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		_, paddrs := startLogged(t, cfg, slog.New(slog.DiscardHandler), &logBuffer{})
		get := func(user string) string {
			t.Helper()
			status, body, err := getViaKeep(paddrs["pooled"], url6, user, true)
			if err != nil || status != 200 {
				t.Fatalf("%s: %d %q %v", user, status, body, err)
			}
			return body
		}
		one := get("bob-session-1")
		if two := get("bob-session-2"); two == one {
			t.Fatalf("bob-session-2 came from bob-session-1's address %s: its pooled upstream was reused", one)
		}
		if again := get("bob-session-1"); again != one {
			t.Fatalf("bob-session-1 came from %s, then from %s", one, again)
		}
	})

	t.Run("a pooled upstream is its user's and session's only", func(t *testing.T) {
		// erin and frank share a group's prefix; zoe has no source of
		// her own. A connection erin's session made, kept by her client
		// connection or pooled, is reused by none of the others, and
		// stays pooled for her session.
		src := `
[auth]
users = [{ name = "erin", password = "pw" }, { name = "frank", password = "pw" }, { name = "zoe", password = "pw" }]
[acl.groups]
shared = ["erin", "frank"]
[[egress.rules]]
groups = ["shared"]
bind = ["` + egressPrefix + `"]
[[listen]]
name = "shared"
address = "127.0.0.7:0"
`
		cfg, err := config.Parse([]byte(src), "shared.toml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Workers = 1
		cfg.AllowPrivate = []string{"2001:db8::/32"}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		srv, saddrs := startLogged(t, cfg, slog.New(slog.DiscardHandler), &logBuffer{})
		url := "http://[" + egressOrigin6 + "]:" + egressPort + "/addrport"
		proxy := saddrs["shared"]
		get := func(user string) string {
			t.Helper()
			status, body, err := getViaKeep(proxy, url, user, true)
			if err != nil || status != 200 {
				t.Fatalf("%s: %d %q %v", user, status, body, err)
			}
			return body
		}
		erin := get("erin-session-5")
		proxytest.WaitFor(t, "erin's upstream in the pool", func() bool { return srv.pool.Len() == 1 })
		for _, user := range []string{"frank", "erin", "zoe"} {
			if got := get(user); got == erin {
				t.Errorf("%s went out on erin-session-5's pooled connection, from %s", user, got)
			}
		}
		proxytest.WaitFor(t, "every upstream in the pool", func() bool { return srv.pool.Len() == 4 })
		if again := get("erin-session-5"); again != erin {
			t.Errorf("erin-session-5 came from %s, then from %s: her pooled connection was not kept for her", erin, again)
		}

		// One client connection, erin's session then frank: the
		// upstream the first request left is not frank's either.
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var seen []string
		for _, user := range []string{"erin-session-5", "frank"} {
			req, err := http.NewRequest("GET", url, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Proxy-Authorization", basicValue(user, "pw"))
			if err := req.WriteProxy(c); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, req)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			_, err = bufio.NewReader(resp.Body).WriteTo(&b)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s on one client connection: %d %q %v", user, resp.StatusCode, b.String(), err)
			}
			seen = append(seen, strings.TrimSpace(b.String()))
		}
		if seen[1] == seen[0] {
			t.Errorf("frank, after erin-session-5 on the same client connection, went out on her upstream, from %s", seen[1])
		}
	})

	t.Run("the access log shows the source", func(t *testing.T) {
		prefix := netip.MustParsePrefix(egressPrefix)
		var fromPrefix, fixed, noSource int
		waitFor(t, "the access log", func() bool { return len(accessRecords(t, access)) >= 1+1000+1+40+4+2+2 })
		for _, rec := range accessRecords(t, access) {
			src, _ := netip.ParseAddrPort(rec.Source)
			switch {
			case rec.Status == 200 && prefix.Contains(src.Addr()):
				fromPrefix++
			case rec.Status == 200 && src.Addr() == netip.MustParseAddr("203.0.113.7"):
				fixed++
			case rec.Reason == "no-source":
				noSource++
			}
		}
		if fromPrefix != 1000+40 || fixed != 1 || noSource != 2 {
			t.Fatalf("records: %d with a source from the prefix, %d from 203.0.113.7, %d no-source; want 1040, 1 and 2",
				fromPrefix, fixed, noSource)
		}
	})

	t.Run("users and groups have sources of their own", func(t *testing.T) {
		for _, tc := range []struct{ user, url, want string }{
			{"carol", url6, "2001:db8::7"},
			{"dave-session-7", url6, "2001:db8:a::2"}, // the group's rule, by the name without its session key
			{"dave-session-7", url4, "192.0.2.2"},
			{"alice-session-42", url4, "203.0.113.7"}, // no rule: the global bind
		} {
			if got, err := sourceVia(addrs["session"], tc.url, tc.user); err != nil || got != tc.want {
				t.Errorf("%s to %s: source %q, %v; want %s", tc.user, tc.url, got, err, tc.want)
			}
		}
		if status, body, err := getVia(addrs["session"], url4, "carol"); err != nil || status != 502 {
			t.Errorf("carol (IPv6 source only) to an IPv4 origin: %d %q %v; want 502", status, body, err)
		}
	})

	t.Run("a route has a source of its own", func(t *testing.T) {
		for _, tc := range []struct{ user, url, want string }{
			{"erin", url4, "192.0.2.2"},     // the route's, not the global 203.0.113.7
			{"erin", url6, "2001:db8:a::2"}, // the route's, not the global prefix
			{"carol", url6, "2001:db8::7"},  // her own rule wins over the route's
		} {
			if got, err := sourceVia(addrs["session"], tc.url, tc.user); err != nil || got != tc.want {
				t.Errorf("%s to %s: source %q, %v; want %s", tc.user, tc.url, got, err, tc.want)
			}
		}
	})
}

// sourceOrigin answers every request with the address its connection
// came from.
type sourceOrigin struct {
	mu   sync.Mutex
	seen []netip.Addr // guarded by mu
}

// startSourceOrigin serves in namespace ns on [::]:8080 (IPv4 too); at
// /addrport it answers with the address and the port.
func startSourceOrigin(t *testing.T, ns string) *sourceOrigin {
	t.Helper()
	ln := proxytest.ListenIn(t, ns, "tcp", ":"+egressPort)
	o := &sourceOrigin{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		a := ap.Addr().Unmap()
		o.mu.Lock()
		o.seen = append(o.seen, a)
		o.mu.Unlock()
		if r.URL.Path == "/addrport" {
			fmt.Fprint(w, netip.AddrPortFrom(a, ap.Port()))
			return
		}
		fmt.Fprint(w, a)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return o
}

// originSources counts the connections the origin saw from p.
func originSources(o *sourceOrigin, p netip.Prefix) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, a := range o.seen {
		if p.Contains(a) {
			n++
		}
	}
	return n
}

// sourceVia gets url through the proxy at proxy (as user, password "pw",
// when user is not "") and returns the source address the origin saw.
func sourceVia(proxy, url, user string) (string, error) {
	status, body, err := getVia(proxy, url, user)
	if err == nil && status != 200 {
		err = fmt.Errorf("status %d: %s", status, body)
	}
	return body, err
}

// getVia gets url through the proxy at proxy on a connection of its own.
func getVia(proxy, url, user string) (int, string, error) {
	return getViaKeep(proxy, url, user, false)
}

// getViaKeep is getVia, asking for keep-alive when keep is set (the
// client connection is closed all the same once the answer is read).
func getViaKeep(proxy, url, user string, keep bool) (int, string, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Close = !keep
	if user != "" {
		req.Header.Set("Proxy-Authorization", basicValue(user, "pw"))
	}
	if err := req.WriteProxy(c); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, strings.TrimSpace(b.String()), err
}
