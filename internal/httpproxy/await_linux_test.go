package httpproxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// deadlineCounter is the interceptor's wrapper of a client socket, as
// awaitRequest finds it under the tls.Conn (NetConn), counting the read
// deadlines set on it.
type deadlineCounter struct {
	net.Conn
	reads atomic.Int64
}

func (d *deadlineCounter) NetConn() net.Conn { return d.Conn }

func (d *deadlineCounter) SetReadDeadline(t time.Time) error {
	d.reads.Add(1)
	return d.Conn.SetReadDeadline(t)
}

func (d *deadlineCounter) SetDeadline(t time.Time) error {
	d.reads.Add(1)
	return d.Conn.SetDeadline(t)
}

// splitWriter is a client's socket that sends each of its writes after
// the first in two parts, pause apart: a TLS record cut short.
type splitWriter struct {
	net.Conn
	pause  time.Duration
	writes int
}

func (w *splitWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.pause == 0 || w.writes == 1 || len(p) < 2 {
		return w.Conn.Write(p)
	}
	n, err := w.Conn.Write(p[:1])
	if err != nil {
		return n, err
	}
	time.Sleep(w.pause)
	m, err := w.Conn.Write(p[1:])
	return n + m, err
}

// TestAwaitRequestDeadlines checks that an intercepted connection whose
// client sends its requests one after another arms at most one read
// deadline per request on its socket, not three: sentSoon's wait of
// parkAfter, the idle one for the first byte and ReadHead's for the rest
// of the head; and that sentSoon's is kept while requests come within
// parkSlack of each other, as those of each of many busy connections do
// (a few milliseconds apart: more than ArmReadDeadline's slack for
// parkAfter). Each arm is a runtime timer moved under the poller's lock,
// about 1 % of the CPU of an intercepted request. And that a request
// whose record is cut short for longer than parkAfter, the deadline
// sentSoon armed passing while it is read, is still read whole; and that
// requests of a client slower than parkAfter are read once the
// connection, parked meanwhile (notify), is resumed: a record cut short
// leaves the connection to park at sentSoon's deadline, and its rest is
// read by the parked wait's look (NotifyLook), crypto/tls keeping the
// part read before. A wait that parks
// (a client delayed past parkAfter, as on a loaded machine) arms the
// deadlines of its own path: those are not counted.
func TestAwaitRequestDeadlines(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		gap   time.Duration // the client's wait before each request after the first
		pause time.Duration // between a record's first byte and the rest; 0: none
		most  int64         // the read deadlines armed at most
	}{
		{"at once", 50, 0, 0, 50},
		{"4 ms apart", 20, 4 * time.Millisecond, 0, 10},
		{"records cut short past parkAfter", 3, 0, 2 * parkAfter, -1},
		{"slower than parkAfter", 3, 2 * parkAfter, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arms, parked := awaitRequests(t, tt.n, tt.gap, tt.pause)
			t.Logf("%d read deadlines armed over the %d of %d requests whose wait did not park", arms, tt.n-parked, tt.n)
			if tt.most >= 0 && arms > tt.most {
				t.Errorf("%d read deadlines armed on the socket over %d requests, want at most %d", arms, tt.n-parked, tt.most)
			}
		})
	}
}

// awaitRequests serves n requests of a TLS client on an intercepted
// connection's wait between requests (awaitRequest, then ReadHead), the
// client waiting gap before each request after the first and its writes
// after the handshake split pause apart (0: not split), and returns the
// read deadlines armed on the server's socket meanwhile, but for the
// requests whose wait parked the connection (notify), and how many did:
// the test goroutine then takes the resumed wait on, as resume would.
func awaitRequests(t *testing.T, n int, gap, pause time.Duration) (arms int64, parked int) {
	t.Helper()
	cert, roots := proxytest.SelfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	req := "GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n"
	clientErr := make(chan error, 1)
	go func() {
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			clientErr <- err
			return
		}
		sw := &splitWriter{Conn: raw}
		c := tls.Client(sw, &tls.Config{RootCAs: roots, ServerName: "localhost"})
		defer c.Close()
		if err := c.Handshake(); err != nil {
			clientErr <- err
			return
		}
		sw.pause = pause
		ack := make([]byte, 1)
		for i := range n {
			if i > 0 {
				time.Sleep(gap)
			}
			if _, err := io.WriteString(c, req); err != nil {
				clientErr <- err
				return
			}
			if _, err := io.ReadFull(c, ack); err != nil { // the server read the head
				clientErr <- err
				return
			}
		}
		clientErr <- nil
	}()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	counter := &deadlineCounter{Conn: tunnel.RecordConn(raw.(*net.TCPConn))}
	tc := tls.Server(counter, &tls.Config{Certificates: []tls.Certificate{cert}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	tc.SetDeadline(time.Time{})

	cn := &conn{p: &Proxy{cfg: Config{IdleTimeout: time.Minute, ReadHeaderTimeout: 10 * time.Second}}, ctx: context.Background(), then: func() {}}
	resumed := make(chan error, 1)
	cn.resumeFn = func(err error) { resumed <- err }
	cn.lookFn = cn.look
	cn.takeWork()
	cn.client.Attach(tc, &http1.ClientBufs)
	// The first request is read as serve reads it: the waits counted are
	// those between requests.
	cn.client.ArmReadDeadline(http1.MonoNow(), 10*time.Second)
	for i := range n {
		before, parkedBefore := counter.reads.Load(), parked
		if i > 0 {
			err := cn.awaitRequest(time.Minute)
			if err == errParked {
				parked++
				select {
				case err = <-resumed:
				case <-time.After(10 * time.Second):
					t.Fatalf("request %d: the parked wait did not end once the client sent", i)
				}
				if err != nil {
					t.Fatalf("request %d: the parked wait ended with %v", i, err)
				}
				cn.takeWork()
				if cn.client.W == 0 { // look read nothing: no Looker
					err = cn.awaitByte()
				}
			}
			if err != nil {
				t.Fatalf("request %d: awaitRequest: %v", i, err)
			}
		}
		m, err := cn.client.ReadHead(64<<10, 10*time.Second)
		if err != nil {
			t.Fatalf("request %d: ReadHead: %v", i, err)
		}
		if got := string(cn.client.Buf[cn.client.R : cn.client.R+m]); got != req {
			t.Fatalf("request %d: head %q, want %q", i, got, req)
		}
		cn.client.R += m
		if parked == parkedBefore {
			arms += counter.reads.Load() - before
		}
		if _, err := tc.Write([]byte{'k'}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-clientErr; err != nil {
		t.Fatal(err)
	}
	if cn.park == nil {
		t.Fatal("awaitRequest found no Parker under the tls.Conn: the waits were not the intercepted ones")
	}
	return arms, parked
}
