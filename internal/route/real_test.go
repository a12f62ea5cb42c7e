package route_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// banner is a loopback origin that speaks first (as SSH or SMTP do) and
// then echoes a line.
func banner(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("220 origin ready\r\n"))
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Write([]byte("echo " + line))
			}()
		}
	}()
	return ln.Addr().String()
}

// TestRealParents dials through Squid (Basic auth) and Dante (SOCKS5,
// socks5 and socks5h) to a server-first origin: its greeting, sent right
// behind the parent's answer, arrives, and the tunnel carries bytes both
// ways. Wrong credentials to Squid fail as AuthFailed.
func TestRealParents(t *testing.T) {
	origin := banner(t)
	host, portStr, _ := net.SplitHostPort(origin)
	port := uint16(0)
	for _, c := range portStr {
		port = port*10 + uint16(c-'0')
	}
	squid := proxytest.StartSquid(t)
	dante := proxytest.StartDante(t)
	d := proxytest.NewDialer(t, dialer.Config{Timeout: 5 * time.Second, Guard: dialer.NewGuard(nil)})
	tests := []struct {
		name, url string
		target    route.Target
	}{
		{"squid", "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr, route.Target{Host: host, Port: port}},
		{"dante socks5", "socks5://" + dante.Addr, route.Target{Host: "localhost", Addr: netip.MustParseAddr(host), Port: port}},
		{"dante socks5h", "socks5h://" + dante.Addr, route.Target{Host: "localhost", Port: port}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := route.NewParent(proxytest.ParentDefaults(route.ParentConfig{Name: "p", URL: tt.url}))
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.Dial(context.Background(), d, tt.target)
			if err != nil {
				t.Fatalf("%v\n%s%s", err, squid.Output(), dante.Output())
			}
			defer c.Close()
			if _, ok := c.(*net.TCPConn); !ok {
				t.Errorf("Dial returned %T, want *net.TCPConn for the splice engine", c)
			}
			c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
			br := bufio.NewReader(c)
			if line, err := br.ReadString('\n'); err != nil || line != "220 origin ready\r\n" {
				t.Fatalf("greeting %q, %v", line, err)
			}
			io.WriteString(c, "hello\n")
			if line, err := br.ReadString('\n'); err != nil || line != "echo hello\n" {
				t.Fatalf("echo %q, %v", line, err)
			}
		})
	}
	t.Run("squid wrong password", func(t *testing.T) {
		p, err := route.NewParent(proxytest.ParentDefaults(route.ParentConfig{Name: "sq", URL: "http://" + proxytest.SquidUser + ":wrong@" + squid.Addr}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Dial(context.Background(), d, route.Target{Host: host, Port: port})
		var e *route.Error
		if !errors.As(err, &e) || e.Kind != route.AuthFailed || e.Code != 407 {
			t.Fatalf("error = %v, want AuthFailed 407", err)
		}
		if strings.Contains(err.Error(), "wrong") {
			t.Errorf("error %q shows the password", err)
		}
	})
}

// TestRealParentConnectHeader checks a route's field lines on the
// CONNECT to an http parent (Target.Header) against a Squid that refuses
// a request without the field, as a balancer in front of it may: with
// the field the tunnel opens, without it Squid refuses (403).
func TestRealParentConnectHeader(t *testing.T) {
	origin := banner(t)
	host, portStr, _ := net.SplitHostPort(origin)
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	squid := proxytest.StartSquidWith(t, proxytest.SquidConfig{RequireHeader: "X-Balancer-Token ^lb-token$"})
	d := proxytest.NewDialer(t, dialer.Config{Timeout: 5 * time.Second, Guard: dialer.NewGuard(nil)})
	p, err := route.NewParent(proxytest.ParentDefaults(route.ParentConfig{Name: "sq",
		URL: "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, header string
		code         int // 0 = the tunnel opens
	}{
		{"with the field", "X-Balancer-Token: lb-token\r\nX-Other: 1\r\n", 0},
		{"without", "", 403},
		{"another value", "X-Balancer-Token: other\r\n", 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := p.Dial(context.Background(), d, route.Target{Host: host, Port: uint16(port), Header: tt.header})
			if tt.code != 0 {
				var e *route.Error
				if !errors.As(err, &e) || e.Kind != route.Refused || e.Code != tt.code {
					t.Fatalf("Dial = %v, want refused with %d", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, squid.Output())
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
			if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "220 origin ready\r\n" {
				t.Fatalf("greeting %q, %v", line, err)
			}
		})
	}
}
