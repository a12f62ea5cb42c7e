package route

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// TestNewParent checks the parsing of parent URLs.
func TestNewParent(t *testing.T) {
	tests := []struct {
		name, url string
		scheme    Scheme
		addr      string
		auth      string
		wantErr   string
	}{
		{"http", "http://127.0.0.1:3128", HTTP, "127.0.0.1:3128", "", ""},
		{"http auth", "http://alice:s%3Acret@proxy.test:3128", HTTP, "proxy.test:3128", "Basic YWxpY2U6czpjcmV0", ""},
		{"https", "https://proxy.test:443/", HTTPS, "proxy.test:443", "", ""},
		{"socks5", "socks5://u:p@[::1]:1080", SOCKS5, "[::1]:1080", "", ""},
		{"socks5h", "socks5h://10.0.0.1:1080", SOCKS5H, "10.0.0.1:1080", "", ""},
		{"no port", "http://proxy.test", 0, "", "", "host and a port"},
		{"bad port", "http://proxy.test:0", 0, "", "", "not 1-65535"},
		{"scheme", "ftp://proxy.test:21", 0, "", "", "scheme \"ftp\""},
		{"path", "http://proxy.test:3128/x", 0, "", "", "path"},
		{"not a url", "http://u:secret@[::1", 0, "", "", "not a URL"},
		{"socks user too long", "socks5://" + strings.Repeat("u", 256) + ":p@h:1", 0, "", "", "1-255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewParent(parentConfig(ParentConfig{Name: "p", URL: tt.url}))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one with %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error %q shows the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Scheme() != tt.scheme || p.Addr() != tt.addr || p.Authorization() != tt.auth {
				t.Errorf("got %v %s %q, want %v %s %q", p.Scheme(), p.Addr(), p.Authorization(), tt.scheme, tt.addr, tt.auth)
			}
			if p.ConnectTimeout() != 10*time.Second {
				t.Errorf("connect timeout %v, want the configured 10s", p.ConnectTimeout())
			}
		})
	}
	for _, cfg := range []ParentConfig{
		{Name: "p", URL: "http://h:1", CAFile: "ca.pem"},
		{Name: "p", URL: "https://h:1", CAFile: "/nonexistent/ca.pem"},
		{Name: "p", URL: "socks5://h:1", Probe: ProbeConfig{Interval: time.Second, Target: "example.com:80"}},
		{Name: "p", URL: "http://h:1", Probe: ProbeConfig{Target: "example.com:80"}},
		{Name: "", URL: "http://h:1"},
	} {
		if _, err := NewParent(cfg); err == nil {
			t.Errorf("NewParent(%+v) = nil error", cfg)
		}
	}
}

// fakeParent is a loopback listener whose connections serve runs.
func fakeParent(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			serve(c)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// parentConfig returns c with its settings left zero given the values
// rustle's configuration gives them (config.SetDefaults, with the
// default timeouts.connect): a 10s connect timeout, and 3 failures within
// 10s putting the parent down for 30s.
func parentConfig(c ParentConfig) ParentConfig {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	h := &c.Health
	if h.MaxFails == 0 {
		h.MaxFails = 3
	}
	if h.Window == 0 {
		h.Window = 10 * time.Second
	}
	if h.Cooldown == 0 {
		h.Cooldown = 30 * time.Second
	}
	return c
}

// tableConfig returns c with parentConfig applied to its parents.
func tableConfig(c Config) Config {
	ps := make([]ParentConfig, len(c.Parents))
	for i, p := range c.Parents {
		ps[i] = parentConfig(p)
	}
	c.Parents = ps
	return c
}

func testDialer(t testing.TB) *dialer.Dialer {
	t.Helper()
	// A guard that refuses loopback: a parent's own address is not its
	// business.
	d, err := dialer.New(dialer.Config{Timeout: 5 * time.Second, Guard: dialer.NewGuard(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDialHTTP checks CONNECT through an HTTP parent: the parent's
// credentials are sent, the answer is read exactly (bytes the origin sends
// right behind it arrive), and each failure has its kind.
func TestDialHTTP(t *testing.T) {
	tests := []struct {
		name   string
		answer string // "" = say nothing
		kind   ErrorKind
		code   int
	}{
		{"ok with server-first bytes", "HTTP/1.1 200 Connection established\r\nVia: x\r\n\r\nSSH-2.0-banner\r\n", 0, 0},
		{"ok bare LF", "HTTP/1.0 200 OK\n\nSSH-2.0-banner\r\n", 0, 0},
		{"auth", "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", AuthFailed, 407},
		{"refused", "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", Refused, 403},
		{"not http", "SSH-2.0-x\r\n\r\n", Protocol, 0},
		{"closed", "HTTP/1.1 200", Unreachable, 0},
		{"silent", "", TimedOut, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotReq := make(chan *http.Request, 1)
			addr := fakeParent(t, func(c net.Conn) {
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				gotReq <- req
				if tt.answer == "" {
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					io.Copy(io.Discard, c)
					return
				}
				c.Write([]byte(tt.answer))
			})
			p, err := NewParent(parentConfig(ParentConfig{Name: "sq", URL: "http://rustle:pw@" + addr, ConnectTimeout: 300 * time.Millisecond}))
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.Dial(context.Background(), testDialer(t), Target{Host: "origin.test", Port: 22})
			req := <-gotReq
			if req.Method != "CONNECT" || req.Host != "origin.test:22" || req.Header.Get("Proxy-Authorization") != "Basic cnVzdGxlOnB3" {
				t.Errorf("parent got %s %s %v", req.Method, req.Host, req.Header)
			}
			if tt.kind != 0 {
				var e *Error
				if !errors.As(err, &e) || e.Kind != tt.kind || e.Code != tt.code || e.Parent != "sq" {
					t.Fatalf("error = %#v, want kind %v code %d", err, tt.kind, tt.code)
				}
				if strings.Contains(e.Reason(), "pw") {
					t.Errorf("reason %q", e.Reason())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, ok := c.(*net.TCPConn); !ok {
				t.Errorf("Dial returned %T, want *net.TCPConn", c)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != "SSH-2.0-banner\r\n" {
				t.Errorf("first bytes behind the answer = %q, %v", line, err)
			}
		})
	}
}

// TestDialUnreachable checks a parent that refuses connections.
func TestDialUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := NewParent(parentConfig(ParentConfig{Name: "gone", URL: "socks5://" + addr}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Dial(context.Background(), testDialer(t), Target{Addr: netip.MustParseAddr("192.0.2.1"), Port: 80})
	var e *Error
	if !errors.As(err, &e) || e.Kind != Unreachable || e.Kind.Status() != 502 {
		t.Fatalf("error = %v, want Unreachable", err)
	}
	if got := e.Reason(); got != "parent proxy gone is unreachable" {
		t.Errorf("reason %q", got)
	}
}

// TestDialSOCKS5 checks the SOCKS5 handshake: username/password, the
// address for socks5 and the name for socks5h, the reply read exactly,
// and refusals.
func TestDialSOCKS5(t *testing.T) {
	tests := []struct {
		name    string
		scheme  string
		user    string
		authOK  bool
		rep     byte
		wantReq []byte // the CONNECT request's address part
		kind    ErrorKind
	}{
		{"socks5 resolves here", "socks5", "u:p@", true, 0, []byte{1, 192, 0, 2, 7, 0, 80}, 0},
		{"socks5h sends the name", "socks5h", "u:p@", true, 0, append([]byte{3, 11}, "origin.test\x00\x50"...), 0},
		{"no auth", "socks5h", "", true, 0, append([]byte{3, 11}, "origin.test\x00\x50"...), 0},
		{"bad password", "socks5", "u:p@", false, 0, nil, AuthFailed},
		{"refused", "socks5", "u:p@", true, 5, []byte{1, 192, 0, 2, 7, 0, 80}, Refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotReq := make(chan []byte, 1)
			addr := fakeParent(t, func(c net.Conn) {
				var buf [512]byte
				if _, err := io.ReadFull(c, buf[:3]); err != nil {
					return
				}
				method := buf[2]
				c.Write([]byte{5, method})
				if method == 2 {
					io.ReadFull(c, buf[:2])
					ul := int(buf[1])
					io.ReadFull(c, buf[:ul+1])
					user := string(buf[:ul])
					pl := int(buf[ul])
					io.ReadFull(c, buf[:pl])
					if !tt.authOK || user != "u" || string(buf[:pl]) != "p" {
						c.Write([]byte{1, 1})
						return
					}
					c.Write([]byte{1, 0})
				}
				io.ReadFull(c, buf[:4])
				end := 4 + 4 + 2
				if buf[3] == 3 {
					io.ReadFull(c, buf[4:5])
					end = 5 + int(buf[4]) + 2
					io.ReadFull(c, buf[5:end])
				} else {
					io.ReadFull(c, buf[4:end])
				}
				gotReq <- append([]byte(nil), buf[3:end]...)
				// The reply with a bound address, then the origin's
				// greeting in the same write.
				c.Write(append([]byte{5, tt.rep, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x1f, 0x90}, "220 ready\r\n"...))
			})
			p, err := NewParent(parentConfig(ParentConfig{Name: "dante", URL: tt.scheme + "://" + tt.user + addr}))
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.Dial(context.Background(), testDialer(t),
				Target{Host: "origin.test", Addr: netip.MustParseAddr("192.0.2.7"), Port: 80})
			if tt.wantReq != nil {
				if got := <-gotReq; string(got) != string(tt.wantReq) {
					t.Errorf("CONNECT address %v, want %v", got, tt.wantReq)
				}
			}
			if tt.kind != 0 {
				var e *Error
				if !errors.As(err, &e) || e.Kind != tt.kind {
					t.Fatalf("error = %v, want kind %v", err, tt.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != "220 ready\r\n" {
				t.Errorf("first bytes behind the reply = %q, %v", line, err)
			}
		})
	}
}

// TestDialCancel checks that a cancelled context ends a handshake that
// waits for a silent parent before the connect timeout.
func TestDialCancel(t *testing.T) {
	addr := fakeParent(t, func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, c)
	})
	p, err := NewParent(parentConfig(ParentConfig{Name: "p", URL: "http://" + addr, ConnectTimeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Dial(ctx, testDialer(t), Target{Host: "o.test", Port: 443})
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Dial succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dial ignored the cancelled context")
	}
}

// TestConnectTimeoutHandshake checks that a parent's connect timeout
// bounds its handshake, not only the TCP connect: a parent that accepts
// and then says nothing (no TLS ServerHello, no SOCKS5 method answer, no
// CONNECT answer) fails TimedOut once it has passed, for each scheme.
func TestConnectTimeoutHandshake(t *testing.T) {
	for _, scheme := range []string{"http", "https", "socks5h"} {
		t.Run(scheme, func(t *testing.T) {
			addr := fakeParent(t, func(c net.Conn) {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c)
			})
			const timeout = 200 * time.Millisecond
			p, err := NewParent(parentConfig(ParentConfig{Name: "p", URL: scheme + "://" + addr, ConnectTimeout: timeout}))
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			_, err = p.Dial(context.Background(), testDialer(t), Target{Host: "o.test", Port: 443})
			took := time.Since(t0)
			var e *Error
			if !errors.As(err, &e) || e.Kind != TimedOut {
				t.Fatalf("Dial = %v, want a TimedOut *Error", err)
			}
			if took < timeout || took > 5*time.Second {
				t.Errorf("Dial took %v with a connect timeout of %v", took, timeout)
			}
		})
	}
}

// TestNewParentRefusesMissingSettings checks that NewParent refuses the
// connect timeout and health settings the configuration fills
// (config.SetDefaults) when they are left zero, instead of choosing
// values of its own (it used to default them: 10s, 3 failures, 10s, 30s).
func TestNewParentRefusesMissingSettings(t *testing.T) {
	for _, tt := range []struct {
		name   string
		modify func(c *ParentConfig)
		want   string
	}{
		{"all set", func(c *ParentConfig) {}, ""},
		{"no connect timeout", func(c *ParentConfig) { c.ConnectTimeout = 0 }, "connect timeout 0s is not positive"},
		{"no max_fails", func(c *ParentConfig) { c.Health.MaxFails = 0 }, "health: max_fails 0 is not positive"},
		{"no fail_window", func(c *ParentConfig) { c.Health.Window = 0 }, "health: fail_window 0s is not positive"},
		{"no cooldown", func(c *ParentConfig) { c.Health.Cooldown = 0 }, "health: cooldown 0s is not positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := parentConfig(ParentConfig{Name: "p", URL: "http://127.0.0.1:3128"})
			tt.modify(&c)
			p, err := NewParent(c)
			if tt.want == "" && (err != nil || p == nil) || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("NewParent: %v (a parent: %v); want an error with %q", err, p != nil, tt.want)
			}
		})
	}
}

// TestProbeTargetRefused checks what a parent's probe target that is not
// host:port (a host and a port 1-65535) is refused with.
func TestProbeTargetRefused(t *testing.T) {
	tests := []struct{ target, want string }{
		{"h:0", `probe target: "h:0" is not host:port`},
		{"h:http", `probe target: "h:http" is not host:port`},
		{"h:65536", `probe target: "h:65536" is not host:port`},
		{":80", `probe target: ":80" is not host:port`},
		{"h", "probe target: address h: missing port in address"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			_, err := NewParent(parentConfig(ParentConfig{Name: "p", URL: "http://h:1", Probe: ProbeConfig{Interval: time.Second, Target: tt.target}}))
			if err == nil || !strings.HasSuffix(err.Error(), tt.want) {
				t.Errorf("NewParent with probe target %q: %v, want an error ending %q", tt.target, err, tt.want)
			}
		})
	}
	if _, err := NewParent(parentConfig(ParentConfig{Name: "p", URL: "http://h:1", Probe: ProbeConfig{Interval: time.Second, Target: "[::1]:443"}})); err != nil {
		t.Errorf("NewParent with probe target [::1]:443: %v", err)
	}
}
