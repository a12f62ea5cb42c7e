package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// revokeWithin is how soon after a reload a removed user's connections,
// tunnels, streams and SOCKS sessions must have ended.
const revokeWithin = 2 * time.Second

// revokeRig is a running server with one listener of each protocol, the
// origins its clients reach and what it logs.
type revokeRig struct {
	s       *Server
	addr    map[string]string // listener name → bound address
	roots   *x509.CertPool    // trusts the https listener
	target  string            // a plain HTTP origin's URL
	echo    string            // a TCP echo server
	udpEcho netip.AddrPort    // a UDP echo server
	logs    *logBuffer        // the server's slog output
	access  *logBuffer        // the access log, JSON
}

// revokeListeners are the listeners of the revocation tests, one per
// protocol.
func revokeListeners(tl config.ListenerTLS) []config.Listener {
	return []config.Listener{
		{Name: "http", Address: "127.0.0.1:0", Protocol: "http"},
		{Name: "https", Address: "127.0.0.1:0", Protocol: "https", TLS: tl},
		{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
		{Name: "mixed", Address: "127.0.0.1:0", Protocol: "mixed"},
	}
}

// startRevokeRig runs a Server on cfg with its logs captured.
func startRevokeRig(t *testing.T, cfg *config.Config, roots *x509.CertPool) *revokeRig {
	t.Helper()
	r := &revokeRig{
		roots:  roots,
		target: fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t)),
		echo:   tcpEcho(t), udpEcho: proxytest.NewUDPEcho(t, "udp4").Addr,
		logs: &logBuffer{}, access: &logBuffer{},
	}
	r.s, r.addr = startLogged(t, cfg, slog.New(slog.NewTextHandler(r.logs, nil)), r.access)
	return r
}

// holding is one connection, tunnel, stream or association a user keeps
// open through the proxy.
type holding struct {
	name   string
	tunnel bool // it is logged as a tunnel when it ends
	// works checks that it still carries traffic.
	works func() error
	// ended waits, until deadline, for the proxy to have ended it.
	ended func(deadline time.Time) error
}

// hold opens, as user, every kind of connection the listener lc serves.
func (r *revokeRig) hold(t *testing.T, lc config.Listener, user, pass string) []*holding {
	t.Helper()
	addr := r.addr[lc.Name]
	dialTCP := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dialTLS := func(proto string) *tls.Conn {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{RootCAs: r.roots, ServerName: "127.0.0.1", NextProtos: []string{proto}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if got := c.ConnectionState().NegotiatedProtocol; got != proto {
			t.Fatalf("ALPN %q, want %q", got, proto)
		}
		return c
	}
	var hs []*holding
	switch lc.Protocol {
	case "http", "mixed":
		hs = append(hs,
			r.keepAlive(t, "keep-alive", dialTCP(), user, pass),
			r.connect(t, "CONNECT tunnel", dialTCP(), user, pass))
	case "https":
		hs = append(hs,
			r.keepAlive(t, "TLS keep-alive", dialTLS("http/1.1"), user, pass),
			r.connect(t, "TLS CONNECT tunnel", dialTLS("http/1.1"), user, pass),
			r.h2Stream(t, dialTLS("h2"), user, pass))
	}
	if lc.Protocol == "socks5" || lc.Protocol == "mixed" {
		hs = append(hs,
			r.socksConnect(t, dialTCP(), user, pass),
			r.socksAssociate(t, dialTCP(), user, pass))
	}
	for _, h := range hs {
		h.name = lc.Name + " " + h.name + " of " + user
	}
	return hs
}

// proxyAuth is a Proxy-Authorization value.
func proxyAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// keepAlive makes c a keep-alive connection that has served a request.
func (r *revokeRig) keepAlive(t *testing.T, name string, c net.Conn, user, pass string) *holding {
	t.Helper()
	k := &keepAlive{c: c, br: bufio.NewReader(c)}
	get := func() error {
		code, body, err := k.get(r.target, basic(user, pass))
		if err != nil {
			return err
		}
		if code != 200 || body != "origin says /ok" {
			return fmt.Errorf("GET: %d %q", code, body)
		}
		return nil
	}
	if err := get(); err != nil {
		t.Fatalf("%s: first request: %v", name, err)
	}
	return &holding{name: name, works: get, ended: func(d time.Time) error { return readEnded(c, k.br, d) }}
}

// connect opens a CONNECT tunnel to the echo server on c.
func (r *revokeRig) connect(t *testing.T, name string, c net.Conn, user, pass string) *holding {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n\r\n", r.echo, r.echo, basic(user, pass))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", name, resp.Status)
	}
	c.SetDeadline(time.Time{})
	h := &holding{name: name, tunnel: true,
		works: func() error { return echoOnce(c, br) },
		ended: func(d time.Time) error { return readEnded(c, br, d) }}
	if err := h.works(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return h
}

// h2Stream opens an HTTP/2 connection on c that has served a GET and
// carries a CONNECT stream to the echo server.
func (r *revokeRig) h2Stream(t *testing.T, c *tls.Conn, user, pass string) *holding {
	t.Helper()
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	auth := proxyAuth(user, pass)
	get := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", r.target, nil)
		req.Header.Set("Proxy-Authorization", auth)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "origin says /ok" {
			return fmt.Errorf("h2 GET: %d %q %v", resp.StatusCode, body, err)
		}
		return nil
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, _ := http.NewRequest("CONNECT", "", pr)
	req.URL, req.Host = &url.URL{Host: r.echo}, r.echo
	req.Header.Set("Proxy-Authorization", auth)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("h2 CONNECT: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("h2 CONNECT: %s", resp.Status)
	}
	echo := func() error {
		return within(5*time.Second, func() error {
			if _, err := io.WriteString(pw, "ping\n"); err != nil {
				return err
			}
			buf := make([]byte, 5)
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				return err
			}
			if string(buf) != "ping\n" {
				return fmt.Errorf("echoed %q", buf)
			}
			return nil
		})
	}
	if err := echo(); err != nil {
		t.Fatalf("h2 CONNECT stream: %v", err)
	}
	return &holding{name: "h2 connection with a CONNECT stream", tunnel: true,
		works: func() error {
			if err := echo(); err != nil {
				return fmt.Errorf("stream: %w", err)
			}
			return get()
		},
		ended: func(d time.Time) error {
			err := within(time.Until(d), func() error {
				_, err := resp.Body.Read(make([]byte, 1))
				return err
			})
			if err == nil {
				return errors.New("the stream delivered a byte")
			}
			if errors.Is(err, errTooLate) {
				return errors.New("the stream is still open")
			}
			if get() == nil {
				return errors.New("the connection still serves requests")
			}
			return nil
		}}
}

// socksLogin greets a SOCKS5 listener on c and logs in.
func socksLogin(t *testing.T, c net.Conn, user, pass string) *bufio.Reader {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	msg := []byte{5, 1, 2, 1, byte(len(user))}
	msg = append(msg, user...)
	msg = append(msg, byte(len(pass)))
	msg = append(msg, pass...)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var rep [4]byte
	if _, err := io.ReadFull(br, rep[:]); err != nil {
		t.Fatalf("socks5 login: %v", err)
	}
	if rep != [4]byte{5, 2, 1, 0} {
		t.Fatalf("socks5 login answered % x", rep)
	}
	return br
}

// socksRequest sends a SOCKS5 request of command cmd for dst and returns
// the address of the reply.
func socksRequest(t *testing.T, c net.Conn, br *bufio.Reader, cmd byte, dst netip.AddrPort) netip.AddrPort {
	t.Helper()
	ip := dst.Addr().As4()
	msg := append([]byte{5, cmd, 0, 1}, ip[:]...)
	msg = binary.BigEndian.AppendUint16(msg, dst.Port())
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var head [4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		t.Fatalf("socks5 reply: %v", err)
	}
	if head[1] != 0 {
		t.Fatalf("socks5 command %d refused: reply %d", cmd, head[1])
	}
	n := 4
	if head[3] == 4 {
		n = 16
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(br, b); err != nil {
		t.Fatalf("socks5 reply address: %v", err)
	}
	a, _ := netip.AddrFromSlice(b[:n])
	return netip.AddrPortFrom(a.Unmap(), binary.BigEndian.Uint16(b[n:]))
}

// socksConnect opens a SOCKS5 CONNECT tunnel to the echo server on c.
func (r *revokeRig) socksConnect(t *testing.T, c net.Conn, user, pass string) *holding {
	t.Helper()
	br := socksLogin(t, c, user, pass)
	socksRequest(t, c, br, 1, netip.MustParseAddrPort(r.echo))
	c.SetDeadline(time.Time{})
	h := &holding{name: "SOCKS5 CONNECT tunnel", tunnel: true,
		works: func() error { return echoOnce(c, br) },
		ended: func(d time.Time) error { return readEnded(c, br, d) }}
	if err := h.works(); err != nil {
		t.Fatalf("socks5 tunnel: %v", err)
	}
	return h
}

// socksAssociate opens a SOCKS5 UDP association on c and a UDP socket
// that sends its datagrams to the UDP echo server.
func (r *revokeRig) socksAssociate(t *testing.T, c net.Conn, user, pass string) *holding {
	t.Helper()
	br := socksLogin(t, c, user, pass)
	relay := socksRequest(t, c, br, 3, netip.AddrPortFrom(netip.IPv4Unspecified(), 0))
	c.SetDeadline(time.Time{})
	uc, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(relay))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	ip := r.udpEcho.Addr().As4()
	dgram := append([]byte{0, 0, 0, 1}, ip[:]...)
	dgram = binary.BigEndian.AppendUint16(dgram, r.udpEcho.Port())
	dgram = append(dgram, "ping"...)
	// exchange sends a datagram and waits wait for its echo.
	exchange := func(wait time.Duration) error {
		if _, err := uc.Write(dgram); err != nil {
			return err
		}
		uc.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 512)
		n, err := uc.Read(buf)
		if err != nil {
			return err
		}
		if n < 10 || string(buf[10:n]) != "ping" {
			return fmt.Errorf("echoed datagram % x", buf[:n])
		}
		return nil
	}
	// The relay answers once it has taken the association up.
	var werr error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if werr = exchange(100 * time.Millisecond); werr == nil {
			break
		}
	}
	if werr != nil {
		t.Fatalf("socks5 association: %v", werr)
	}
	return &holding{name: "SOCKS5 UDP association", tunnel: true,
		works: func() error {
			var err error
			for range 10 { // a datagram may be lost
				if err = exchange(500 * time.Millisecond); err == nil {
					return nil
				}
			}
			return err
		},
		ended: func(d time.Time) error {
			if err := readEnded(c, br, d); err != nil {
				return fmt.Errorf("control connection: %w", err)
			}
			// The relay's socket is closed: a datagram to it is refused.
			for time.Now().Before(d) {
				err := exchange(50 * time.Millisecond)
				if errors.Is(err, syscall.ECONNREFUSED) {
					return nil
				}
			}
			return errors.New("the relay still takes datagrams")
		}}
}

// echoOnce sends a line through a tunnel to the echo server and reads it
// back.
func echoOnce(c net.Conn, br *bufio.Reader) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("echoed %q", line)
	}
	return nil
}

// readEnded waits, until deadline, for the proxy to end c: a read that
// returns end of stream or an error other than the deadline's.
func readEnded(c net.Conn, br *bufio.Reader, deadline time.Time) error {
	c.SetReadDeadline(deadline)
	buf := make([]byte, 512)
	for {
		_, err := br.Read(buf)
		var ne net.Error
		switch {
		case err == nil:
			continue // bytes the proxy still sent
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("still open %v after the reload", revokeWithin)
		}
		return nil
	}
}

// errTooLate is within's error when fn did not return in time.
var errTooLate = errors.New("timed out")

// within runs fn and returns its error, or errTooLate when it has not
// returned after d (fn then goes on, until the test's clean-up ends it).
func within(d time.Duration, fn func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		return errTooLate
	}
}

// TestRevokeRemovedUsers checks that a reload that removes a user (from
// the configuration, or a line of a users file) ends, on every port and
// within 2 s, that user's keep-alive connections, CONNECT tunnels (the
// splice engine's, the TLS relay's, the paced relay's), HTTP/2
// connections and streams, and SOCKS5 tunnels and UDP associations, and
// logs it once; another user's keep working.
func TestRevokeRemovedUsers(t *testing.T) {
	tests := []struct {
		name     string
		htpasswd bool // the users come from a users file
		paced    bool // limits.user_bytes_per_second is set
	}{
		{name: "inline users"},
		{name: "users file", htpasswd: true},
		{name: "paced users", paced: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, roots := proxyCerts(t)
			usersFile := filepath.Join(t.TempDir(), "users.htpasswd")
			writeUsers := func(names ...string) {
				t.Helper()
				var lines []string
				for _, n := range names {
					h, err := bcrypt.GenerateFromPassword([]byte(n+"-pw"), bcrypt.MinCost)
					if err != nil {
						t.Fatal(err)
					}
					lines = append(lines, n+":"+string(h))
				}
				if err := os.WriteFile(usersFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			configure := func(withBob bool) *config.Config {
				t.Helper()
				cfg := config.Default()
				cfg.Workers = 1
				cfg.AllowPrivate = []string{"127.0.0.0/8"}
				cfg.Listen = revokeListeners(tl)
				if tt.htpasswd {
					cfg.Auth.Htpasswd = []string{usersFile}
				} else {
					cfg.Auth.Users = []config.User{{Name: "alice", Password: "alice-pw"}}
					if withBob {
						cfg.Auth.Users = append(cfg.Auth.Users, config.User{Name: "bob", Password: "bob-pw"})
					}
				}
				if tt.paced {
					cfg.Limits.UserBytesPerSecond = 1 << 20
				}
				cfg.SetDefaults()
				if err := cfg.Validate(); err != nil {
					t.Fatalf("config: %v", err)
				}
				return cfg
			}
			if tt.htpasswd {
				writeUsers("alice", "bob")
			}
			r := startRevokeRig(t, configure(true), roots)

			var alice, bob []*holding
			for _, lc := range revokeListeners(tl) {
				alice = append(alice, r.hold(t, lc, "alice", "alice-pw")...)
				bob = append(bob, r.hold(t, lc, "bob", "bob-pw")...)
			}
			bobTunnels := 0
			for _, h := range bob {
				if h.tunnel {
					bobTunnels++
				}
			}
			logged := strings.Count(r.access.String(), "\n")

			if tt.htpasswd {
				writeUsers("alice")
			}
			if err := r.s.Reload(configure(false)); err != nil {
				t.Fatalf("Reload: %v", err)
			}
			deadline := time.Now().Add(revokeWithin)

			for _, h := range bob {
				t.Run("ends "+h.name, func(t *testing.T) {
					if err := h.ended(deadline); err != nil {
						t.Error(err)
					}
				})
			}
			for _, h := range alice {
				t.Run("keeps "+h.name, func(t *testing.T) {
					if err := h.works(); err != nil {
						t.Errorf("after the reload: %v", err)
					}
				})
			}

			want := `msg="access revoked: users removed by the reload" users=bob count=1`
			if got := strings.Count(r.logs.String(), "access revoked"); got != 1 || !strings.Contains(r.logs.String(), want) {
				t.Errorf("the log has %d revocation lines, want one with %s:\n%s", got, want, r.logs)
			}
			if got := status(t, r.addr["http"], r.target, basic("bob", "bob-pw")); got != 407 {
				t.Errorf("bob's new request after the reload: %d, want 407", got)
			}
			// Only alice's sessions are still tracked.
			waitFor(t, "bob's sessions and tunnels forgotten", func() bool { return r.s.revoked.Users() == 1 })

			// Each of bob's tunnels is logged when it ends, and says why.
			var recs []map[string]any
			waitFor(t, "the access log records of bob's tunnels", func() bool {
				recs = recs[:0]
				lines := strings.Split(strings.TrimSpace(r.access.String()), "\n")
				for _, l := range lines[min(logged, len(lines)):] {
					var rec map[string]any
					if err := json.Unmarshal([]byte(l), &rec); err != nil {
						t.Fatalf("access log line %q: %v", l, err)
					}
					if rec["user"] == "bob" && (rec["method"] == "CONNECT" || rec["method"] == "UDP ASSOCIATE") {
						recs = append(recs, rec)
					}
				}
				return len(recs) >= bobTunnels
			})
			if len(recs) != bobTunnels {
				t.Errorf("%d access log records of bob's tunnels, want %d: %v", len(recs), bobTunnels, recs)
			}
			for _, rec := range recs {
				if rec["reason"] != "revoked" {
					t.Errorf("revoked tunnel logged with reason %q: %v", rec["reason"], rec)
				}
				if rec["status"] != float64(200) && rec["status"] != float64(0) {
					t.Errorf("revoked tunnel logged with status %v: %v", rec["status"], rec)
				}
			}
		})
	}
}

// TestRevokeUserTakenOffListener checks that a reload that gives
// listeners a users list leaving bob out ends bob's keep-alive
// connections, tunnels, HTTP/2 streams and SOCKS5 sessions on those
// listeners within 2 s, and the connection of a client certificate's user
// it leaves out, while bob keeps his on the listener without a list and
// alice, on the list, keeps hers everywhere; the one log line names bob
// and the listeners.
func TestRevokeUserTakenOffListener(t *testing.T) {
	tl, roots := proxyCerts(t)
	var carol *tls.Certificate
	tl.ClientCA, carol, _, _ = conformClientCerts(t)
	configure := func(only []string) *config.Config {
		t.Helper()
		cfg := config.Default()
		cfg.Workers = 1
		cfg.AllowPrivate = []string{"127.0.0.0/8"}
		cfg.Auth.Users = []config.User{{Name: "alice", Password: "alice-pw"}, {Name: "bob", Password: "bob-pw"}}
		cfg.Listen = revokeListeners(tl)
		for i := range cfg.Listen {
			if cfg.Listen[i].Name != "http" {
				cfg.Listen[i].Users = only
			}
		}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatalf("config: %v", err)
		}
		return cfg
	}
	r := startRevokeRig(t, configure(nil), roots)

	var alice, bobKept, bobEnded []*holding
	for _, lc := range revokeListeners(tl) {
		alice = append(alice, r.hold(t, lc, "alice", "alice-pw")...)
		if lc.Name == "http" {
			bobKept = append(bobKept, r.hold(t, lc, "bob", "bob-pw")...)
		} else {
			bobEnded = append(bobEnded, r.hold(t, lc, "bob", "bob-pw")...)
		}
	}
	// carol, named by her certificate alone, on the https listener.
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.addr["https"],
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}, Certificates: []tls.Certificate{*carol}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	carolHeld := r.keepAlive(t, "carol's certificate keep-alive", c, "", "")

	if err := r.s.Reload(configure([]string{"alice"})); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	deadline := time.Now().Add(revokeWithin)
	for _, h := range append(bobEnded, carolHeld) {
		t.Run("ends "+h.name, func(t *testing.T) {
			if err := h.ended(deadline); err != nil {
				t.Error(err)
			}
		})
	}
	for _, h := range append(alice, bobKept...) {
		t.Run("keeps "+h.name, func(t *testing.T) {
			if err := h.works(); err != nil {
				t.Errorf("after the reload: %v", err)
			}
		})
	}
	want := `msg="access revoked: users removed by the reload" users=bob,carol count=2 listeners=https,mixed,socks`
	if got := strings.Count(r.logs.String(), "access revoked"); got != 1 || !strings.Contains(r.logs.String(), want) {
		t.Errorf("the log has %d revocation lines, want one with %s:\n%s", got, want, r.logs)
	}
	for _, tc := range []struct {
		listener string
		want     int
	}{
		{"http", 200},
		{"mixed", 407},
	} {
		if got := status(t, r.addr[tc.listener], r.target, basic("bob", "bob-pw")); got != tc.want {
			t.Errorf("bob's new request on %s after the reload: %d, want %d", tc.listener, got, tc.want)
		}
	}
}
