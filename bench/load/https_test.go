package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"flag"
	"io"
	"net"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeInterceptor answers CONNECT with 200, then terminates the client's
// TLS with cert (as an intercepting proxy does) and answers every request
// inside with 1 KB. It records each tunnel's CONNECT line, TLS server
// name and first inner request line with its Host.
func fakeInterceptor(t *testing.T, cert tls.Certificate) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	addr := serveConns(t, listen(t), func(c net.Conn) {
		br := bufio.NewReader(c)
		tp := textproto.NewReader(br)
		connect, err := tp.ReadLine()
		if err != nil {
			return
		}
		if _, err := tp.ReadMIMEHeader(); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		if err := tc.Handshake(); err != nil {
			return
		}
		itp := textproto.NewReader(bufio.NewReader(tc))
		for i := 0; ; i++ {
			line, err := itp.ReadLine()
			if err != nil {
				return
			}
			h, err := itp.ReadMIMEHeader()
			if err != nil {
				return
			}
			if i == 0 {
				mu.Lock()
				seen = append(seen, connect+"|"+tc.ConnectionState().ServerName+"|"+line+"|"+h.Get("Host"))
				mu.Unlock()
			}
			if _, err := io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n"+strings.Repeat("x", 1024)); err != nil {
				return
			}
		}
	})
	return addr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// httpsDialer returns the dialer "load http -https -ca CA -proxy addr"
// builds for target, with -alt-host alt and -newconn's flags.
func httpsDialer(t *testing.T, addr, target, alt string) dialer {
	t.Helper()
	cert, _ := testCert(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	df := addDialFlags(fs)
	args := []string{"-https", "-ca", ca, "-proxy", addr}
	if alt != "" {
		args = append(args, "-alt-host", alt)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	d, err := df.dialer(target, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestHTTPSThroughTunnel checks -https through a proxy: each connection
// is a CONNECT tunnel with the client's TLS inside (the proxy's
// certificate trusted through -ca), the requests in origin form; with
// -alt-host, every other connection names the other host in the CONNECT
// line, the server name and Host.
func TestHTTPSThroughTunnel(t *testing.T) {
	tests := []struct {
		name    string
		alt     string
		newConn bool
		want    []string // the first connections' records, in order
	}{
		{"keep-alive", "", false, []string{"CONNECT 127.0.0.1:9 HTTP/1.1||GET /1k HTTP/1.1|127.0.0.1:9"}},
		{"new connections, alternating names", "localhost", true, []string{
			"CONNECT 127.0.0.1:9 HTTP/1.1||GET /1k HTTP/1.1|127.0.0.1:9",
			"CONNECT localhost:9 HTTP/1.1|localhost|GET /1k HTTP/1.1|localhost:9",
			"CONNECT 127.0.0.1:9 HTTP/1.1||GET /1k HTTP/1.1|127.0.0.1:9",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, _ := testCert(t)
			addr, seen := fakeInterceptor(t, cert)
			d := httpsDialer(t, addr, "127.0.0.1:9", tt.alt)
			// The fake proxy's certificate is another testCert: trust it.
			d.inner.RootCAs.AddCert(cert.Leaf)
			var c counts
			httpWorker(context.Background(), d, httpRequest(d, "/1k", tt.newConn), tt.newConn, time.Now().Add(loadWindow), 5*time.Second, &c)
			if c.requests < 3 || c.bytes < c.requests*1024 {
				t.Fatalf("%d requests, %d bytes; want at least 3, with 1 KB bodies (first error %v)", c.requests, c.bytes, c.firstErr)
			}
			if n := c.errs.Connect + c.errs.Read + c.errs.Write + c.errs.Timeout + c.errs.Status; n != 0 {
				t.Errorf("%d errors, first %v", n, c.firstErr)
			}
			got := seen()
			if len(got) < len(tt.want) {
				t.Fatalf("%d connections, want at least %d: %q", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				if got[i] != w {
					t.Errorf("connection %d: %q, want %q", i, got[i], w)
				}
			}
			if !tt.newConn && len(got) != 1 {
				t.Errorf("%d connections for keep-alive requests, want 1", len(got))
			}
			// The last tunnel may be cut by the end before its request.
			if h := d.handshakes.Load(); h != int64(len(got)) && h != int64(len(got))+1 {
				t.Errorf("%d TLS handshakes counted for %d tunnels that carried a request", h, len(got))
			}
		})
	}
}

// TestHoldHTTPS checks that holdHTTPS returns a tunnel whose one request
// was answered in full, kept open.
func TestHoldHTTPS(t *testing.T) {
	cert, _ := testCert(t)
	addr, seen := fakeInterceptor(t, cert)
	d := httpsDialer(t, addr, "127.0.0.1:9", "")
	d.inner.RootCAs.AddCert(cert.Leaf)
	c, err := holdHTTPS(context.Background(), d, httpRequest(d, "/1k", false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := seen(); len(got) != 1 || got[0] != "CONNECT 127.0.0.1:9 HTTP/1.1||GET /1k HTTP/1.1|127.0.0.1:9" {
		t.Errorf("proxy saw %q", got)
	}
}

// TestHTTPSFlags checks the flag combinations -https refuses.
func TestHTTPSFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-alt-host", "localhost"},
		{"-https", "-tls", "-proxy", "127.0.0.1:1"},
		{"-https", "-socks5", "-proxy", "127.0.0.1:1"},
	} {
		fs := flag.NewFlagSet("http", flag.ContinueOnError)
		df := addDialFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := df.dialer("127.0.0.1:9", time.Second); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
