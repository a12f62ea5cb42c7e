package route

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInstance checks the token: "rustle-" and 16 hex digits, another
// for each instance, and the Via lines and elements made of it; the nil
// Instance is the process's default.
func TestInstance(t *testing.T) {
	in := NewInstance()
	tok := in.Token()
	if NewInstance().Token() == tok || (*Instance)(nil).Token() != defaultInstance.Token() {
		t.Error("two instances with one token")
	}
	if len(tok) != len("rustle-")+16 || !strings.HasPrefix(tok, "rustle-") ||
		strings.Trim(tok[len("rustle-"):], "0123456789abcdef") != "" {
		t.Fatalf("Instance() = %q, want rustle- and 16 hex digits", tok)
	}
	for major, want := range map[int]string{1: "1.1 ", 2: "2 ", 3: "3 "} {
		if got := in.ViaLine(major); got != "Via: "+want+tok+"\r\n" {
			t.Errorf("ViaLine(%d) = %q", major, got)
		}
		if got := in.ViaElement(major); got != want+tok {
			t.Errorf("ViaElement(%d) = %q", major, got)
		}
	}
}

// TestNamesSelf checks which Via values name an instance: its token as
// an element's received-by, in any position, and nothing else (another
// instance's token neither).
func TestNamesSelf(t *testing.T) {
	in := NewInstance()
	tok := in.Token()
	other := NewInstance().Token()
	tests := []struct {
		via  string
		want bool
	}{
		{"1.1 " + tok, true},
		{"2 " + tok, true},
		{"1.0 fred, 1.1 " + tok, true},
		{"1.1 " + tok + ", 1.1 squid", true},
		{"1.1 " + tok + " (rustle)", true},
		{"1.0 fred,1.1\t" + tok + ",1.1 x", true},
		{"", false},
		{"1.1 rustle", false},
		{"1.1 " + other, false},
		{"1.1 " + other + ", 1.1 squid (" + tok + ")", false}, // a comment
		{"1.1 x" + tok, false},
		{"1.1 " + tok + "0", false},
		{"1.1 " + tok[:len(tok)-1], false},
		{tok, false}, // no protocol: not an element naming it
	}
	for _, tt := range tests {
		if got := NamesSelf(in, tt.via); got != tt.want {
			t.Errorf("NamesSelf(%q) = %v, want %v", tt.via, got, tt.want)
		}
		if got := NamesSelf(in, []byte(tt.via)); got != tt.want {
			t.Errorf("NamesSelf([]byte(%q)) = %v, want %v", tt.via, got, tt.want)
		}
	}
	b := []byte("1.0 fred, 1.1 squid, 1.1 " + other + ", 1.1 " + tok)
	if n := testing.AllocsPerRun(100, func() { NamesSelf(in, b) }); n != 0 {
		t.Errorf("NamesSelf allocates %v times", n)
	}
}

// TestDialHTTPVia checks the Via of a CONNECT to an HTTP parent: the
// elements the request came with, then the asking instance's; and a parent's
// 508 is an *Error of kind Looped, 508, that does not count against the
// parent's health.
func TestDialHTTPVia(t *testing.T) {
	in := NewInstance()
	tests := []struct {
		name, in, want string
		answer         string
		kind           ErrorKind
	}{
		{"none in", "", in.ViaElement(1), "HTTP/1.1 200 OK\r\n\r\n", 0},
		{"some in", "1.0 fred, 2 squid", "1.0 fred, 2 squid, " + in.ViaElement(1), "HTTP/1.1 200 OK\r\n\r\n", 0},
		{"loop answered", "", in.ViaElement(1), "HTTP/1.1 508 Loop Detected\r\nContent-Length: 0\r\n\r\n", Looped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotVia := make(chan []string, 1)
			addr := fakeParent(t, func(c net.Conn) {
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				gotVia <- req.Header.Values("Via")
				c.Write([]byte(tt.answer))
			})
			p, err := NewParent(parentConfig(ParentConfig{Name: "up", URL: "http://u:pw@" + addr, Health: HealthConfig{MaxFails: 1}}))
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.Dial(context.Background(), testDialer(t), Target{Host: "origin.test", Port: 443, Via: tt.in, Self: in})
			if via := <-gotVia; len(via) != 1 || via[0] != tt.want {
				t.Errorf("parent got Via %q, want [%q]", via, tt.want)
			}
			if tt.kind == 0 {
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Kind != Looped || e.Code != 508 || e.Kind.Status() != 508 {
				t.Fatalf("error = %#v, want Looped 508", err)
			}
			if got := e.Reason(); got != "loop detected: parent proxy up leads back to a proxy the request has passed" {
				t.Errorf("reason %q", got)
			}
			if !p.Health().Up(time.Now()) {
				t.Error("a 508 put the parent down")
			}
		})
	}
}

// TestReturning checks that a connection rustle accepts is recognised as
// one of its own parent connections only while that connection's
// handshake is in progress, by the instance that made it, and only by
// both its ends: another connection from the same local port to another
// address is not.
func TestReturning(t *testing.T) {
	in := NewInstance()
	accepted := make(chan net.Conn, 4)
	self, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { self.Close() })
	go func() {
		for {
			c, err := self.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// The "parent" is this listener: rustle accepts its own connection,
	// which waits for the CONNECT's answer.
	p, err := NewParent(parentConfig(ParentConfig{Name: "me", URL: "http://" + self.Addr().String(), ConnectTimeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		c, err := p.Dial(context.Background(), testDialer(t), Target{Host: "origin.test", Port: 443, Self: in})
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	c := <-accepted
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	if !NamesSelf(in, req.Header.Get("Via")) {
		t.Errorf("the CONNECT's Via %q does not name the instance", req.Header.Get("Via"))
	}
	if !Returning(in, c) {
		t.Error("Returning(the accepted end of a handshake in progress) = false")
	}
	if Returning(NewInstance(), c) || Returning(nil, c) {
		t.Error("Returning for another instance = true")
	}
	// Another client is not; nor is a connection from the handshake's
	// local port (the loopback address's ports are shared by
	// connections to different destinations) to another address.
	other, err := net.Dial("tcp4", self.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	oc := <-accepted
	defer oc.Close()
	if Returning(in, oc) {
		t.Error("Returning(another client) = true")
	}
	elsewhere := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: self.Addr().(*net.TCPAddr).Port + 1}
	if Returning(in, addrConn{c, c.RemoteAddr(), elsewhere}) {
		t.Error("Returning(the handshake's local address, to another address) = true")
	}
	c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if Returning(in, c) {
		t.Error("Returning after the handshake ended = true")
	}
	if Returning(in, nil) {
		t.Error("Returning(nil) = true")
	}
}

// addrConn is a net.Conn with the addresses a test gives it.
type addrConn struct {
	net.Conn
	remote, local net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }
func (c addrConn) LocalAddr() net.Addr  { return c.local }
