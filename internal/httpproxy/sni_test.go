package httpproxy_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// sniProxy starts a proxy whose listener's SNI check is mode, with a
// JSON access log, and counts the connections whose ServeConn has
// returned (handed to the splice engine, or ended).
func sniProxy(t *testing.T, mode sni.Mode) (addr string, out *proxytest.LogBuffer, served *atomic.Int64) {
	t.Helper()
	return sniProxyWait(t, mode, 500*time.Millisecond)
}

// sniProxyWait is sniProxy whose hello is awaited for wait.
func sniProxyWait(t *testing.T, mode sni.Mode, wait time.Duration) (addr string, out *proxytest.LogBuffer, served *atomic.Int64) {
	t.Helper()
	al, out := newAccessLog(t)
	p := newProxy(t, testCfg{})
	served = new(atomic.Int64)
	addr = proxytest.StartProxy(t, proxytest.NewPolicy(t, proxytest.PolicyConfig{AccessLog: al, SNI: mode, HelloTimeout: wait}),
		func(c *net.TCPConn, s *gate.Session) {
			p.ServeConn(c, s)
			served.Add(1)
		})
	return addr, out, served
}

// sniOf returns the sni field of the access log's JSON lines, in order.
func sniOf(t *testing.T, out *proxytest.LogBuffer, n int) []string {
	t.Helper()
	waitRecords(t, out, n)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		_, rest, _ := strings.Cut(line, `"sni":"`)
		v, _, _ := strings.Cut(rest, `"`)
		got = append(got, v)
	}
	return got
}

// TestSNICheck runs Go's TLS client through HTTP/1.1 CONNECT tunnels to
// a Go TLS origin under the SNI check: under match a hello naming the
// CONNECT's host gets through (and the tunnel goes on in the splice
// engine), one naming another host (domain fronting) is cut after the
// 200 with no connection made to the origin, and a hello pipelined
// behind the CONNECT is decided before the answer (403); under log both
// get through and the access log names what the hellos named.
func TestSNICheck(t *testing.T) {
	t.Parallel()
	e := proxytest.NewTLSEcho(t)
	_, port, _ := net.SplitHostPort(e.Addr)
	target := "localhost:" + port
	data := []byte("through the checked tunnel")

	t.Run("match", func(t *testing.T) {
		proxy, out, served := sniProxy(t, sni.Match)
		c := proxytest.Connect(t, proxy, target)
		tlsEcho(t, c, e, data) // ServerName localhost
		if runtime.GOOS == "linux" && served.Load() != 1 {
			t.Errorf("the checked tunnel's connection is served by %d returned ServeConns, want 1: the engine relays it", served.Load())
		}
		c.Close()
		waitRecords(t, out, 1)

		before := e.Conns()
		c = proxytest.Connect(t, proxy, target)
		fronted := tls.Client(c, &tls.Config{ServerName: "blocked.example", InsecureSkipVerify: true})
		fronted.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
		if err := fronted.Handshake(); err == nil {
			t.Fatal("a hello naming another host got through under match")
		}
		if n := e.Conns() - before; n != 0 {
			t.Errorf("the origin got %d connections for a fronted tunnel, want none", n)
		}

		pc := proxytest.ConnectPipelined(t, proxy, target)
		pc.Write(proxytest.ClientHello(t, &tls.Config{ServerName: "blocked.example"}))
		if _, err := pc.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("a fronted hello pipelined behind the CONNECT: %v, want a 403", err)
		}
		recs := waitRecords(t, out, 3)
		got := sniOf(t, out, 3)
		want := []string{"localhost", "blocked.example", "blocked.example"}
		for i, r := range recs {
			wantReason := "sni-mismatch"
			if i == 0 {
				wantReason = ""
			}
			if got[i] != want[i] || r.Reason != wantReason {
				t.Errorf("record %d: sni %q reason %q, want %q %q", i, got[i], r.Reason, want[i], wantReason)
			}
		}
		if recs[1].Status != 200 || recs[2].Status != 403 || recs[1].Upstream != "" {
			t.Errorf("fronted: status %d upstream %q, pipelined: %d; want 200 (sent before the hello) and none, 403",
				recs[1].Status, recs[1].Upstream, recs[2].Status)
		}
	})

	t.Run("log", func(t *testing.T) {
		proxy, out, _ := sniProxy(t, sni.Log)
		c := proxytest.Connect(t, proxy, target)
		fronted := tls.Client(c, &tls.Config{ServerName: "blocked.example", InsecureSkipVerify: true})
		fronted.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
		if err := fronted.Handshake(); err != nil {
			t.Fatalf("under log a fronted hello goes through: %v", err)
		}
		checkEcho(t, fronted, data)
		c.Close()
		if got := sniOf(t, out, 1); got[0] != "blocked.example" {
			t.Errorf("logged sni %q, want blocked.example", got[0])
		}
	})

	t.Run("off", func(t *testing.T) {
		proxy, out, _ := sniProxy(t, sni.Off)
		c := proxytest.Connect(t, proxy, target)
		tlsEcho(t, c, e, data)
		c.Close()
		if recs := waitRecords(t, out, 1); strings.Contains(out.String(), `"sni"`) || recs[0].Reason != "" {
			t.Errorf("sni off logged %s", out.String())
		}
	})
}

// TestSNIBadInput sends the first bytes of tunnels the SNI check must
// read rightly, to a plain echo origin that returns what it got: a
// ClientHello in one-byte records sent a byte at a time reaches the
// origin unchanged; one over the bound, an SSLv2 hello and garbage on
// port 443 are refused under match with nothing sent on, and garbage
// is relayed under log, logged as not TLS.
func TestSNIBadInput(t *testing.T) {
	t.Parallel()
	msg := proxytest.HelloMessage(t, proxytest.ClientHello(t, &tls.Config{ServerName: "localhost"}))
	tiny := proxytest.HelloRecords(msg, 1)
	big := proxytest.HelloRecords(append(msg[:len(msg):len(msg)], make([]byte, sni.MaxBytes)...), 1<<14)
	garbage := []byte("\x00\x01 not TLS at all, but port 443\r\n")
	sslv2 := []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10}
	tests := []struct {
		name    string
		mode    sni.Mode
		send    []byte
		trickle bool
		relayed bool
		wantSNI string
		wantWhy string
	}{
		{"one-byte records, a byte at a time", sni.Match, tiny, true, true, "localhost", ""},
		{"over the bound", sni.Match, big, false, false, "[too-large]", "sni-mismatch"},
		{"SSLv2", sni.Match, sslv2, false, false, "[not-tls]", "sni-mismatch"},
		{"garbage under match", sni.Match, garbage, false, false, "[not-tls]", "sni-mismatch"},
		{"garbage under log", sni.Log, garbage, false, true, "[not-tls]", ""},
		{"nothing under match", sni.Match, nil, false, false, "[incomplete]", "sni-mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := proxytest.NewEcho(t)
			_, port, _ := net.SplitHostPort(e.Addr)
			// A hello trickled a byte at a time took over the 500 ms
			// bound once under a loaded CI run: it gets longer.
			wait := 500 * time.Millisecond
			if tt.trickle {
				wait = 10 * time.Second
			}
			proxy, out, _ := sniProxyWait(t, tt.mode, wait)
			c := proxytest.Connect(t, proxy, "localhost:"+port)
			c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
			go func() {
				if tt.trickle {
					for i := range tt.send {
						if _, err := c.Write(tt.send[i : i+1]); err != nil {
							return
						}
						if i%64 == 0 {
							time.Sleep(time.Millisecond) // separate segments
						}
					}
				} else {
					c.Write(tt.send)
				}
			}()
			got, _ := io.ReadAll(io.LimitReader(bufio.NewReader(c), int64(len(tt.send))))
			if tt.relayed && string(got) != string(tt.send) {
				t.Errorf("the origin returned %d bytes, want the %d sent, unchanged", len(got), len(tt.send))
			}
			if !tt.relayed && (len(got) != 0 || e.Conns() != 0) {
				t.Errorf("refused, yet %d bytes came back and the origin got %d connections", len(got), e.Conns())
			}
			c.Close()
			recs := waitRecords(t, out, 1)
			if s := sniOf(t, out, 1)[0]; s != tt.wantSNI || recs[0].Reason != tt.wantWhy {
				t.Errorf("logged sni %q reason %q, want %q %q", s, recs[0].Reason, tt.wantSNI, tt.wantWhy)
			}
		})
	}
}

// BenchmarkConnectSNI opens new CONNECT tunnels, each carrying a
// browser-sized ClientHello to a raw origin that answers 1 KiB and
// closes, through the proxy with the SNI check off and match. Client,
// proxy and origin share the process: ns/op and the CPU profile show
// the difference the check makes; e2e's BenchmarkSNICheck measures the
// proxy's CPU alone with the binary.
func BenchmarkConnectSNI(b *testing.B) {
	hello := proxytest.ClientHello(b, &tls.Config{ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		reply := make([]byte, 1<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, len(hello))); err == nil {
					c.Write(reply)
				}
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	target := "localhost:" + port
	req := []byte("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")
	for _, mode := range []sni.Mode{sni.Off, sni.Match} {
		b.Run(mode.String(), func(b *testing.B) {
			proxy := proxytest.StartProxy(b, proxytest.NewPolicy(b, proxytest.PolicyConfig{SNI: mode}), serve(b, testCfg{}))
			buf := make([]byte, 4096)
			for b.Loop() {
				c, err := net.Dial("tcp", proxy)
				if err != nil {
					b.Fatal(err)
				}
				c.Write(req)
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						b.Fatal(err)
					}
					if line == "\r\n" {
						break
					}
				}
				c.Write(hello)
				if n, err := io.CopyBuffer(io.Discard, br, buf); err != nil || n != 1<<10 {
					b.Fatalf("answer: %d %v", n, err)
				}
				c.Close()
			}
		})
	}
}

// TestSNICheckOverTLS runs the SNI check on an https listener's
// HTTP/1.1 CONNECT: the tunnel's hello is read from inside the client's
// TLS connection to the proxy, decided, and the tunnel goes on (a TLS
// client's tunnel: the engine's AddTLS or the TLS relay); a fronted
// hello is cut with no connection to the origin.
func TestSNICheckOverTLS(t *testing.T) {
	t.Parallel()
	e := proxytest.NewTLSEcho(t)
	_, port, _ := net.SplitHostPort(e.Addr)
	target := "localhost:" + port
	al, out := newAccessLog(t)
	proxy, ccfg := startTLSProxy(t, testCfg{}, proxytest.PolicyConfig{AccessLog: al, SNI: sni.Match}, nil)
	open := func() net.Conn {
		c, err := tls.Dial("tcp", proxy, ccfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
		io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		r, err := proxytest.ReadResponse(bufio.NewReader(io.LimitReader(c, int64(len("HTTP/1.1 200 Connection established\r\n\r\n")))), "CONNECT")
		if err != nil || r.Status != 200 {
			t.Fatalf("CONNECT over TLS: %v %v", r, err)
		}
		return c
	}
	c := open()
	tlsEcho(t, c, e, []byte("inside TLS inside TLS"))
	c.Close()
	before := e.Conns()
	fronted := tls.Client(open(), &tls.Config{ServerName: "blocked.example", InsecureSkipVerify: true})
	fronted.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
	if err := fronted.Handshake(); err == nil {
		t.Fatal("a fronted hello got through the https listener under match")
	}
	if n := e.Conns() - before; n != 0 {
		t.Errorf("the origin got %d connections for a fronted tunnel", n)
	}
	if got := sniOf(t, out, 2); !slices.Contains(got, "localhost") || !slices.Contains(got, "blocked.example") {
		t.Errorf("logged sni %q, want localhost and blocked.example", got)
	}
}
