package dialer

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// pair returns the client end of a loopback TCP connection; the server
// end is closed when the test ends.
func pair(t *testing.T, ln net.Listener) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestPoolGetPut(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{MaxIdlePerHost: 2, MaxIdle: 3, IdleTimeout: time.Minute})
	t.Cleanup(func() { p.Close() })

	if c := p.Get([]byte("a:1"), Owner{}); c != nil {
		t.Fatal("Get on an empty pool returned a connection")
	}
	c1, c2, c3 := pair(t, ln), pair(t, ln), pair(t, ln)
	if !p.Put("a:1", Owner{}, c1) || !p.Put("a:1", Owner{}, c2) {
		t.Fatal("Put refused below the per-host limit")
	}
	if p.Put("a:1", Owner{}, c3) {
		t.Fatal("Put kept a third connection for one host with MaxIdlePerHost 2")
	}
	c4, c5 := pair(t, ln), pair(t, ln)
	if !p.Put("b:1", Owner{}, c4) {
		t.Fatal("Put refused for another host below MaxIdle")
	}
	if p.Put("c:1", Owner{}, c5) {
		t.Fatal("Put kept a connection past MaxIdle")
	}
	if got := p.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}
	// Most recent first.
	if got := p.Get([]byte("a:1"), Owner{}); got != c2 {
		t.Fatal("Get did not return the most recently put connection")
	}
	if got := p.Get([]byte("a:1"), Owner{}); got != c1 {
		t.Fatal("Get did not return the remaining connection")
	}
	if got := p.Get([]byte("a:1"), Owner{}); got != nil {
		t.Fatal("Get returned a connection from an empty host list")
	}
	hits, misses := p.Stats()
	if hits != 2 || misses != 2 {
		t.Errorf("Stats = %d hits, %d misses; want 2, 2", hits, misses)
	}
}

// TestPoolOwners: a connection is handed out only to a Get of the owner
// it was kept for (newest first among its owner's); a Get by anyone else
// leaves it pooled, open, for its owner. Owners without a user differ
// by client address, and a user's owner is not the owner of the client
// address that names the same string.
func TestPoolOwners(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{IdleTimeout: time.Minute})
	t.Cleanup(func() { p.Close() })
	erin := Owner{User: "erin-session-5"}
	frank := Owner{User: "frank"}
	from1 := Owner{Client: netip.MustParseAddr("127.0.0.1")}
	erin1, erin2, frankC, anon1, anyone := pair(t, ln), pair(t, ln), pair(t, ln), pair(t, ln), pair(t, ln)
	p.Put("o:80", erin, erin1)
	p.Put("o:80", erin, erin2)
	p.Put("o:80", frank, frankC)
	p.Put("o:80", from1, anon1)
	p.Put("o:80", Owner{}, anyone)
	for _, owner := range []Owner{{User: "erin"}, {User: "erin-session-6"}, {User: "zoe"}, {User: "127.0.0.1"},
		{Client: netip.MustParseAddr("127.0.0.2")}, {Client: netip.MustParseAddr("::1")}} {
		if got := p.Get([]byte("o:80"), owner); got != nil {
			t.Errorf("Get for %+v returned a connection kept for another owner", owner)
		}
	}
	if n := p.Len(); n != 5 {
		t.Fatalf("Len = %d after Gets by other owners, want 5: they stay pooled", n)
	}
	for _, c := range []net.Conn{erin1, erin2, frankC, anon1, anyone} {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatalf("a connection kept for its owner was closed: %v", err)
		}
	}
	for _, tc := range []struct {
		owner Owner
		want  net.Conn
	}{
		{erin, erin2}, // the newest of hers, past frank's and the others'
		{Owner{}, anyone},
		{erin, erin1},
		{erin, nil},
		{from1, anon1},
		{frank, frankC},
	} {
		if got := p.Get([]byte("o:80"), tc.owner); got != tc.want {
			t.Errorf("Get for %+v = %v, want %v", tc.owner, got, tc.want)
		}
	}
	if n := p.Len(); n != 0 {
		t.Errorf("Len = %d, want 0", n)
	}
}

// TestPoolRetain checks that Retain closes and drops exactly the idle
// connections its function refuses.
func TestPoolRetain(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{IdleTimeout: time.Minute})
	t.Cleanup(func() { p.Close() })
	a1, a2, b1 := pair(t, ln), pair(t, ln), pair(t, ln)
	p.Put("a:1", Owner{}, a1)
	p.Put("a:1", Owner{}, a2)
	p.Put("b:1", Owner{}, b1)
	if n := p.Retain(func(c *net.TCPConn) bool { return c == a1 }); n != 2 {
		t.Errorf("Retain closed %d, want 2", n)
	}
	if got := p.Len(); got != 1 {
		t.Errorf("Len = %d after Retain, want 1", got)
	}
	if _, err := a2.Write([]byte("x")); err == nil {
		t.Error("a dropped connection is still open")
	}
	if got := p.Get([]byte("a:1"), Owner{}); got != a1 {
		t.Error("the kept connection is not handed out")
	}
	if got := p.Get([]byte("b:1"), Owner{}); got != nil {
		t.Error("a dropped host still hands out a connection")
	}
}

func TestPoolGetAllocs(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{})
	t.Cleanup(func() { p.Close() })
	c := pair(t, ln)
	key := []byte("origin:80")
	p.Put(string(key), Owner{}, c)
	allocs := testing.AllocsPerRun(100, func() {
		got := p.Get(key, Owner{})
		p.Put("origin:80", Owner{}, got)
	})
	// Put's constant key is not converted; Get must not allocate.
	if allocs != 0 {
		t.Errorf("Get+Put allocate %v times per run, want 0", allocs)
	}
}

func TestPoolIdleTimeout(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{IdleTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { p.Close() })
	c := pair(t, ln)
	p.Put("a:1", Owner{}, c)
	time.Sleep(80 * time.Millisecond)
	if got := p.Get([]byte("a:1"), Owner{}); got != nil {
		t.Fatal("Get returned a connection idle past the timeout")
	}
	// The expired connection was closed.
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("expired connection still open")
	}
}

func TestPoolReaper(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{IdleTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { p.Close() })
	p.Put("a:1", Owner{}, pair(t, ln))
	deadline := time.Now().Add(5 * time.Second)
	for p.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("reaper did not close the idle connection")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPoolClose(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{})
	c := pair(t, ln)
	p.Put("a:1", Owner{}, c)
	p.Close()
	p.Close() // idempotent
	if p.Len() != 0 {
		t.Fatal("Close left idle connections")
	}
	if p.Put("a:1", Owner{}, pair(t, ln)) {
		t.Fatal("Put after Close kept the connection")
	}
}

func TestDialErrors(t *testing.T) {
	ln := listen(t)
	closed := ln.Addr().String()
	ln.Close()
	d := newDialer(t, Config{Timeout: 2 * time.Second})
	tests := []struct {
		name, addr string
		timeout    bool
		reason     string
	}{
		{"refused", closed, false, "refused"},
		{"no such host", "no-such-host.invalid:80", false, "cannot resolve"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.Dial(context.Background(), tt.addr)
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("Dial error %v is not a *dialer.Error", err)
			}
			if de.Timeout != tt.timeout {
				t.Errorf("Timeout = %v, want %v", de.Timeout, tt.timeout)
			}
			if !strings.Contains(de.Reason(), tt.reason) {
				t.Errorf("Reason() = %q, want it to contain %q", de.Reason(), tt.reason)
			}
			if !strings.HasPrefix(de.Error(), "dialer: dial upstream ") {
				t.Errorf("Error() = %q lacks the package prefix and action", de.Error())
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
		defer cancel()
		time.Sleep(time.Millisecond)
		_, err := d.Dial(ctx, "127.0.0.1:9")
		var de *Error
		if !errors.As(err, &de) || !de.Timeout {
			t.Fatalf("Dial with an expired context = %v, want a timeout *dialer.Error", err)
		}
	})
}

func TestDialSocketBuffers(t *testing.T) {
	ln := listen(t)
	d := newDialer(t, Config{Timeout: 10 * time.Second, SocketBufferBytes: 256 << 10})
	c, err := d.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, _ := c.SyscallConn()
	var got int
	rc.Control(func(fd uintptr) {
		got, _ = getsockoptInt(int(fd))
	})
	// Linux doubles the value it was given.
	if got < 256<<10 {
		t.Errorf("SO_RCVBUF = %d, want at least %d", got, 256<<10)
	}
}

// TestPoolKeyIdleTimeouts checks a key's own idle timeout (a parent's
// idle_timeout): the reaper closes its connections after it while another
// key's, on the pool's long timeout, stay; Get does not hand out one past
// it; and a key set for connections already kept applies to them.
func TestPoolKeyIdleTimeouts(t *testing.T) {
	ln := listen(t)
	p := newPool(t, PoolConfig{IdleTimeout: time.Hour})
	t.Cleanup(func() { p.Close() })
	kept := pair(t, ln)
	p.Put("parent p 127.0.0.1:1", Owner{}, pair(t, ln)) // already kept when the timeout is set
	p.Put("origin:80", Owner{}, kept)
	p.SetKeyIdleTimeouts(map[string]time.Duration{"parent p 127.0.0.1:1": 50 * time.Millisecond})
	deadline := time.Now().Add(5 * time.Second)
	for p.Len() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections; the reaper did not close the parent's after its idle timeout", p.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := p.Get([]byte("origin:80"), Owner{}); got != kept {
		t.Error("the other key's connection is gone")
	}

	c := pair(t, ln)
	p.Put("parent p 127.0.0.1:1", Owner{}, c)
	time.Sleep(60 * time.Millisecond)
	if got := p.Get([]byte("parent p 127.0.0.1:1"), Owner{}); got != nil {
		t.Error("Get returned a parent's connection idle past its idle timeout")
	}
}

// newPool returns a pool for cfg, its fields left zero given the values
// rustle's configuration defaults them to (64 idle connections per host,
// 4096 in all, 90s idle).
func newPool(t testing.TB, cfg PoolConfig) *Pool {
	t.Helper()
	if cfg.MaxIdlePerHost == 0 {
		cfg.MaxIdlePerHost = 64
	}
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = 4096
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newDialer returns a dialer for cfg, failing the test when it is
// refused.
func newDialer(t testing.TB, cfg Config) *Dialer {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestNewRefusesMissingSettings checks that New and NewPool refuse the
// values the configuration fills (config.SetDefaults) when they are left
// zero, instead of choosing values of their own (they used to default
// the connect timeout, 10s, and the pool's bounds, 64, 4096 and 90s).
func TestNewRefusesMissingSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no timeout", Config{}, "connect timeout 0s is not positive"},
		{"negative buffers", Config{Timeout: time.Second, SocketBufferBytes: -1}, "negative"},
		{"timeout", Config{Timeout: time.Second}, ""},
	} {
		t.Run("dialer "+tt.name, func(t *testing.T) {
			d, err := New(tt.cfg)
			if tt.want == "" && (err != nil || d == nil) || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("New = %v, %v; want error %q", d, err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name string
		cfg  PoolConfig
		want string
	}{
		{"nothing", PoolConfig{}, "per host 0 is not positive"},
		{"no total", PoolConfig{MaxIdlePerHost: 4, IdleTimeout: time.Minute}, "max idle connections 0 is not positive"},
		{"no idle timeout", PoolConfig{MaxIdlePerHost: 4, MaxIdle: 16}, "idle timeout 0s is not positive"},
		{"negative per host", PoolConfig{MaxIdlePerHost: -1, MaxIdle: 16, IdleTimeout: time.Minute}, "per host -1"},
		{"all", PoolConfig{MaxIdlePerHost: 4, MaxIdle: 16, IdleTimeout: time.Minute}, ""},
	} {
		t.Run("pool "+tt.name, func(t *testing.T) {
			p, err := NewPool(tt.cfg)
			if p != nil {
				p.Close()
			}
			if tt.want == "" && (err != nil || p == nil) || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("NewPool = %v, %v; want error %q", p, err, tt.want)
			}
		})
	}
}
