package httpproxy_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// checkEcho writes data through c to an echo server while reading it
// back, then half-closes and expects the echo's end of stream: the bytes
// must come back exactly, in both directions.
func checkEcho(t *testing.T, c net.Conn, data []byte) {
	t.Helper()
	c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				err = cw.CloseWrite()
			}
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("read the echo: %v", err)
	}
	if err := <-werr; err != nil {
		t.Errorf("write: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("echo returned %d bytes not equal to the %d sent", len(got), len(data))
	}
}

// tlsEcho runs a TLS handshake over c with the echo server and checks an
// exchange of data.
func tlsEcho(t *testing.T, c net.Conn, e *proxytest.EchoServer, data []byte) {
	t.Helper()
	tc := tls.Client(c, e.ClientConfig())
	tc.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake through the tunnel: %v", err)
	}
	checkEcho(t, tc, data)
}

func TestConnect(t *testing.T) {
	t.Parallel()
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{})
	tlsE := proxytest.NewTLSEcho(t)
	plain := proxytest.NewEcho(t)
	data := payload(1 << 20)
	t.Run("TLS", func(t *testing.T) {
		t.Parallel()
		tlsEcho(t, proxytest.Connect(t, proxy, tlsE.Addr), tlsE, data)
	})
	t.Run("TLS ClientHello pipelined", func(t *testing.T) {
		t.Parallel()
		tlsEcho(t, proxytest.ConnectPipelined(t, proxy, tlsE.Addr), tlsE, data)
	})
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		checkEcho(t, proxytest.Connect(t, proxy, plain.Addr), data)
	})
	t.Run("plain pipelined", func(t *testing.T) {
		t.Parallel()
		checkEcho(t, proxytest.ConnectPipelined(t, proxy, plain.Addr), []byte("hello behind the head"))
	})
	t.Run("answer", func(t *testing.T) {
		t.Parallel()
		c := proxytest.Dial(t, proxy)
		c.Write("CONNECT " + plain.Addr + " HTTP/1.1\r\nHost: " + plain.Addr + "\r\n\r\n")
		r := c.ReadResponse("CONNECT")
		if string(r.Head) != "HTTP/1.1 200 Connection established\r\n\r\n" {
			t.Errorf("answer %q", r.Head)
		}
	})
}

func TestIPv6(t *testing.T) {
	t.Parallel()
	if !proxytest.IPv6Loopback() {
		t.Skip("no IPv6 loopback")
	}
	o, proxy, _ := setup(t, testCfg{}, proxytest.Respond(200, "ok"))
	t.Run("CONNECT [::1]", func(t *testing.T) {
		e := proxytest.NewTLSEcho(t)
		tlsEcho(t, proxytest.ConnectPipelined(t, proxy, e.Addr6), e, []byte("over IPv6"))
	})
	t.Run("http://[::1]:port/", func(t *testing.T) {
		c := proxytest.Dial(t, proxy)
		r, _ := c.RoundTrip(request("GET", o.URL6("/six"), 1, "", "Host: "+o.Addr6))
		if r.Status != 200 || string(r.Body) != "ok" {
			t.Fatalf("answer %q", r.Head)
		}
		want := "GET /six HTTP/1.1\r\nHost: " + o.Addr6 + "\r\n\r\n"
		if got := string(o.Requests()[0].Head); got != want {
			t.Errorf("origin got %q, want %q", got, want)
		}
	})
	for _, tt := range []struct{ mode, want string }{
		{origin.ForwardedRFC, `Forwarded: for="[::1]"`},
		{origin.ForwardedXFF, "X-Forwarded-For: ::1"},
	} {
		t.Run("client [::1] "+tt.mode, func(t *testing.T) {
			proxy6 := proxytest.StartProxyOn(t, "[::1]:0", proxytest.NewPolicy(t, proxytest.PolicyConfig{}), serve(t, testCfg{Forwarded: tt.mode}))
			c := proxytest.Dial(t, proxy6)
			n := o.NumRequests()
			if r, _ := c.RoundTrip(get(o, "/")); r.Status != 200 {
				t.Fatalf("answer %q", r.Head)
			}
			want := "GET / HTTP/1.1\r\nHost: " + o.Addr + "\r\n" + tt.want + "\r\n\r\n"
			if got := string(o.Requests()[n].Head); got != want {
				t.Errorf("origin got %q, want %q", got, want)
			}
		})
	}
}
