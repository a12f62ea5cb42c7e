package limits_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	a = netip.MustParseAddr("192.0.2.1")
	b = netip.MustParseAddr("192.0.2.2")
)

// newLimiter returns a limiter of cfg, its settings left zero given
// rustle's defaults (proxytest.LimitsConfig), on a clock of the test's.
func newLimiter(t *testing.T, cfg limits.Config) (*limits.Limiter, *clock) {
	t.Helper()
	l, err := limits.New(proxytest.LimitsConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	l.SetClock(c.now)
	return l, c
}

func admit(t *testing.T, l *limits.Limiter, addr netip.Addr, want limits.Verdict) {
	t.Helper()
	if v, _ := l.Admit(addr); v != want {
		t.Fatalf("Admit(%s) = %v, want %v", addr, v, want)
	}
}

func TestConnectionLimits(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{MaxConns: 3, MaxConnsPerClient: 2})
	admit(t, l, a, limits.OK)
	admit(t, l, netip.MustParseAddr("::ffff:192.0.2.1"), limits.OK) // the same client
	admit(t, l, a, limits.TooManyFromClient)
	admit(t, l, b, limits.OK)
	admit(t, l, b, limits.TooMany)
	l.Release(a)
	admit(t, l, b, limits.OK)
	if n := l.Conns(); n != 3 {
		t.Errorf("Conns() = %d, want 3", n)
	}
	for _, x := range []netip.Addr{a, b, b} {
		l.Release(x)
	}
	if n := l.Conns(); n != 0 {
		t.Errorf("Conns() = %d after releasing all, want 0", n)
	}
}

func TestConnectionRate(t *testing.T) {
	l, clk := newLimiter(t, limits.Config{ConnRate: 2, ConnBurst: 3})
	for range 3 {
		admit(t, l, a, limits.OK)
	}
	admit(t, l, a, limits.TooFast)
	admit(t, l, b, limits.OK) // other clients have their own bucket
	clk.advance(500 * time.Millisecond)
	admit(t, l, a, limits.OK)
	admit(t, l, a, limits.TooFast)
	clk.advance(10 * time.Second)
	for range 3 {
		admit(t, l, a, limits.OK)
	}
	admit(t, l, a, limits.TooFast)
}

// name is a user name tried, as the proxies pass it.
func name(s string) []byte { return []byte(s) }

// TestAuthFailures checks the cool-down of one user name at one address:
// it starts at AuthFailures failures within the window, refuses that name
// there until it ends, and leaves other names at the address, the name at
// other addresses and the address's new connections alone.
func TestAuthFailures(t *testing.T) {
	var logs bytes.Buffer
	l, clk := newLimiter(t, limits.Config{AuthFailures: 3, AuthFailuresPerAddress: 10, AuthWindow: time.Minute,
		AuthCooldown: 5 * time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if d, _ := l.AuthFailed(a, name("alice")); d != 0 {
		t.Fatalf("first failure: cool-down %v", d)
	}
	clk.advance(2 * time.Minute) // the window starts again
	l.AuthFailed(a, name("alice"))
	l.AuthFailed(a, name("alice"))
	if d := l.CoolingDownAs(a, name("alice")); d != 0 {
		t.Fatalf("two failures in the window: cool-down %v", d)
	}
	if d, _ := l.AuthFailed(a, name("alice")); d != 5*time.Minute {
		t.Fatalf("third failure in the window: cool-down %v, want 5m", d)
	}
	line := regexp.MustCompile(`(?m)^time=\S+ level=WARN msg="auth failures of one user name" client=192\.0\.2\.1 user=alice failures=3 window=1m0s cooldown=5m0s$`)
	if !line.MatchString(logs.String()) {
		t.Errorf("log %q lacks the user name's cool-down line", logs.String())
	}
	if strings.Contains(logs.String(), `msg="auth failures" `) {
		t.Errorf("one name's cool-down logged the address's (fail2ban) line: %q", logs.String())
	}
	clk.advance(time.Minute)
	for _, tt := range []struct {
		addr netip.Addr
		name string
		want time.Duration
	}{
		{a, "alice", 4 * time.Minute},
		{netip.MustParseAddr("::ffff:192.0.2.1"), "alice", 4 * time.Minute}, // the same address
		{a, "bob", 0},
		{a, "alicE", 0},
		{a, "", 0},
		{b, "alice", 0},
	} {
		if d := l.CoolingDownAs(tt.addr, name(tt.name)); d != tt.want {
			t.Errorf("CoolingDownAs(%s, %q) = %v, want %v", tt.addr, tt.name, d, tt.want)
		}
	}
	if d := l.CoolingDown(a); d != 0 {
		t.Errorf("the address cools down (%v) for one name's failures", d)
	}
	admit(t, l, a, limits.OK)
	// Failures while cooling down are not counted: were they, these
	// would reach the address's bound.
	for range 20 {
		if d, _ := l.AuthFailed(a, name("alice")); d != 4*time.Minute {
			t.Fatalf("failure while cooling down: %v, want 4m", d)
		}
	}
	if d, _ := l.AuthFailed(a, name("bob")); d != 0 || l.CoolingDown(a) != 0 {
		t.Errorf("bob's first failure: %v, address %v; want neither cooling down", d, l.CoolingDown(a))
	}
	if n := bytes.Count(logs.Bytes(), []byte("auth failures")); n != 1 {
		t.Errorf("%d warnings, want one per cool-down", n)
	}
	clk.advance(4 * time.Minute)
	if d := l.CoolingDownAs(a, name("alice")); d != 0 {
		t.Errorf("alice still cooling down (%v) after the cool-down", d)
	}

	off, _ := newLimiter(t, limits.Config{})
	for range 100 {
		if d, _ := off.AuthFailed(a, name("alice")); d != 0 {
			t.Fatalf("AuthFailed with the check off = %v", d)
		}
	}
	if d := off.CoolingDownAs(a, name("alice")); d != 0 {
		t.Fatalf("CoolingDownAs with the check off = %v", d)
	}
}

// TestAuthFailuresPerAddress checks the bound on one address guessing
// many names: AuthFailuresPerAddress failures, whatever the names, cool
// the whole address down, which then refuses every name and new
// connections, and logs the fail2ban line once.
func TestAuthFailuresPerAddress(t *testing.T) {
	var logs bytes.Buffer
	l, clk := newLimiter(t, limits.Config{AuthFailures: 3, AuthFailuresPerAddress: 5, AuthWindow: time.Minute,
		AuthCooldown: 5 * time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 4 {
		if d, _ := l.AuthFailed(a, name(fmt.Sprintf("user%d", i))); d != 0 {
			t.Fatalf("failure %d: cool-down %v", i+1, d)
		}
	}
	if d := l.CoolingDown(a); d != 0 {
		t.Fatalf("four failures: the address cools down (%v)", d)
	}
	if d, started := l.AuthFailed(a, name("user4")); d != 5*time.Minute || !started {
		t.Fatalf("fifth failure: cool-down %v, started %v; want 5m, started", d, started)
	}
	if d, started := l.AuthFailed(a, name("user5")); d != 5*time.Minute || started {
		t.Fatalf("a failure during the cool-down: %v, started %v; want 5m, not started by it", d, started)
	}
	clk.advance(time.Minute)
	if d := l.CoolingDown(a); d != 4*time.Minute {
		t.Errorf("CoolingDown(a) = %v, want 4m", d)
	}
	if d := l.CoolingDownAs(a, name("bob")); d != 4*time.Minute {
		t.Errorf("CoolingDownAs(a, bob) = %v, want 4m: the address refuses every name", d)
	}
	if v, retry := l.Admit(a); v != limits.CoolingDown || retry != 4*time.Minute {
		t.Errorf("Admit while cooling down = %v, %v", v, retry)
	}
	admit(t, l, b, limits.OK)
	if d := l.CoolingDownAs(b, name("user0")); d != 0 {
		t.Errorf("another address cools down: %v", d)
	}
	fail2ban := regexp.MustCompile(`(?m)^time=\S+ level=WARN msg="auth failures" client=192\.0\.2\.1 failures=5 window=1m0s cooldown=5m0s$`)
	if !fail2ban.MatchString(logs.String()) {
		t.Errorf("log %q lacks the fail2ban line", logs.String())
	}
	if n := bytes.Count(logs.Bytes(), []byte("auth failures")); n != 1 {
		t.Errorf("%d warnings, want one", n)
	}
	clk.advance(4 * time.Minute)
	admit(t, l, a, limits.OK)
}

// TestAuthNamesBounded checks that the table of user names tried stays
// within its bounds whatever names clients send, that it forgets names
// not cooling down first, and that a failure finding no room still counts
// towards its address.
func TestAuthNamesBounded(t *testing.T) {
	names := func(t *testing.T, l *limits.Limiter, max int) {
		t.Helper()
		counted, held := l.Names()
		if counted != held || held > max {
			t.Fatalf("names counted %d, held %d; want equal and at most %d", counted, held, max)
		}
	}
	t.Run("per address", func(t *testing.T) {
		l, _ := newLimiter(t, limits.Config{AuthFailures: 2, AuthNamesPerClient: 4})
		for i := range 1000 {
			l.AuthFailed(a, name(fmt.Sprintf("guess%d", i)))
			names(t, l, 4)
		}
		// The newest names are kept: a second failure cools one down.
		if d, _ := l.AuthFailed(a, name("guess999")); d == 0 {
			t.Error("the newest name forgotten")
		}
	})
	t.Run("names cooling down are kept", func(t *testing.T) {
		l, _ := newLimiter(t, limits.Config{AuthFailures: 1, AuthFailuresPerAddress: 8, AuthNamesPerClient: 4})
		for i := range 7 {
			l.AuthFailed(a, name(fmt.Sprintf("user%d", i))) // each cools its name down
			names(t, l, 4)
		}
		for i := range 4 {
			if d := l.CoolingDownAs(a, name(fmt.Sprintf("user%d", i))); d == 0 {
				t.Errorf("user%d forgotten while cooling down", i)
			}
		}
		if d := l.CoolingDownAs(a, name("user5")); d != 0 {
			t.Errorf("user5, for which there was no room, cools down (%v)", d)
		}
		// The failures without room counted towards the address.
		if d, _ := l.AuthFailed(a, name("user7")); d == 0 || l.CoolingDown(a) == 0 {
			t.Error("the eighth failure did not cool the address down")
		}
	})
	t.Run("in all", func(t *testing.T) {
		l, clk := newLimiter(t, limits.Config{AuthFailures: 3, AuthNames: 8, AuthWindow: time.Minute})
		for i := range 100 {
			addr := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
			l.AuthFailed(addr, name("alice"))
			l.AuthFailed(addr, name("bob"))
			names(t, l, 8)
		}
		clk.advance(2 * time.Minute) // the failures leave the window
		l.AuthFailed(b, name("carol"))
		l.AuthFailed(b, name("carol"))
		if d, _ := l.AuthFailed(b, name("carol")); d == 0 {
			t.Error("no room for a new name once the others' windows had passed")
		}
		names(t, l, 8)
	})
}

func TestUserConns(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{MaxConnsPerUser: 2})
	if !l.UserConn("alice") || !l.UserConn("alice") || !l.UserConn("bob") {
		t.Fatal("UserConn refused within the limit")
	}
	if l.UserConn("alice") {
		t.Fatal("UserConn allowed a third connection")
	}
	l.UserDone("alice")
	if !l.UserConn("alice") {
		t.Fatal("UserConn refused after UserDone")
	}
	unlimited, _ := newLimiter(t, limits.Config{})
	for range 10 {
		if !unlimited.UserConn("alice") {
			t.Fatal("UserConn refused without a limit")
		}
	}
}

func TestSweep(t *testing.T) {
	l, clk := newLimiter(t, limits.Config{ConnRate: 1, AuthFailures: 5})
	for i := range 100 {
		addr := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		admit(t, l, addr, limits.OK)
		l.Release(addr)
	}
	l.AuthFailed(a, name("alice"))
	admit(t, l, b, limits.OK) // b stays connected
	clk.advance(time.Hour)
	admit(t, l, netip.MustParseAddr("203.0.113.1"), limits.OK) // sweeps
	if n := l.Clients(); n != 2 {
		t.Errorf("%d client addresses kept after the sweep, want 2 (b and the new one)", n)
	}
	if counted, held := l.Names(); counted != 0 || held != 0 {
		t.Errorf("%d (%d) user names kept after the sweep, want 0", counted, held)
	}
}

func TestThrottle(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{UserBytesPerSecond: 1000, UserBytesBurst: 500})
	if l.Throttle("") != nil {
		t.Error("Throttle(\"\") is not nil")
	}
	bk := l.Throttle("alice")
	if bk == nil || l.Throttle("alice") != bk || l.Throttle("bob") == bk {
		t.Fatal("Throttle does not return one bucket per user")
	}
	if bk.Burst() != 500 {
		t.Errorf("Burst() = %d", bk.Burst())
	}
	clk := newClock()
	bk.SetClock(clk.now)
	if d := bk.Take(400); d != 0 {
		t.Errorf("Take(400) of 500 = %v", d)
	}
	if d := bk.Take(600); d != 500*time.Millisecond {
		t.Errorf("Take(600) with 100 left = %v, want 500ms", d)
	}
	clk.advance(time.Second) // pays the debt of 500 and refills 500
	if d := bk.Take(500); d != 0 {
		t.Errorf("Take(500) after a second = %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := bk.Wait(ctx, 1000); err == nil {
		t.Error("Wait with a done context and a debt returned nil")
	}
	none, _ := newLimiter(t, limits.Config{})
	if none.Throttle("alice") != nil {
		t.Error("Throttle without a byte limit is not nil")
	}
}

func TestVerdictString(t *testing.T) {
	for v := limits.OK; v <= limits.CoolingDown; v++ {
		if s := v.String(); s == "" || s == "unknown" {
			t.Errorf("Verdict(%d).String() = %q", v, s)
		}
	}
}

func BenchmarkAdmitRelease(b *testing.B) {
	l, err := limits.New(limits.Config{MaxConns: 1 << 20, MaxConnsPerClient: 1 << 20, ConnRate: 1e9, ConnBurst: 2e9})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		l.Admit(a)
		l.Release(a)
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// TestRelayPaced relays 64 KiB each way through a paced relay and checks
// that both arrive whole, half-closes included, no faster than the bucket
// allows.
func TestRelayPaced(t *testing.T) {
	client, a := tcpPair(t)
	b, upstream := tcpPair(t)
	bucket := limits.NewBucket(1<<20, 16<<10)
	start := time.Now()
	var wg sync.WaitGroup
	var up, down int64
	wg.Go(func() { up, down = limits.RelayPaced(context.Background(), a, b, bucket, 10*time.Second, nil) })
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	echoed := make(chan []byte, 1)
	go func() {
		got, _ := io.ReadAll(upstream)
		upstream.Write(got)
		upstream.(*net.TCPConn).CloseWrite()
		echoed <- got
	}()
	if _, err := client.Write(data); err != nil {
		t.Fatal(err)
	}
	client.(*net.TCPConn).CloseWrite()
	back, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-echoed; !bytes.Equal(got, data) || !bytes.Equal(back, data) {
		t.Errorf("relayed %d bytes up and %d down, want %d each way", len(got), len(back), len(data))
	}
	wg.Wait()
	if up != int64(len(data)) || down != int64(len(data)) {
		t.Errorf("RelayPaced returned %d bytes up and %d down, want %d each way", up, down, len(data))
	}
	// 128 KiB at 1 MiB/s from a 16 KiB bucket takes at least 107ms.
	if el := time.Since(start); el < 90*time.Millisecond {
		t.Errorf("128 KiB relayed in %v, faster than the bucket allows", el)
	}
}

// TestExtra counts further upstreams against MaxConns and the user's
// limit, and gives them back.
func TestExtra(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{MaxConns: 3, MaxConnsPerUser: 2})
	addr := netip.MustParseAddr("192.0.2.1")
	if v, _ := l.Admit(addr); v != limits.OK {
		t.Fatalf("Admit: %v", v)
	}
	if !l.UserConn("u") {
		t.Fatal("UserConn(u) refused")
	}
	steps := []struct {
		name string
		user string
		want limits.Verdict
	}{
		{"u's second", "u", limits.OK},
		{"u's third", "u", limits.TooManyForUser},
		{"anonymous fills max_connections", "", limits.OK},
		{"past max_connections", "", limits.TooMany},
	}
	for _, s := range steps {
		if got := l.Extra(s.user); got != s.want {
			t.Fatalf("%s: Extra(%q) = %v, want %v", s.name, s.user, got, s.want)
		}
	}
	if v, _ := l.Admit(addr); v != limits.TooMany {
		t.Fatalf("Admit with max_connections held by extras: %v, want limits.TooMany", v)
	}
	l.ExtraDone("u")
	l.ExtraDone("")
	if got := l.Conns(); got != 1 {
		t.Fatalf("Conns after ExtraDone: %d, want 1", got)
	}
	if got := l.Extra("u"); got != limits.OK {
		t.Fatalf("Extra(u) after ExtraDone: %v", got)
	}
}

// TestSharedUserConns checks that the per-user connection limit counts
// the connections other instances report, on UserConn and Extra alike.
func TestSharedUserConns(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{MaxConnsPerUser: 4})
	others := map[string]int{"alice": 3}
	l.SetShared(func(user string) int { return others[user] })
	if !l.UserConn("alice") {
		t.Fatal("alice's first connection here (3 elsewhere) refused")
	}
	if l.UserConn("alice") {
		t.Error("alice's fifth connection in all admitted")
	}
	if l.Extra("alice") != limits.TooManyForUser {
		t.Error("a further upstream of alice past the shared limit admitted")
	}
	for range 4 {
		if !l.UserConn("bob") {
			t.Fatal("bob, with none elsewhere, refused within 4")
		}
	}
	got := map[string]int{}
	l.UserConns(func(user string, n int) { got[user] = n })
	if got["alice"] != 1 || got["bob"] != 4 || len(got) != 2 {
		t.Errorf("UserConns = %v, want alice 1, bob 4", got)
	}
	l.SetShared(nil)
	if !l.UserConn("alice") {
		t.Error("alice refused with the others' counts gone")
	}
}

// TestNewRefusesMissingSettings checks that New refuses a limit whose
// settings the configuration fills (config.SetDefaults) and that were
// left zero, and negative values, instead of choosing values of its own
// (it used to default the burst, the window and the cool-down, a second
// place for defaults the configuration already sets).
func TestNewRefusesMissingSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  limits.Config
		want string // "" = accepted
	}{
		{"nothing on", limits.Config{}, ""},
		{"connection rate without burst", limits.Config{ConnRate: 2}, "needs a burst of at least 1"},
		{"connection rate with burst", limits.Config{ConnRate: 2, ConnBurst: 4}, ""},
		{"auth failures without window", limits.Config{AuthFailures: 3, AuthCooldown: time.Minute}, "need a window"},
		{"auth failures without cool-down", limits.Config{AuthFailures: 3, AuthWindow: time.Minute}, "need a cool-down"},
		{"address failures without window", limits.Config{AuthFailuresPerAddress: 3, AuthCooldown: time.Minute}, "need a window"},
		{"auth failures with both", limits.Config{AuthFailures: 3, AuthWindow: time.Minute, AuthCooldown: time.Minute}, ""},
		{"byte rate without burst", limits.Config{UserBytesPerSecond: 1000}, "needs a burst"},
		{"byte rate with burst", limits.Config{UserBytesPerSecond: 1000, UserBytesBurst: 500}, ""},
		{"negative", limits.Config{MaxConnsPerClient: -1}, "negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := limits.New(tt.cfg)
			switch {
			case tt.want == "" && (err != nil || l == nil):
				t.Fatalf("New = %v, %v; want a limiter", l, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("New = %v, %v; want an error with %q", l, err, tt.want)
			}
		})
	}
}
