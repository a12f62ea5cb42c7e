package socks5

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
)

// get fetches url through a SOCKS5 proxy at proxyAddr with Go's
// golang.org/x/net/proxy client and returns the body.
func get(t *testing.T, proxyAddr string, a *proxy.Auth, url string) (string, error) {
	t.Helper()
	d, err := proxy.SOCKS5("tcp", proxyAddr, a, proxy.Direct)
	if err != nil {
		t.Fatalf("proxy.SOCKS5: %v", err)
	}
	tr := &http.Transport{
		DialContext:       d.(proxy.ContextDialer).DialContext,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func TestXNetProxyClient(t *testing.T) {
	port := startOrigin(t, "tcp4")
	srv := startServer(t, "tcp4", Config{Auth: newAuth(t)})
	creds := &proxy.Auth{User: testUser, Password: testPass}
	for _, host := range []string{"localhost", "127.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			url := fmt.Sprintf("http://%s:%d/via-%s", host, port, host)
			body, err := get(t, srv.addr, creds, url)
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			if want := "origin says /via-" + host; body != want {
				t.Errorf("body %q, want %q", body, want)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		_, err := get(t, srv.addr, &proxy.Auth{User: testUser, Password: "nope"}, fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err == nil {
			t.Fatal("GET with a wrong password succeeded")
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		_, err := get(t, srv.addr, nil, fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err == nil {
			t.Fatal("GET without credentials succeeded")
		}
	})
}

func TestIPv6(t *testing.T) {
	skipWithoutIPv6(t)
	port := startOrigin(t, "tcp6")
	echo := startEcho(t, "tcp6")
	srv := startServer(t, "tcp6", Config{})
	t.Run("x/net client", func(t *testing.T) {
		url := fmt.Sprintf("http://[::1]:%d/six", port)
		body, err := get(t, srv.addr, nil, url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		if body != "origin says /six" {
			t.Errorf("body %q", body)
		}
	})
	for _, tt := range []struct {
		name string
		req  []byte
	}{
		{"IPv6 address type", requestMsg(cmdConnect, echo)},
		{"IPv6 literal as domain", domainRequestMsg(cmdConnect, "::1", echo.Port())},
		{"bracketed IPv6 literal as domain", domainRequestMsg(cmdConnect, "[::1]", echo.Port())},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, srv.addr)
			greet(t, c, methodNoAuth, methodNoAuth)
			send(t, c, tt.req)
			rep, bnd := readReply(t, c)
			if rep != repSucceeded || bnd.Addr() != netip.IPv6Loopback() || bnd.Port() == 0 {
				t.Fatalf("reply %d %v, want 0 and a [::1] bound address", rep, bnd)
			}
			send(t, c, []byte("ping6"))
			expect(t, c, []byte("ping6"))
		})
	}
}

// TestConnectThroughEngine checks that a CONNECT tunnel is relayed by the
// tunnel engine, that the reply carries the upstream socket's address, and
// that bytes sent right behind the request reach the upstream.
func TestConnectThroughEngine(t *testing.T) {
	echo := startEcho(t, "tcp4")
	srv := startServer(t, "tcp4", Config{})
	c := dial(t, srv.addr)
	// Greeting, request and the first payload bytes in one write.
	msg := append([]byte{5, 1, methodNoAuth}, requestMsg(cmdConnect, echo)...)
	send(t, c, append(msg, "early"...))
	expect(t, c, []byte{5, methodNoAuth})
	rep, bnd := readReply(t, c)
	if rep != repSucceeded {
		t.Fatalf("reply %d, want 0", rep)
	}
	if bnd.Addr() != netip.MustParseAddr("127.0.0.1") || bnd.Port() == 0 {
		t.Errorf("bound address %v, want 127.0.0.1 and a port", bnd)
	}
	expect(t, c, []byte("early"))
	waitFor(t, "the tunnel in the engine", func() bool { return srv.eng.Len() == 1 })
	if n := srv.activeConns(); n != 0 {
		t.Errorf("%d connections still in ServeConn after the hand-off, want 0", n)
	}
	send(t, c, []byte("late"))
	expect(t, c, []byte("late"))
	c.Close()
	waitFor(t, "the tunnel to end", func() bool { return srv.eng.Len() == 0 })
}

// zeroReply is a reply with code rep and no bound address.
func zeroReply(rep byte) []byte { return []byte{5, rep, 0, atypIPv4, 0, 0, 0, 0, 0, 0} }

func TestReplies(t *testing.T) {
	refused := closedPort(t, "tcp4")
	greeting := []byte{5, 1, methodNoAuth}
	greetingReply := []byte{5, methodNoAuth}
	authGreeting := []byte{5, 2, methodNoAuth, methodUserPass}
	authGreetingReply := []byte{5, methodUserPass}
	tests := []struct {
		name string
		auth bool
		send [][]byte // written in turn, each followed by reading the matching want
		want [][]byte
	}{
		{"only no-auth offered to an auth listener", true,
			[][]byte{{5, 1, methodNoAuth}}, [][]byte{{5, methodNoAcceptable}}},
		{"only username/password offered to an open listener", false,
			[][]byte{{5, 1, methodUserPass}}, [][]byte{{5, methodNoAcceptable}}},
		{"unknown methods only", false,
			[][]byte{{5, 3, 0x01, 0x03, 0x80}}, [][]byte{{5, methodNoAcceptable}}},
		{"no methods", false, [][]byte{{5, 0}}, [][]byte{{5, methodNoAcceptable}}},
		{"wrong password", true,
			[][]byte{authGreeting, userPassMsg(testUser, "wrong")}, [][]byte{authGreetingReply, {1, 1}}},
		{"unknown user", true,
			[][]byte{authGreeting, userPassMsg("mallory", testPass)}, [][]byte{authGreetingReply, {1, 1}}},
		{"empty user", true,
			[][]byte{authGreeting, userPassMsg("", testPass)}, [][]byte{authGreetingReply, {1, 1}}},
		{"password sent as user", true,
			[][]byte{authGreeting, userPassMsg(testUser+":"+testPass, "")}, [][]byte{authGreetingReply, {1, 1}}},
		{"wrong sub-negotiation version", true,
			[][]byte{authGreeting, append([]byte{5}, userPassMsg(testUser, testPass)[1:]...)}, [][]byte{authGreetingReply, {1, 1}}},
		{"unknown first byte", false, [][]byte{{6, 1, 0}}, nil},
		{"HTTP request", false, [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n")}, nil},
		{"request with version 4", false,
			[][]byte{greeting, {4, 1, 0, atypIPv4, 127, 0, 0, 1, 0, 80}}, [][]byte{greetingReply}},
		{"unknown command", false,
			[][]byte{greeting, requestMsg(0x09, netip.MustParseAddrPort("127.0.0.1:80"))}, [][]byte{greetingReply, zeroReply(repCmdNotSupported)}},
		{"bind", false,
			[][]byte{greeting, requestMsg(cmdBind, netip.MustParseAddrPort("127.0.0.1:80"))}, [][]byte{greetingReply, zeroReply(repCmdNotSupported)}},
		{"bind after authentication", true,
			[][]byte{authGreeting, userPassMsg(testUser, testPass), requestMsg(cmdBind, netip.MustParseAddrPort("127.0.0.1:80"))},
			[][]byte{authGreetingReply, {1, 0}, zeroReply(repCmdNotSupported)}},
		{"unknown address type", false,
			[][]byte{greeting, {5, 1, 0, 0x02, 127, 0, 0, 1, 0, 80}}, [][]byte{greetingReply, zeroReply(repAddrTypeNotSupport)}},
		{"domain of 255 bytes", false,
			[][]byte{greeting, domainRequestMsg(cmdConnect, strings.Repeat("a.", 127)+"a", 80)}, [][]byte{greetingReply, zeroReply(repHostUnreachable)}},
		{"label of 64 bytes", false,
			[][]byte{greeting, domainRequestMsg(cmdConnect, strings.Repeat("a", 64)+".test", 80)}, [][]byte{greetingReply, zeroReply(repHostUnreachable)}},
		{"empty domain", false,
			[][]byte{greeting, domainRequestMsg(cmdConnect, "", 80)}, [][]byte{greetingReply, zeroReply(repHostUnreachable)}},
		{"domain with a colon", false,
			[][]byte{greeting, domainRequestMsg(cmdConnect, "localhost:22", 80)}, [][]byte{greetingReply, zeroReply(repHostUnreachable)}},
		{"domain with a NUL", false,
			[][]byte{greeting, domainRequestMsg(cmdConnect, "localhost\x00.evil", 80)}, [][]byte{greetingReply, zeroReply(repHostUnreachable)}},
		{"unspecified address", false,
			[][]byte{greeting, requestMsg(cmdConnect, netip.MustParseAddrPort("0.0.0.0:80"))}, [][]byte{greetingReply, zeroReply(repHostUnreachable)}},
		{"connection refused", false,
			[][]byte{greeting, requestMsg(cmdConnect, refused)}, [][]byte{greetingReply, zeroReply(repConnRefused)}},
		{"connection refused by name", false,
			[][]byte{greeting, domainRequestMsg(cmdConnect, "localhost", refused.Port())}, [][]byte{greetingReply, zeroReply(repConnRefused)}},
	}
	open := startServer(t, "tcp4", Config{})
	authed := startServer(t, "tcp4", Config{Auth: newAuth(t)})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := open
			if tt.auth {
				srv = authed
			}
			c := dial(t, srv.addr)
			for i, b := range tt.send {
				send(t, c, b)
				if i < len(tt.want) {
					expect(t, c, tt.want[i])
				}
			}
			expectClosed(t, c)
		})
	}
}

// TestTruncated checks that a client that stops in the middle of a
// message is closed, at once when it half-closes and after the handshake
// timeout when it just goes quiet, and never gets a reply it did not earn.
func TestTruncated(t *testing.T) {
	prefixes := []struct {
		name  string
		auth  bool
		sent  [][]byte // whole messages, each answered by the matching want
		want  [][]byte
		trunc []byte // the truncated message
	}{
		{name: "greeting version only", trunc: []byte{5}},
		{name: "greeting missing a method", trunc: []byte{5, 2, 0}},
		{name: "username/password missing the password", auth: true,
			sent: [][]byte{{5, 1, methodUserPass}}, want: [][]byte{{5, methodUserPass}},
			trunc: []byte{1, 5, 'a', 'l', 'i', 'c', 'e', 9, 's'}},
		{name: "request header only", sent: [][]byte{{5, 1, 0}}, want: [][]byte{{5, 0}}, trunc: []byte{5, 1, 0}},
		{name: "request cut in the domain", sent: [][]byte{{5, 1, 0}}, want: [][]byte{{5, 0}},
			trunc: []byte{5, 1, 0, atypDomain, 10, 'l', 'o', 'c'}},
		{name: "request missing the port", sent: [][]byte{{5, 1, 0}}, want: [][]byte{{5, 0}},
			trunc: []byte{5, 1, 0, atypIPv4, 127, 0, 0, 1}},
		{name: "socks4 cut in the address", trunc: []byte{4, 1, 0, 80, 127}},
		{name: "socks4 user id without NUL", trunc: []byte{4, 1, 0, 80, 127, 0, 0, 1, 'b', 'o', 'b'}},
		{name: "socks4a host without NUL", trunc: []byte{4, 1, 0, 80, 0, 0, 0, 1, 0, 'l', 'o', 'c'}},
	}
	open := startServer(t, "tcp4", Config{HandshakeTimeout: 300 * time.Millisecond})
	authed := startServer(t, "tcp4", Config{Auth: newAuth(t), HandshakeTimeout: 300 * time.Millisecond})
	for _, tt := range prefixes {
		for _, halfClose := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/half-close=%v", tt.name, halfClose), func(t *testing.T) {
				srv := open
				if tt.auth {
					srv = authed
				}
				c := dial(t, srv.addr)
				for i, b := range tt.sent {
					send(t, c, b)
					expect(t, c, tt.want[i])
				}
				send(t, c, tt.trunc)
				if halfClose {
					c.(*net.TCPConn).CloseWrite()
				}
				expectClosed(t, c)
			})
		}
	}
	t.Run("silent client", func(t *testing.T) {
		c := dial(t, open.addr)
		expectClosed(t, c)
	})
}

func TestSOCKS4(t *testing.T) {
	echo := startEcho(t, "tcp4")
	refused := closedPort(t, "tcp4")
	open := startServer(t, "tcp4", Config{})
	authed := startServer(t, "tcp4", Config{Auth: newAuth(t)})

	socks4 := func(cmd byte, ap netip.AddrPort, user string) []byte {
		a := ap.Addr().As4()
		b := []byte{4, cmd, byte(ap.Port() >> 8), byte(ap.Port())}
		b = append(b, a[:]...)
		return append(append(b, user...), 0)
	}
	socks4a := func(host string, port uint16) []byte {
		b := []byte{4, cmdConnect, byte(port >> 8), byte(port), 0, 0, 0, 1}
		b = append(append(b, "bob"...), 0)
		return append(append(b, host...), 0)
	}
	rejected := []byte{0, socks4Rejected, 0, 0, 0, 0, 0, 0}

	tests := []struct {
		name    string
		auth    bool
		req     []byte
		granted bool
	}{
		{"socks4 connect", false, socks4(cmdConnect, echo, "bob"), true},
		{"socks4 connect, empty user id", false, socks4(cmdConnect, echo, ""), true},
		{"socks4a connect", false, socks4a("localhost", echo.Port()), true},
		{"socks4a with an IP literal", false, socks4a("127.0.0.1", echo.Port()), true},
		{"listener requires auth", true, socks4(cmdConnect, echo, testUser), false},
		{"socks4a, listener requires auth", true, socks4a("localhost", echo.Port()), false},
		{"bind", false, socks4(cmdBind, echo, "bob"), false},
		{"unknown command", false, socks4(9, echo, "bob"), false},
		{"connection refused", false, socks4(cmdConnect, refused, "bob"), false},
		{"unspecified address", false, socks4(cmdConnect, netip.AddrPortFrom(netip.IPv4Unspecified(), echo.Port()), "bob"), false},
		{"user id too long", false, socks4(cmdConnect, echo, strings.Repeat("u", 256)), false},
		{"socks4a host too long", false, socks4a(strings.Repeat("h", 256), echo.Port()), false},
		{"socks4a bad host", false, socks4a("local host", echo.Port()), false},
		{"socks4a empty host", false, socks4a("", echo.Port()), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := open
			if tt.auth {
				srv = authed
			}
			c := dial(t, srv.addr)
			send(t, c, tt.req)
			if !tt.granted {
				expect(t, c, rejected)
				expectClosed(t, c)
				return
			}
			var rep [8]byte
			if _, err := io.ReadFull(c, rep[:]); err != nil {
				t.Fatalf("read reply: %v", err)
			}
			if rep[0] != 0 || rep[1] != socks4Granted {
				t.Fatalf("reply %x, want 00 5a ...", rep)
			}
			if bytes.Equal(rep[2:], make([]byte, 6)) {
				t.Errorf("reply %x carries no bound address", rep)
			}
			send(t, c, []byte("four"))
			expect(t, c, []byte("four"))
		})
	}
}

func TestDialReply(t *testing.T) {
	wrap := func(err error) error { return &dialer.Error{Addr: "x:1", Err: err} }
	tests := []struct {
		name string
		err  error
		want byte
	}{
		{"refused", wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), repConnRefused},
		{"network unreachable", wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}), repNetUnreachable},
		{"host unreachable", wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}), repHostUnreachable},
		{"no such host", wrap(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}}), repHostUnreachable},
		{"DNS timeout", &dialer.Error{Addr: "x:1", Timeout: true, Err: &net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}}, repHostUnreachable},
		{"connect timeout", &dialer.Error{Addr: "x:1", Timeout: true, Err: context.DeadlineExceeded}, repTTLExpired},
		{"kernel timeout", wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}), repTTLExpired},
		{"other", wrap(errors.New("boom")), repGeneralFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dialReply(tt.err); got != tt.want {
				t.Errorf("dialReply(%v) = %#x, want %#x", tt.err, got, tt.want)
			}
		})
	}
}

// testLimiter is a Limiter that counts what it is told.
type testLimiter struct {
	mu       sync.Mutex
	failures int
	maxUser  int
	users    map[string]int
	handoffs int
	released int
}

func (l *testLimiter) AuthFailed(netip.Addr) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures++
	return 0
}

func (l *testLimiter) UserConn(u string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users == nil {
		l.users = map[string]int{}
	}
	if l.maxUser > 0 && l.users[u] >= l.maxUser {
		return false
	}
	l.users[u]++
	return true
}

func (l *testLimiter) UserDone(u string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.users[u]--
}

func (l *testLimiter) Throttle(string) *limits.Bucket { return nil }

func (l *testLimiter) Handoff(net.Conn) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handoffs++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.released++
	}
}

func (l *testLimiter) snapshot() (failures, users, handoffs, released int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures, l.users[testUser], l.handoffs, l.released
}

func mustPolicy(t *testing.T, cfg acl.Config) *acl.Policy {
	t.Helper()
	p, err := acl.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAccess checks that CONNECTs the policy, the private-destination
// guard or the per-user limit refuse get "not allowed" (0x02; SOCKS4
// 0x5B) and reach nothing, and that the limiter hears of failed logins and
// of tunnels handed to the engine.
func TestAccess(t *testing.T) {
	allowed := startEcho(t, "tcp4")
	denied := startEcho(t, "tcp4")
	policy := mustPolicy(t, acl.Config{Default: acl.Allow, Rules: []acl.Rule{
		{Name: "no-denied", Action: acl.Deny, Ports: []string{strconv.Itoa(int(denied.Port()))}},
	}})
	connect := func(t *testing.T, srv *testServer, dst netip.AddrPort, user string) (net.Conn, byte) {
		t.Helper()
		c := dial(t, srv.addr)
		if user != "" {
			login(t, c, user, testPass)
		} else {
			greet(t, c, methodNoAuth, methodNoAuth)
		}
		send(t, c, requestMsg(cmdConnect, dst))
		rep, _ := readReply(t, c)
		return c, rep
	}

	t.Run("policy", func(t *testing.T) {
		srv := startServer(t, "tcp4", Config{Access: policy})
		if _, rep := connect(t, srv, denied, ""); rep != repNotAllowed {
			t.Errorf("CONNECT to a denied port: reply %d, want %d", rep, repNotAllowed)
		}
		c, rep := connect(t, srv, allowed, "")
		if rep != repSucceeded {
			t.Fatalf("CONNECT to an allowed port: reply %d", rep)
		}
		send(t, c, []byte("ping"))
		expect(t, c, []byte("ping"))
		c4 := dial(t, srv.addr)
		send(t, c4, socks4ConnectMsg(denied))
		expect(t, c4, []byte{0, socks4Rejected, 0, 0, 0, 0, 0, 0})
	})
	t.Run("guard", func(t *testing.T) {
		d := dialer.New(dialer.Config{Timeout: 5 * time.Second, Guard: dialer.NewGuard(nil)})
		srv := startServer(t, "tcp4", Config{Dialer: d})
		if _, rep := connect(t, srv, allowed, ""); rep != repNotAllowed {
			t.Errorf("CONNECT to loopback: reply %d, want %d", rep, repNotAllowed)
		}
		c := dial(t, srv.addr)
		greet(t, c, methodNoAuth, methodNoAuth)
		send(t, c, domainRequestMsg(cmdConnect, "localhost", allowed.Port()))
		if rep, _ := readReply(t, c); rep != repNotAllowed {
			t.Errorf("CONNECT to a name resolving to loopback: reply %d, want %d", rep, repNotAllowed)
		}
	})
	t.Run("limiter", func(t *testing.T) {
		lim := &testLimiter{maxUser: 1}
		srv := startServer(t, "tcp4", Config{Auth: newAuth(t), Limiter: lim})
		bad := dial(t, srv.addr)
		greet(t, bad, methodUserPass, methodUserPass)
		send(t, bad, userPassMsg(testUser, "wrong"))
		expect(t, bad, []byte{1, 1})
		expectClosed(t, bad)
		c, rep := connect(t, srv, allowed, testUser)
		if rep != repSucceeded {
			t.Fatalf("first CONNECT of the user: reply %d", rep)
		}
		if _, rep := connect(t, srv, allowed, testUser); rep != repNotAllowed {
			t.Errorf("second connection of the user: reply %d, want %d", rep, repNotAllowed)
		}
		c.Close()
		waitFor(t, "the tunnel's counts to end", func() bool {
			f, u, h, r := lim.snapshot()
			return f == 1 && u == 0 && h == 1 && r == 1
		})
	})
}

// socks4ConnectMsg is a SOCKS4 CONNECT to ap with an empty user ID.
func socks4ConnectMsg(ap netip.AddrPort) []byte {
	a := ap.Addr().As4()
	b := []byte{4, 1, byte(ap.Port() >> 8), byte(ap.Port())}
	return append(append(b, a[:]...), 0)
}
