package h2

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestHandOffKeyUpdate checks that an HTTP/2 connection whose worker
// leaves the wait for its quiet client to no goroutine (run's notify,
// once the client has sent nothing for quietWait) just as a record with
// no plaintext in it comes (a TLS 1.3 KeyUpdate of OpenSSL's s_client,
// sent by handOffHook between the worker's last look and notify's, and
// readable before notify looks) parks all the same: no goroutine of the
// connection's waits in a read for the client's next frame. The next
// request, after the KeyUpdate, is answered.
func TestHandOffKeyUpdate(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	host := strings.TrimPrefix(origin.URL, "http://")
	p := startProxy(t, testConfig(Config{IdleTimeout: time.Minute}), nil)

	var armed atomic.Bool
	at := make(chan *conn)
	goOn := make(chan struct{})
	hook := func(c *conn) {
		if armed.CompareAndSwap(true, false) {
			at <- c
			<-goOn
		}
	}
	handOffHook.Store(&hook)
	t.Cleanup(func() { handOffHook.Store(nil) })

	sc := proxytest.StartSClient(t, p.addr, "-alpn", "h2")
	sc.SetDeadline(time.Now().Add(4 * proxytest.DefaultTimeout))
	armed.Store(true)
	h2c, err := proxytest.NewH2Client(sc)
	if err != nil {
		t.Fatal(err)
	}
	var c *conn
	select {
	case c = <-at:
	case <-time.After(proxytest.DefaultTimeout):
		t.Fatal("the connection's worker did not hand its wait off")
	}
	sc.KeyUpdate(t, false)
	for deadline := time.Now().Add(proxytest.DefaultTimeout); ; time.Sleep(5 * time.Millisecond) {
		if ok, err := c.park.Ready(); ok || err != nil {
			break
		}
		if time.Now().After(deadline) {
			close(goOn)
			t.Fatal("the KeyUpdate never reached the proxy's socket")
		}
	}
	close(goOn)
	if err := proxytest.CheckGoroutines(proxytest.DefaultTimeout, "h2.(*conn)"); err != nil {
		t.Fatalf("after a KeyUpdate at the hand-off, a goroutine waits for the idle connection: %v", err)
	}
	// A GET of http://host/1 on stream 1 (H2Client's Get names https,
	// which this proxy does not forward).
	var block, frame bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", host}, {":path", "/1"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	http2.NewFramer(&frame, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
	if _, err := sc.Write(frame.Bytes()); err != nil {
		t.Fatal(err)
	}
	if status, body, err := h2c.Answer(1); err != nil || status != "200" || string(body) != "/1" {
		t.Fatalf("the request after the KeyUpdate: %s %q, %v", status, body, err)
	}
}

// TestBulkTunnelKeepsItsWorker checks that a tunnel moving bulk data is
// served on by its connection's worker, which waits tunnelWait for the
// client's next frame: handed off each time it had read everything the
// client had sent, the connection started a worker and made a new
// framer (whose read buffer is garbage) for about every DATA frame of an
// upload, and the garbage collector took a fifth of the proxy's CPU. A
// few gaps the machine stretches past tunnelWait are allowed.
func TestBulkTunnelKeepsItsWorker(t *testing.T) {
	var handOffs atomic.Int64
	hook := func(*conn) { handOffs.Add(1) }
	handOffHook.Store(&hook)
	t.Cleanup(func() { handOffHook.Store(nil) })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sunk atomic.Int64
	sinkDone := make(chan struct{})
	go func() {
		defer close(sinkDone)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			sunk.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-sinkDone
	})

	p := startProxy(t, testConfig(Config{}), nil)
	// Go's client cuts the writes into DATA frames of the proxy's
	// largest frame size, 16 KiB, as the flow-control windows allow.
	tun, _ := proxytest.H2Connect(t, p.client(t), ln.Addr().String())
	const frames, size = 512, 16 << 10
	payload := bytes.Repeat([]byte("x"), size)
	handOffs.Store(0)
	for i := range frames {
		if _, err := tun.Write(payload); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	proxytest.WaitFor(t, "the origin to have every byte", func() bool { return sunk.Load() == frames*size })
	tun.Close() // the sink's connection ends with the stream
	n := handOffs.Load()
	t.Logf("%d writes of %d bytes: %d hand-offs", frames, size, n)
	if n > frames/8 {
		t.Errorf("%d hand-offs for an upload of %d DATA frames sent back to back, want at most %d", n, frames, frames/8)
	}
}
