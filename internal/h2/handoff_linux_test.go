package h2

import (
	"bytes"
	"io"
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
