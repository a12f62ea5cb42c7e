package socks5

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
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
	srv := startServer(t, "tcp4", authPolicy(t), Config{})
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
	srv := startServer(t, "tcp6", openPolicy(t), Config{})
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
	srv := startServer(t, "tcp4", openPolicy(t), Config{})
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
	waitFor(t, "ServeConn to return", func() bool { return srv.activeConns() == 0 })
	if n := srv.released.Load(); n != 0 {
		t.Errorf("admission given back %d times while the tunnel runs, want 0: the tunnel carries it", n)
	}
	send(t, c, []byte("late"))
	expect(t, c, []byte("late"))
	c.Close()
	waitFor(t, "the tunnel to end", func() bool { return srv.eng.Len() == 0 })
	waitFor(t, "the tunnel to give the admission back", func() bool { return srv.released.Load() == 1 })
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
		// HTTP sent to the port: TestNotSOCKS.
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
	open := startServer(t, "tcp4", openPolicy(t), Config{})
	authed := startServer(t, "tcp4", authPolicy(t), Config{})
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
	open := startServer(t, "tcp4", openPolicy(t), Config{HandshakeTimeout: 300 * time.Millisecond})
	authed := startServer(t, "tcp4", authPolicy(t), Config{HandshakeTimeout: 300 * time.Millisecond})
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
	open := startServer(t, "tcp4", openPolicy(t), Config{})
	authed := startServer(t, "tcp4", authPolicy(t), Config{})

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
		{"DNS timeout", &dialer.Error{Addr: "x:1", DNS: true, Err: &net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}}, repHostUnreachable},
		{"connect timeout", &dialer.Error{Addr: "x:1", Timeout: true, Err: context.DeadlineExceeded}, repTTLExpired},
		{"kernel timeout", wrap(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}), repTTLExpired},
		// A timed-out dial whose cause holds a DNS error but that the
		// dialer did not mark as a resolution failure (a parent's
		// handshake, say) is a timeout, as gate.DialKind has it.
		{"timeout with a DNS cause", &dialer.Error{Addr: "x:1", Timeout: true, Err: &net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}}, repTTLExpired},
		{"forbidden", &dialer.Error{Addr: "x:1", Forbidden: true, Err: dialer.ErrPrivate}, repNotAllowed},
		{"forbidden, timed out too", &dialer.Error{Addr: "x:1", Forbidden: true, Timeout: true, Err: dialer.ErrDenied}, repNotAllowed},
		{"no parent", &dialer.Error{Addr: "x:1", Err: route.ErrNoParent}, repGeneralFailure},
		{"other", wrap(errors.New("boom")), repGeneralFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := dialReply(tt.err)
			if got != tt.want {
				t.Errorf("dialReply(%v) = %#x, want %#x", tt.err, got, tt.want)
			}
			// One classification: the reply is of the class an HTTP
			// front-end answers the same failure with.
			if class, want := replyClass(got), gate.DialKind(tt.err).Status(); class != want {
				t.Errorf("dialReply(%v) = %#x, of class %d; gate.DialKind says %d", tt.err, got, class, want)
			}
		})
	}
}

// TestEarlyBytesCounted checks that bytes sent right behind the request,
// which the server writes upstream itself before the tunnel is relayed,
// count in the tunnel's bytes up, in the engine and by goroutines.
func TestEarlyBytesCounted(t *testing.T) {
	for _, engine := range []bool{true, false} {
		t.Run(fmt.Sprintf("engine=%v", engine), func(t *testing.T) {
			echo := startEcho(t, "tcp4")
			alog, out := newAccessLog(t)
			srv := startServerWith(t, "tcp4", proxytest.NewPolicy(t, proxytest.PolicyConfig{AccessLog: alog}), testConfig(Config{}), engine)
			c := dial(t, srv.addr)
			msg := append([]byte{5, 1, methodNoAuth}, requestMsg(cmdConnect, echo)...)
			send(t, c, append(msg, "early"...))
			expect(t, c, []byte{5, methodNoAuth})
			if rep, _ := readReply(t, c); rep != repSucceeded {
				t.Fatalf("reply %d, want 0", rep)
			}
			expect(t, c, []byte("early"))
			send(t, c, []byte("late"))
			expect(t, c, []byte("late"))
			c.Close()
			waitFor(t, "the tunnel's record", func() bool { return strings.Contains(out.String(), "\n") })
			checkRecord(t, records(t, out)[0], map[string]any{"bytes_up": float64(9), "bytes_down": float64(9)})
		})
	}
}

// connectAs opens a connection to srv, logs in as user (or offers no
// authentication when user is ""), sends a CONNECT to dst and returns the
// connection and the reply code.
func connectAs(t *testing.T, srv *testServer, dst netip.AddrPort, user string) (net.Conn, byte) {
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

// TestAccess checks that CONNECTs the rules, the private-destination
// guard or the per-user limit refuse get "not allowed" (0x02; SOCKS4
// 0x5B) and reach nothing, that a failed login is counted, and that a
// tunnel handed to the engine carries the connection's admission and user
// count until it ends.
func TestAccess(t *testing.T) {
	allowed := startEcho(t, "tcp4")
	denied := startEcho(t, "tcp4")

	t.Run("policy", func(t *testing.T) {
		pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{Default: acl.Allow, Rules: []acl.Rule{
			{Name: "no-denied", Action: acl.Deny, Ports: []string{strconv.Itoa(int(denied.Port()))}},
		}})
		srv := startServer(t, "tcp4", pol, Config{})
		if _, rep := connectAs(t, srv, denied, ""); rep != repNotAllowed {
			t.Errorf("CONNECT to a denied port: reply %d, want %d", rep, repNotAllowed)
		}
		c, rep := connectAs(t, srv, allowed, "")
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
		srv := startServer(t, "tcp4", proxytest.NewPolicy(t, proxytest.PolicyConfig{Guard: true}), Config{})
		if _, rep := connectAs(t, srv, allowed, ""); rep != repNotAllowed {
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
		m := metrics.New(metrics.Config{})
		pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{
			Users:   map[string]string{testUser: testPass},
			Limits:  &limits.Config{MaxConnsPerUser: 1},
			Metrics: m.Listener("lim", "socks5"),
		})
		srv := startServer(t, "tcp4", pol, Config{})
		bad := dial(t, srv.addr)
		greet(t, bad, methodUserPass, methodUserPass)
		send(t, bad, userPassMsg(testUser, "wrong"))
		expect(t, bad, []byte{1, 1})
		expectClosed(t, bad)
		if n := proxytest.Metric(t, m, "rustle_auth_failures_total", "listener", "lim"); n != 1 {
			t.Errorf("auth failures counted %v, want 1", n)
		}
		c, rep := connectAs(t, srv, allowed, testUser)
		if rep != repSucceeded {
			t.Fatalf("first CONNECT of the user: reply %d", rep)
		}
		if _, rep := connectAs(t, srv, allowed, testUser); rep != repNotAllowed {
			t.Errorf("second connection of the user: reply %d, want %d", rep, repNotAllowed)
		}
		waitFor(t, "the tunnel in the engine", func() bool { return srv.eng.Len() == 1 })
		c.Close()
		waitFor(t, "every admission to be given back", func() bool {
			return srv.eng.Len() == 0 && srv.activeConns() == 0 && srv.released.Load() == srv.admitted.Load()
		})
		// The tunnel gave the user's count back: the user may connect
		// again.
		c, rep = connectAs(t, srv, allowed, testUser)
		if rep != repSucceeded {
			t.Fatalf("CONNECT of the user after its tunnel ended: reply %d", rep)
		}
		c.Close()
	})
}

// TestCoolDown checks the cool-downs of failed logins: a user name that
// failed too often is refused at the client's address, even with the
// right password and on a connection opened before the cool-down began,
// while another user from the address still logs in; and an address that
// failed too often as any names is closed before any reply, SOCKS4 too.
func TestCoolDown(t *testing.T) {
	echo := startEcho(t, "tcp4")
	alog, out := newAccessLog(t)
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:     map[string]string{testUser: testPass, "bob": testPass},
		Limits:    &limits.Config{AuthFailures: 2, AuthFailuresPerAddress: 4, AuthCooldown: time.Hour},
		AccessLog: alog,
	})
	srv := startServer(t, "tcp4", pol, Config{})
	failLogin := func(user string) {
		t.Helper()
		c := dial(t, srv.addr)
		greet(t, c, methodUserPass, methodUserPass)
		send(t, c, userPassMsg(user, "wrong"))
		expect(t, c, []byte{1, 1})
		expectClosed(t, c)
	}
	// early has greeted before the cool-down, and logs in during it.
	early := dial(t, srv.addr)
	greet(t, early, methodUserPass, methodUserPass)
	failLogin(testUser)
	// One failure does not start the cool-down.
	c, rep := connectAs(t, srv, echo, testUser)
	if rep != repSucceeded {
		t.Fatalf("CONNECT after one failure: reply %d", rep)
	}
	c.Close()
	failLogin(testUser)

	send(t, early, userPassMsg(testUser, testPass))
	expect(t, early, []byte{1, 1})
	expectClosed(t, early)
	late := dial(t, srv.addr)
	greet(t, late, methodUserPass, methodUserPass)
	send(t, late, userPassMsg(testUser, testPass))
	expect(t, late, []byte{1, 1})
	expectClosed(t, late)
	c, rep = connectAs(t, srv, echo, "bob")
	if rep != repSucceeded {
		t.Fatalf("bob from the address where alice cools down: reply %d", rep)
	}
	c.Close()
	// The failure that started the cool-down, early's and late's.
	waitFor(t, "the refused logins' records", func() bool {
		return strings.Count(out.String(), `"reason":"cooling-down"`) == 3
	})
	for _, r := range records(t, out) {
		if r["reason"] == "cooling-down" {
			checkRecord(t, r, map[string]any{"user": testUser, "protocol": "socks5", "method": "", "target": "", "status": float64(1)})
		}
	}

	// Two more names reach the address's bound of 4 failures.
	failLogin("carol")
	failLogin("dave")
	tests := []struct {
		name string
		send []byte
	}{
		{"socks5 greeting", []byte{5, 1, methodUserPass}},
		{"socks5 greeting and login", append([]byte{5, 1, methodUserPass}, userPassMsg("bob", testPass)...)},
		{"socks4", socks4ConnectMsg(echo)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, srv.addr)
			send(t, c, tt.send)
			expectClosed(t, c)
		})
	}
}

// TestAuthObserved checks that every authentication refusal before a
// request is logged and counted: a wrong password as a failure naming
// the user tried (never the password) with the RFC 1929 status, a
// greeting without username/password and a SOCKS4 request as challenges
// (status 0xFF and 91, the reply sent); none makes a per-user series.
func TestAuthObserved(t *testing.T) {
	echo := startEcho(t, "tcp4")
	tests := []struct {
		name               string
		send               []byte
		reply              []byte
		rec                map[string]any
		failed, challenged float64
	}{
		{name: "wrong password",
			send:  append([]byte{5, 1, methodUserPass}, userPassMsg(testUser, "n0t-the-pw")...),
			reply: []byte{5, methodUserPass, 1, 1},
			rec: map[string]any{"user": testUser, "protocol": "socks5", "method": "", "target": "",
				"status": float64(1), "reason": "auth-failed"},
			failed: 1},
		{name: "unknown user",
			send:  append([]byte{5, 1, methodUserPass}, userPassMsg("mallory", "n0t-the-pw")...),
			reply: []byte{5, methodUserPass, 1, 1},
			rec: map[string]any{"user": "mallory", "protocol": "socks5", "method": "", "target": "",
				"status": float64(1), "reason": "auth-failed"},
			failed: 1},
		{name: "no acceptable method", send: []byte{5, 1, methodNoAuth}, reply: []byte{5, methodNoAcceptable},
			rec: map[string]any{"user": "", "protocol": "socks5", "method": "", "target": "",
				"status": float64(methodNoAcceptable), "reason": "auth-missing"},
			challenged: 1},
		{name: "socks4", send: socks4ConnectMsg(echo), reply: []byte{0, socks4Rejected, 0, 0, 0, 0, 0, 0},
			rec: map[string]any{"user": "", "protocol": "socks4", "method": "CONNECT", "target": echo.String(),
				"status": float64(socks4Rejected), "reason": "auth-missing"},
			challenged: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alog, out := newAccessLog(t)
			m := metrics.New(metrics.Config{PerUser: true})
			pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{
				Listener: "auth", Users: map[string]string{testUser: testPass},
				Metrics: m.Listener("auth", "socks5"), UserMetrics: m.User, AccessLog: alog,
			})
			srv := startServer(t, "tcp4", pol, Config{})
			c := dial(t, srv.addr)
			send(t, c, tt.send)
			expect(t, c, tt.reply)
			expectClosed(t, c)
			waitFor(t, "the refusal's record", func() bool { return strings.Contains(out.String(), "\n") })
			recs := records(t, out)
			if len(recs) != 1 {
				t.Fatalf("got %d access log records, want 1: %q", len(recs), out.String())
			}
			tt.rec["listener"] = "auth"
			checkRecord(t, recs[0], tt.rec)
			if strings.Contains(out.String(), "n0t-the-pw") {
				t.Errorf("the password in the access log: %s", out.String())
			}
			for _, mt := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"rustle_auth_failures_total", []string{"listener", "auth"}, tt.failed},
				{"rustle_auth_challenges_total", []string{"listener", "auth"}, tt.challenged},
				{"rustle_requests_total", []string{"listener", "auth", "code", "4xx"}, 1},
				{"rustle_user_requests_total", nil, 0},
			} {
				if got := proxytest.Metric(t, m, mt.name, mt.labels...); got != mt.want {
					t.Errorf("%s%q = %v, want %v", mt.name, mt.labels, got, mt.want)
				}
			}
		})
	}
}

// newAccessLog returns a JSON access log writing to the buffer it
// returns; it is closed at the end of the test.
func newAccessLog(t testing.TB) (*accesslog.Logger, *proxytest.LogBuffer) {
	t.Helper()
	out := new(proxytest.LogBuffer)
	return proxytest.JSONAccessLog(t, out), out
}

// records parses the access log records written to out so far.
func records(t testing.TB, out *proxytest.LogBuffer) []map[string]any {
	t.Helper()
	return proxytest.JSONRecords[map[string]any](t, out, 0)
}

// checkRecord compares the fields of r named in want, and checks that r
// names the client's loopback address.
func checkRecord(t testing.TB, r map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if r[k] != v {
			t.Errorf("record %s = %v (%T), want %v (%T)", k, r[k], r[k], v, v)
		}
	}
	if c, ok := r["client"].(string); !ok || !strings.HasPrefix(c, "127.0.0.1:") {
		t.Errorf("record client = %v, want the client's address", r["client"])
	}
}

// TestTunnelObserved checks that a CONNECT tunnel, however it is relayed,
// is reported once it ends: one access log record with its real bytes
// each way, its user and its upstream; a tunnel, a 2xx and the bytes in
// the listener's metrics; a successful dial in the dial histogram; the
// user's request and bytes in the per-user series. Before the request
// path was shared, a SOCKS CONNECT fed no dial histogram and no per-user
// series, and a paced user's tunnel was logged and counted with 0 bytes
// and missing from rustle_tunnels_total.
func TestTunnelObserved(t *testing.T) {
	tests := []struct {
		name   string
		limits *limits.Config
		engine bool
		socks4 bool
	}{
		{name: "socks5 in the engine", engine: true},
		{name: "socks5 relayed by goroutines"},
		{name: "socks5 of a paced user", limits: &limits.Config{UserBytesPerSecond: 1 << 20}, engine: true},
		{name: "socks5 of a paced user without engine", limits: &limits.Config{UserBytesPerSecond: 1 << 20}},
		{name: "socks4", engine: true, socks4: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := startEcho(t, "tcp4")
			alog, out := newAccessLog(t)
			m := metrics.New(metrics.Config{PerUser: true})
			cfg := proxytest.PolicyConfig{
				Listener: "obs", Limits: tt.limits,
				Metrics: m.Listener("obs", "socks5"), UserMetrics: m.User, AccessLog: alog,
			}
			user := ""
			if !tt.socks4 {
				user = testUser
				cfg.Users = map[string]string{testUser: testPass}
			}
			srv := startServerWith(t, "tcp4", proxytest.NewPolicy(t, cfg), testConfig(Config{}), tt.engine)
			var c net.Conn
			if tt.socks4 {
				c = dial(t, srv.addr)
				send(t, c, socks4ConnectMsg(echo))
				var rep [8]byte
				if _, err := io.ReadFull(c, rep[:]); err != nil || rep[1] != socks4Granted {
					t.Fatalf("socks4 reply %x, %v", rep, err)
				}
			} else {
				var rep byte
				c, rep = connectAs(t, srv, echo, testUser)
				if rep != repSucceeded {
					t.Fatalf("CONNECT reply %d", rep)
				}
			}
			const msg = "ping through socks"
			send(t, c, []byte(msg))
			expect(t, c, []byte(msg))
			c.Close()
			waitFor(t, "the tunnel's record", func() bool { return strings.Contains(out.String(), "\n") })
			waitFor(t, "the admission to be given back", func() bool { return srv.released.Load() == 1 })

			recs := records(t, out)
			if len(recs) != 1 {
				t.Fatalf("got %d access log records, want 1: %q", len(recs), out.String())
			}
			proto := "socks5"
			if tt.socks4 {
				proto = "socks4"
			}
			checkRecord(t, recs[0], map[string]any{
				"listener": "obs", "user": user, "protocol": proto, "method": "CONNECT",
				"target": echo.String(), "status": float64(repSucceeded), "upstream": echo.String(),
				"bytes_up": float64(len(msg)), "bytes_down": float64(len(msg)),
			})
			for _, mt := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"rustle_tunnels_total", []string{"listener", "obs"}, 1},
				{"rustle_requests_total", []string{"listener", "obs", "code", "2xx"}, 1},
				{"rustle_requests_total", []string{"listener", "obs"}, 1},
				{"rustle_bytes_total", []string{"listener", "obs", "direction", "up"}, float64(len(msg))},
				{"rustle_bytes_total", []string{"listener", "obs", "direction", "down"}, float64(len(msg))},
				{"rustle_upstream_dial_duration_seconds", []string{"result", "ok"}, 1},
				{"rustle_upstream_dial_duration_seconds", []string{"result", "error"}, 0},
			} {
				if got := proxytest.Metric(t, m, mt.name, mt.labels...); got != mt.want {
					t.Errorf("%s%q = %v, want %v", mt.name, mt.labels, got, mt.want)
				}
			}
			if user == "" {
				return
			}
			for _, mt := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"rustle_user_requests_total", []string{"user", testUser}, 1},
				{"rustle_user_bytes_total", []string{"user", testUser, "direction", "up"}, float64(len(msg))},
				{"rustle_user_bytes_total", []string{"user", testUser, "direction", "down"}, float64(len(msg))},
			} {
				if got := proxytest.Metric(t, m, mt.name, mt.labels...); got != mt.want {
					t.Errorf("%s%q = %v, want %v", mt.name, mt.labels, got, mt.want)
				}
			}
		})
	}
}

// TestRefusalObserved checks that a refused or failed CONNECT is logged
// with its reply code and rule, counted in its status class, and counted
// as an ACL denial or a failed dial where it was one. Before the request
// path was shared, SOCKS fed no dial histogram, a guard refusal was no
// ACL denial, and a CONNECT past the user's connection limit was not
// logged or counted at all.
func TestRefusalObserved(t *testing.T) {
	echo := startEcho(t, "tcp4")
	refused := closedPort(t, "tcp4")
	users := map[string]string{testUser: testPass}
	tests := []struct {
		name      string
		cfg       proxytest.PolicyConfig
		dst       netip.AddrPort
		hold      bool // a first tunnel of the user holds the user's only connection
		rep       byte
		class     string
		rule      string
		dialErr   float64
		aclDenied float64
	}{
		{name: "dial refused", cfg: proxytest.PolicyConfig{Users: users},
			dst: refused, rep: repConnRefused, class: "5xx", dialErr: 1},
		{name: "denied by a rule", cfg: proxytest.PolicyConfig{Users: users, Default: acl.Allow, Rules: []acl.Rule{
			{Name: "no-echo", Action: acl.Deny, Ports: []string{strconv.Itoa(int(echo.Port()))}},
		}}, dst: echo, rep: repNotAllowed, class: "4xx", rule: "no-echo", aclDenied: 1},
		{name: "refused by the guard", cfg: proxytest.PolicyConfig{Users: users, Guard: true},
			dst: echo, rep: repNotAllowed, class: "4xx", dialErr: 1, aclDenied: 1},
		{name: "user limit", cfg: proxytest.PolicyConfig{Users: users, Limits: &limits.Config{MaxConnsPerUser: 1}},
			dst: echo, hold: true, rep: repNotAllowed, class: "4xx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alog, out := newAccessLog(t)
			m := metrics.New(metrics.Config{PerUser: true})
			cfg := tt.cfg
			cfg.Listener, cfg.Metrics, cfg.UserMetrics, cfg.AccessLog = "ref", m.Listener("ref", "socks5"), m.User, alog
			srv := startServer(t, "tcp4", proxytest.NewPolicy(t, cfg), Config{})
			dials := 0.0
			if tt.hold {
				held, rep := connectAs(t, srv, echo, testUser)
				if rep != repSucceeded {
					t.Fatalf("first CONNECT: reply %d", rep)
				}
				defer held.Close()
				dials = 1
			}
			c, rep := connectAs(t, srv, tt.dst, testUser)
			if rep != tt.rep {
				t.Fatalf("CONNECT reply %d, want %d", rep, tt.rep)
			}
			expectClosed(t, c)
			waitFor(t, "the refusal's record", func() bool { return strings.Contains(out.String(), "\n") })
			recs := records(t, out)
			if len(recs) != 1 {
				t.Fatalf("got %d access log records, want 1: %q", len(recs), out.String())
			}
			want := map[string]any{
				"listener": "ref", "user": testUser, "protocol": "socks5", "method": "CONNECT",
				"target": tt.dst.String(), "status": float64(tt.rep), "upstream": "",
				"bytes_up": float64(0), "bytes_down": float64(0),
			}
			if tt.rule != "" {
				want["rule"] = tt.rule
			}
			checkRecord(t, recs[0], want)
			if tt.hold {
				// The held tunnel is counted as it starts, which may be
				// just after its client read the success reply.
				waitFor(t, "the held tunnel counted", func() bool {
					return proxytest.Metric(t, m, "rustle_tunnels_total", "listener", "ref") == 1
				})
			}
			for _, mt := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"rustle_requests_total", []string{"listener", "ref", "code", tt.class}, 1},
				{"rustle_tunnels_total", []string{"listener", "ref"}, dials},
				{"rustle_acl_denials_total", []string{"listener", "ref"}, tt.aclDenied},
				{"rustle_upstream_dial_duration_seconds", []string{"result", "error"}, tt.dialErr},
				{"rustle_upstream_dial_duration_seconds", []string{"result", "ok"}, dials},
				{"rustle_user_requests_total", []string{"user", testUser}, 1},
			} {
				if got := proxytest.Metric(t, m, mt.name, mt.labels...); got != mt.want {
					t.Errorf("%s%q = %v, want %v", mt.name, mt.labels, got, mt.want)
				}
			}
		})
	}
}

// TestRevoked checks that revoking a user ends the user's SOCKS sessions
// that live in their serving goroutine: a UDP association, and tunnels
// relayed by goroutines (a paced user's, or any without an engine).
func TestRevoked(t *testing.T) {
	tests := []struct {
		name   string
		limits *limits.Config
		udp    bool
	}{
		{name: "udp association", udp: true},
		{name: "tunnel relayed by goroutines"},
		{name: "paced tunnel", limits: &limits.Config{UserBytesPerSecond: 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := startEcho(t, "tcp4")
			reg := new(gate.Registry)
			pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{
				Users: map[string]string{testUser: testPass}, Limits: tt.limits, Revoked: reg,
			})
			srv := startServerWith(t, "tcp4", pol, testConfig(Config{}), false)
			var c net.Conn
			if tt.udp {
				c, _ = associate(t, srv, testUser, testPass, netip.MustParseAddrPort("0.0.0.0:0"))
			} else {
				var rep byte
				c, rep = connectAs(t, srv, echo, testUser)
				if rep != repSucceeded {
					t.Fatalf("CONNECT reply %d", rep)
				}
				send(t, c, []byte("before"))
				expect(t, c, []byte("before"))
			}
			if n := reg.Revoke(func(_, u string) bool { return u != testUser }); n != 1 {
				t.Fatalf("Revoke revoked %d users, want 1", n)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			expectClosed(t, c)
			waitFor(t, "the session to end", func() bool { return srv.activeConns() == 0 && reg.Users() == 0 })
		})
	}
}

// socks4ConnectMsg is a SOCKS4 CONNECT to ap with an empty user ID.
func socks4ConnectMsg(ap netip.AddrPort) []byte {
	a := ap.Addr().As4()
	b := []byte{4, 1, byte(ap.Port() >> 8), byte(ap.Port())}
	return append(append(b, a[:]...), 0)
}

// TestZeroTimeouts checks that New keeps zero timeouts as they are and that
// they arm no deadline: a handshake (every deadline it sets: the client's
// read and write, the early data's upstream write) and a UDP association
// work as with the configuration's timeouts, rather than failing at once.
func TestZeroTimeouts(t *testing.T) {
	if s := New(Config{}); s.cfg.HandshakeTimeout != 0 || s.cfg.UDPIdleTimeout != 0 {
		t.Fatalf("New(Config{}) has HandshakeTimeout %v, UDPIdleTimeout %v, want 0 (no default filled in)",
			s.cfg.HandshakeTimeout, s.cfg.UDPIdleTimeout)
	}
	// gate.Deadline, which arms them, is checked by gate's TestDeadline.

	srv := startServerWith(t, "tcp4", openPolicy(t), Config{}, false)
	t.Run("connect", func(t *testing.T) {
		echo := startEcho(t, "tcp4")
		c := dial(t, srv.addr)
		time.Sleep(20 * time.Millisecond)
		msg := append([]byte{5, 1, methodNoAuth}, requestMsg(cmdConnect, echo)...)
		send(t, c, append(msg, "early"...))
		expect(t, c, []byte{5, methodNoAuth})
		if rep, _ := readReply(t, c); rep != repSucceeded {
			t.Fatalf("reply %d, want 0", rep)
		}
		expect(t, c, []byte("early"))
		send(t, c, []byte("late"))
		expect(t, c, []byte("late"))
	})
	t.Run("udp associate", func(t *testing.T) {
		// Only the idle timeout zero, so that this checks the relay's.
		usrv := startServerWith(t, "tcp4", openPolicy(t), Config{HandshakeTimeout: 30 * time.Second}, false)
		echo := proxytest.NewUDPEcho(t, "udp4")
		ctrl, relay := associate(t, usrv, "", "", netip.MustParseAddrPort("0.0.0.0:0"))
		time.Sleep(20 * time.Millisecond)
		pc := udpClient(t, netip.MustParseAddr("127.0.0.1"))
		roundTrip(t, pc, relay, datagram(0, echo.Addr, "still open"), echo.Addr, "still open")
		ctrl.Close()
		waitFor(t, "the association to end", func() bool { return usrv.activeConns() == 0 })
	})
}

// TestNotSOCKS checks what a client that does not speak SOCKS is told on
// a SOCKS port, at once and with a record: HTTP (an http:// proxy URL for
// a SOCKS port) is answered 400 in HTTP, naming what the port speaks, and
// anything else (a TLS ClientHello) is closed; both leave one access log
// record with the reason not-socks and one debug line. Before, both were
// closed with neither.
func TestNotSOCKS(t *testing.T) {
	port := startOrigin(t, "tcp4")
	tests := []struct {
		name   string
		send   string
		answer string // what the connection gets before its close: a prefix of it
		status float64
	}{
		{"HTTP GET", "GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Secret: " + testPass + "\r\n\r\n",
			"HTTP/1.1 400 Bad Request\r\n", 400},
		{"HTTP CONNECT", "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n",
			"HTTP/1.1 400 Bad Request\r\n", 400},
		{"TLS ClientHello", "\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alog, out := newAccessLog(t)
			debug := new(proxytest.LogBuffer)
			logger := slog.New(slog.NewTextHandler(debug, &slog.HandlerOptions{Level: slog.LevelDebug}))
			pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{Listener: "socks", AccessLog: alog})
			pol.Logger = logger
			srv := startServer(t, "tcp4", pol, Config{Logger: logger})
			c := dial(t, srv.addr)
			send(t, c, []byte(tt.send))
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("read the answer: %v", err)
			}
			if !strings.HasPrefix(string(got), tt.answer) || (tt.answer == "") != (len(got) == 0) {
				t.Errorf("answered %q, want %q...", got, tt.answer)
			}
			if tt.status == 400 && !strings.HasSuffix(string(got), "rustle: this port speaks SOCKS5 and SOCKS4: use a socks5:// (or socks5h://) URL for this proxy\n") {
				t.Errorf("answered %q, want it to say what the port speaks", got)
			}
			waitFor(t, "the refusal's record", func() bool { return strings.Contains(out.String(), "\n") })
			recs := records(t, out)
			if len(recs) != 1 {
				t.Fatalf("got %d access log records, want 1: %q", len(recs), out.String())
			}
			checkRecord(t, recs[0], map[string]any{"listener": "socks", "protocol": "", "method": "", "target": "",
				"status": tt.status, "reason": "not-socks"})
			if n := strings.Count(debug.String(), `msg="gate: request refused"`); n != 1 ||
				!strings.Contains(debug.String(), " reason=not-socks ") {
				t.Errorf("debug log %q, want one refusal with reason not-socks", debug.String())
			}
			if strings.Contains(out.String()+debug.String(), testPass) {
				t.Errorf("a header value in the logs: %s%s", out.String(), debug.String())
			}
		})
	}
	t.Run("curl", func(t *testing.T) {
		alog, out := newAccessLog(t)
		srv := startServer(t, "tcp4", proxytest.NewPolicy(t, proxytest.PolicyConfig{AccessLog: alog}), Config{})
		got, err := curl(t, "--proxy", "http://"+srv.addr, "-w", "%{http_code}", fmt.Sprintf("http://127.0.0.1:%d/x", port))
		if err != nil || !strings.HasSuffix(got, "this port speaks SOCKS5 and SOCKS4: use a socks5:// (or socks5h://) URL for this proxy\n400") {
			t.Errorf("curl with an http:// proxy URL for a SOCKS port: %v %q, want the 400 that names the port's protocol", err, got)
		}
		waitFor(t, "curl's record", func() bool { return strings.Contains(out.String(), `"reason":"not-socks"`) })
	})
}

// TestCoolDownHoldsTheCount checks that an address answers exactly
// limits.auth_failures_per_address failed logins however many it sends at
// once: 20 connections greet, then all send a wrong password (each as a
// name of its own) together; the logins counted up to the bound, the last
// of which starts the cool-down, are answered with the RFC 1929 failure
// status, and every other is closed unanswered, as the address's new
// connections are, since SOCKS5 has no status that says "cooling down".
// Before, all 20 were answered as failed logins (12 where the bound was
// 10 in a real run), unlike HTTP, where the refusals past the bound are
// 429s a client tells apart.
func TestCoolDownHoldsTheCount(t *testing.T) {
	const bound, conns = 4, 20
	alog, out := newAccessLog(t)
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:     map[string]string{testUser: testPass},
		Limits:    &limits.Config{AuthFailures: bound, AuthFailuresPerAddress: bound, AuthCooldown: time.Hour},
		AccessLog: alog,
	})
	srv := startServer(t, "tcp4", pol, Config{})
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = dial(t, srv.addr)
		greet(t, cs[i], methodUserPass, methodUserPass)
	}
	answered := make([]bool, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			c.Write(userPassMsg(fmt.Sprintf("guess%d", i), "wrong"))
			var st [2]byte
			if _, err := io.ReadFull(c, st[:]); err == nil {
				answered[i] = st == [2]byte{1, 1}
				if !answered[i] {
					t.Errorf("login %d answered %x", i, st)
				}
			}
		})
	}
	wg.Wait()
	n := 0
	for _, a := range answered {
		if a {
			n++
		}
	}
	if n != bound {
		t.Errorf("%d of %d failed logins answered, want %d (the bound)", n, conns, bound)
	}
	waitFor(t, "a record of every login", func() bool { return strings.Count(out.String(), "\n") == conns })
	count := map[string]int{}
	for _, r := range records(t, out) {
		count[fmt.Sprintf("%v %v", r["reason"], r["status"])]++
	}
	want := map[string]int{"auth-failed 1": bound - 1, "cooling-down 1": 1, "cooling-down 0": conns - bound}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("records by reason and status %v, want %v", count, want)
	}
}
