package tunnel

// Tests of the Engine API that hold on every platform: the epoll engine on
// Linux, the goroutine engine elsewhere.

import (
	"errors"
	"io"
	"testing"
	"time"
)

func TestEngineRelaysAndCounts(t *testing.T) {
	e := newEngine(t, Config{})
	ln := newListener(t)
	te := newTunnel(t, e, ln)
	eventually(t, "the tunnel to count", func() bool { return e.Len() == 1 })
	if _, err := te.client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	te.client.CloseWrite()
	if b, err := io.ReadAll(te.upstream); err != nil || string(b) != "hello" {
		t.Fatalf("upstream read %q, %v; want %q and EOF", b, err, "hello")
	}
	if _, err := te.upstream.Write([]byte("world!")); err != nil {
		t.Fatalf("write after the client's half-close: %v", err)
	}
	te.upstream.CloseWrite()
	if b, err := io.ReadAll(te.client); err != nil || string(b) != "world!" {
		t.Fatalf("client read %q, %v; want %q and EOF", b, err, "world!")
	}
	if r := te.wait(t); r.Err != nil || r.Up != 5 || r.Down != 6 {
		t.Fatalf("Result = %+v, want Up 5 Down 6 and no error", r)
	}
	eventually(t, "Len to drop", func() bool { return e.Len() == 0 })
}

func TestEngineIdleTimeoutResult(t *testing.T) {
	e := newEngine(t, Config{IdleTimeout: 50 * time.Millisecond})
	te := newTunnel(t, e, newListener(t))
	if r := te.wait(t); !errors.Is(r.Err, ErrIdleTimeout) {
		t.Fatalf("Result.Err = %v, want ErrIdleTimeout", r.Err)
	}
}

func TestEngineCloseEndsTunnels(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln := newListener(t)
	te := newTunnel(t, e, ln)
	e.Close()
	if r := te.wait(t); !errors.Is(r.Err, ErrClosed) {
		t.Fatalf("Result.Err = %v, want ErrClosed", r.Err)
	}
	if n := e.Len(); n != 0 {
		t.Errorf("Len after Close = %d", n)
	}
	if _, err := te.client.Read(make([]byte, 1)); err == nil {
		t.Errorf("client read after Close: no error, want the connection closed")
	}
	e.Close() // idempotent

	client, clientProxy := tcpPair(t, ln)
	upstreamProxy, upstream := tcpPair(t, ln)
	t.Cleanup(func() { client.Close(); upstream.Close() })
	if err := e.Add(clientProxy, upstreamProxy, func(Result) { t.Error("done called after a failed Add") }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close = %v, want ErrClosed", err)
	}
	// Add closed both sockets: the peers see the end.
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Errorf("client read after a failed Add: no error")
	}
}

func TestNewRefusesNegatives(t *testing.T) {
	for _, cfg := range []Config{{IdleTimeout: -1}, {PipeSize: -1}} {
		if e, err := New(cfg); err == nil {
			e.Close()
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
