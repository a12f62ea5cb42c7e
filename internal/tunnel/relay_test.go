package tunnel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// relayEnds are the application sides of one tunnel relayed by Relay.
type relayEnds struct {
	client   net.Conn    // what the client application holds
	upstream net.Conn    // what the origin server holds
	result   chan Result // receives Relay's Result, buffered
}

// startRelay runs Relay between clientProxy and upstreamProxy on a new
// goroutine. At the end of the test the application ends are closed and
// the relay is waited for.
func startRelay(t *testing.T, ctx context.Context, clientApp, clientProxy, upstreamProxy, upstreamApp net.Conn, idle time.Duration) *relayEnds {
	t.Helper()
	re := &relayEnds{client: clientApp, upstream: upstreamApp, result: make(chan Result, 1)}
	// A relay bug shows up as an I/O timeout, not as a hung test.
	deadline := time.Now().Add(30 * time.Second)
	clientApp.SetDeadline(deadline)
	upstreamApp.SetDeadline(deadline)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		re.result <- Relay(ctx, clientProxy, upstreamProxy, idle)
	}()
	t.Cleanup(func() {
		clientApp.Close()
		upstreamApp.Close()
		<-finished
	})
	return re
}

// newTCPRelay relays between two loopback TCP connections.
func newTCPRelay(t *testing.T, ctx context.Context, idle time.Duration) *relayEnds {
	t.Helper()
	ln := newListener(t)
	clientApp, clientProxy := tcpPair(t, ln)
	upstreamProxy, upstreamApp := tcpPair(t, ln)
	return startRelay(t, ctx, clientApp, clientProxy, upstreamProxy, upstreamApp, idle)
}

// wait returns Relay's result, failing the test if none comes in time.
func (re *relayEnds) wait(t *testing.T) Result {
	t.Helper()
	select {
	case r := <-re.result:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("relay did not end")
		return Result{}
	}
}

// ended reports whether Relay has returned, without waiting; a result it
// takes is put back.
func (re *relayEnds) ended() bool {
	select {
	case r := <-re.result:
		re.result <- r
		return true
	default:
		return false
	}
}

// closeWrite ends c's stream.
func closeWrite(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(closeWriter).CloseWrite(); err != nil {
		t.Errorf("CloseWrite: %v", err)
	}
}

// readEnd reads c until its stream ends and fails the test unless that end
// is a clean EOF.
func readEnd(t *testing.T, c net.Conn) []byte {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("read to EOF: %v", err)
	}
	return b
}

func TestRelayCountsBothWays(t *testing.T) {
	for _, size := range []struct{ up, down int64 }{{0, 0}, {1, 0}, {0, 1}, {100 << 10, 3 << 20}, {5<<20 + 7, 1}} {
		re := newTCPRelay(t, context.Background(), 0)
		type recv struct {
			n   int64
			sum [32]byte
			err error
		}
		var wg sync.WaitGroup
		var atUp, atClient recv
		var sentUp, sentDown [32]byte
		var errUp, errDown error
		wg.Add(4)
		go func() {
			defer wg.Done()
			sentUp, errUp = sendRandom(re.client, 1, size.up)
			re.client.(*net.TCPConn).CloseWrite()
		}()
		go func() {
			defer wg.Done()
			sentDown, errDown = sendRandom(re.upstream, 2, size.down)
			re.upstream.(*net.TCPConn).CloseWrite()
		}()
		go func() {
			defer wg.Done()
			atUp.n, atUp.sum, atUp.err = recvHash(re.upstream)
		}()
		go func() {
			defer wg.Done()
			atClient.n, atClient.sum, atClient.err = recvHash(re.client)
		}()
		wg.Wait()
		if errUp != nil || errDown != nil || atUp.err != nil || atClient.err != nil {
			t.Fatalf("up %d down %d: send %v, %v; receive %v, %v", size.up, size.down, errUp, errDown, atUp.err, atClient.err)
		}
		if atUp.n != size.up || atUp.sum != sentUp {
			t.Errorf("upstream received %d bytes (hash match %v), want %d", atUp.n, atUp.sum == sentUp, size.up)
		}
		if atClient.n != size.down || atClient.sum != sentDown {
			t.Errorf("client received %d bytes (hash match %v), want %d", atClient.n, atClient.sum == sentDown, size.down)
		}
		r := re.wait(t)
		if r.Err != nil || r.Up != size.up || r.Down != size.down {
			t.Errorf("Result = %+v, want Up %d Down %d and no error", r, size.up, size.down)
		}
		if r.Duration <= 0 {
			t.Errorf("Result.Duration = %v", r.Duration)
		}
	}
}

func TestRelayHalfClose(t *testing.T) {
	re := newTCPRelay(t, context.Background(), 0)
	// The client sends its request and half-closes; the upstream sees the
	// request end and only then answers, on the direction still open.
	if _, err := re.client.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	closeWrite(t, re.client)
	if got := readEnd(t, re.upstream); string(got) != "request" {
		t.Fatalf("upstream got %q, want %q then EOF", got, "request")
	}
	if re.ended() {
		t.Fatal("relay ended after one direction")
	}
	if _, err := re.upstream.Write([]byte("response")); err != nil {
		t.Fatalf("write after the client's half-close: %v", err)
	}
	closeWrite(t, re.upstream)
	if got := readEnd(t, re.client); string(got) != "response" {
		t.Fatalf("client got %q, want %q then EOF", got, "response")
	}
	r := re.wait(t)
	if r.Err != nil || r.Up != 7 || r.Down != 8 {
		t.Errorf("Result = %+v, want Up 7 Down 8 and no error", r)
	}
}

func TestRelayPipesWithoutCloseWrite(t *testing.T) {
	// net.Pipe ends have no CloseWrite: each direction ends at its
	// source's end of stream, and the tunnel when both have.
	clientApp, clientProxy := net.Pipe()
	upstreamProxy, upstreamApp := net.Pipe()
	re := startRelay(t, context.Background(), clientApp, clientProxy, upstreamProxy, upstreamApp, 0)
	buf := make([]byte, 4)
	for _, c := range [][2]net.Conn{{re.client, re.upstream}, {re.upstream, re.client}} {
		go c[0].Write([]byte("ping"))
		if _, err := io.ReadFull(c[1], buf); err != nil || string(buf) != "ping" {
			t.Fatalf("got %q, %v", buf, err)
		}
	}
	re.upstream.Close()
	if re.ended() {
		t.Fatal("relay ended after one direction")
	}
	re.client.Close()
	if r := re.wait(t); r.Err != nil || r.Up != 4 || r.Down != 4 {
		t.Errorf("Result = %+v, want Up 4 Down 4 and no error", r)
	}
}

func TestRelayIdleTimeout(t *testing.T) {
	const idle = 100 * time.Millisecond
	re := newTCPRelay(t, context.Background(), idle)
	r := re.wait(t)
	if !errors.Is(r.Err, ErrIdleTimeout) {
		t.Fatalf("Result.Err = %v, want ErrIdleTimeout", r.Err)
	}
	if r.Duration < idle {
		t.Errorf("Result.Duration = %v, before the idle timeout %v", r.Duration, idle)
	}
	// Both connections were closed (not reset): each peer sees EOF.
	for name, c := range map[string]net.Conn{"client": re.client, "upstream": re.upstream} {
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s read after idle timeout: %v, want EOF", name, err)
		}
	}
}

func TestRelayIdleTimeoutKeptOffByTraffic(t *testing.T) {
	// Longer than the test's own pauses on a loaded machine are, most
	// of the time: a tunnel ended by one is tried again (keepBusy).
	const idle = time.Second
	for try := 1; ; try++ {
		from := time.Now()
		re := newTCPRelay(t, context.Background(), idle)
		// Traffic one way or the other, for three idle timeouts: the
		// tunnel must stay open throughout.
		ends := func(i int) (from, to net.Conn) {
			if i%2 == 1 {
				return re.upstream, re.client
			}
			return re.client, re.upstream
		}
		buf := make([]byte, 1)
		proves, err := keepBusy(from, idle, func(i int) error {
			from, _ := ends(i)
			_, err := from.Write([]byte{byte(i)})
			return err
		}, func(i int) error {
			_, to := ends(i)
			if _, err := io.ReadFull(to, buf); err != nil {
				return err
			}
			if buf[0] != byte(i) {
				t.Fatalf("round trip %d: read %d, want %d", i, buf[0], byte(i))
			}
			return nil
		})
		if proves {
			t.Fatalf("relay ended while bytes moved: %v", err)
		}
		if err != nil {
			if try == busyTries {
				t.Fatalf("the test paused for over %v in each of %d tries: %v", idle/2, try, err)
			}
			t.Logf("try %d: %v", try, err)
			continue
		}
		if r := re.wait(t); !errors.Is(r.Err, ErrIdleTimeout) {
			t.Fatalf("Result.Err = %v, want ErrIdleTimeout once traffic stopped", r.Err)
		}
		return
	}
}

func TestRelayIdleTimeoutOnStalledWrite(t *testing.T) {
	// The upstream application never reads: once the socket buffers are
	// full, the relay's write to it makes no progress, which counts as
	// idle.
	re := newTCPRelay(t, context.Background(), 200*time.Millisecond)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := re.client.Write(chunk); err != nil {
				return
			}
		}
	}()
	r := re.wait(t)
	if !errors.Is(r.Err, ErrIdleTimeout) {
		t.Fatalf("Result.Err = %v, want ErrIdleTimeout", r.Err)
	}
	if r.Up == 0 {
		t.Errorf("Result.Up = 0, want the bytes written before the stall")
	}
}

func TestRelayContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	re := newTCPRelay(t, ctx, 0)
	if _, err := re.client.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(re.upstream, buf); err != nil {
		t.Fatal(err)
	}
	if re.ended() {
		t.Fatal("relay ended before cancel")
	}
	cancel()
	r := re.wait(t)
	if !errors.Is(r.Err, context.Canceled) || r.Up != 3 || r.Down != 0 {
		t.Fatalf("Result = %+v, want Up 3 and context.Canceled", r)
	}
	for name, c := range map[string]net.Conn{"client": re.client, "upstream": re.upstream} {
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s read after cancel: %v, want EOF", name, err)
		}
	}
}

func TestRelayContextCause(t *testing.T) {
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	re := newTCPRelay(t, ctx, 0)
	if r := re.wait(t); !errors.Is(r.Err, cause) {
		t.Fatalf("Result.Err = %v, want %v", r.Err, cause)
	}
}

func TestRelayResetPassesOn(t *testing.T) {
	re := newTCPRelay(t, context.Background(), 0)
	if _, err := re.upstream.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(re.client, buf); err != nil {
		t.Fatal(err)
	}
	// The upstream resets its connection: the relay fails and resets the
	// client's, which must not see a clean end of stream.
	re.upstream.(*net.TCPConn).SetLinger(0)
	re.upstream.Close()
	r := re.wait(t)
	if r.Err == nil || errors.Is(r.Err, ErrIdleTimeout) {
		t.Fatalf("Result.Err = %v, want a socket error", r.Err)
	}
	if r.Down != 7 {
		t.Errorf("Result.Down = %d, want 7", r.Down)
	}
	b, err := io.ReadAll(re.client)
	if err == nil {
		t.Errorf("client read %q and a clean EOF after the upstream's reset", b)
	}
}

func TestRelayLargeWriteCountedExactly(t *testing.T) {
	re := newTCPRelay(t, context.Background(), 0)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go func() {
		re.client.Write(payload)
		re.client.(*net.TCPConn).CloseWrite()
	}()
	got := readEnd(t, re.upstream)
	closeWrite(t, re.upstream)
	readEnd(t, re.client)
	if !bytes.Equal(got, payload) {
		t.Fatalf("upstream got %d bytes, want the %d sent", len(got), len(payload))
	}
	if r := re.wait(t); r.Err != nil || r.Up != int64(len(payload)) || r.Down != 0 {
		t.Fatalf("Result = %+v, want Up %d", r, len(payload))
	}
}
