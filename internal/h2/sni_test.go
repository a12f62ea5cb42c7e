package h2

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// TestSNICheck opens CONNECT streams with Go's HTTP/2 client through a
// listener whose SNI check is match, to a Go TLS origin: a TLS
// handshake naming the CONNECT's host goes through the stream and
// carries bytes both ways; one naming another host (domain fronting)
// has its stream reset after the 200, before the origin sees a
// connection; the access log names both hellos' server names.
func TestSNICheck(t *testing.T) {
	e := proxytest.NewTLSEcho(t)
	_, port, _ := net.SplitHostPort(e.Addr)
	target := "localhost:" + port
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{AccessLog: al, SNI: sni.Match}))
	cc := p.client(t)
	open := func() net.Conn {
		pr, pw := io.Pipe()
		req := newRequest(t, "CONNECT", "", pr)
		req.URL, req.Host = &url.URL{Host: target}, target
		resp, err := cc.RoundTrip(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", target, resp, err)
		}
		c := proxytest.StreamConn(resp.Body, pw)
		t.Cleanup(func() { c.Close() })
		return c
	}

	proxytest.CheckSNIMatch(t, e, open, &out, "h2", "an HTTP/2 stream")
}

// TestSNICheckTrickle sends a ClientHello in one-byte records, a few
// bytes per DATA frame, through an HTTP/2 CONNECT stream checked under
// match to a plain echo origin: the check waits for the whole hello
// across frames, and the origin gets it unchanged.
func TestSNICheckTrickle(t *testing.T) {
	echo := proxytest.NewEcho(t)
	_, port, _ := net.SplitHostPort(echo.Addr)
	target := "localhost:" + port
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{SNI: sni.Match}))
	cc := p.client(t)
	pr, pw := io.Pipe()
	req := newRequest(t, "CONNECT", "", pr)
	req.URL, req.Host = &url.URL{Host: target}, target
	resp, err := cc.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	defer resp.Body.Close()
	hello := proxytest.HelloRecords(proxytest.HelloMessage(t, proxytest.ClientHello(t, &tls.Config{ServerName: "localhost"})), 1)
	go func() {
		for i := 0; i < len(hello); i += 7 {
			if _, err := pw.Write(hello[i:min(i+7, len(hello))]); err != nil {
				return
			}
			if i%700 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	got := make([]byte, len(hello))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != string(hello) {
		t.Fatalf("the origin returned %d bytes (%v), want the %d of the hello unchanged", len(got), err, len(hello))
	}
	pw.Close()
}

// TestChunkQueueAppendTo copies a queue's bytes from an offset, across
// chunks, as the SNI check peeks at a stream's first bytes.
func TestChunkQueueAppendTo(t *testing.T) {
	var q chunkQueue
	data := make([]byte, 3*bufSize+100)
	for i := range data {
		data[i] = byte(i * 7)
	}
	q.write(data[:10])
	q.consume(3) // the first chunk begins at an offset
	q.write(data[10:])
	want := data[3:]
	var got []byte
	for _, n := range []int{1, 5, bufSize, bufSize + 1, 2*bufSize + 50, len(want)} {
		got = q.appendTo(got, n)
		if string(got) != string(want[:n]) {
			t.Fatalf("appendTo(%d): the bytes differ", n)
		}
	}
}
