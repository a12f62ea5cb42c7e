//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

func TestConnectTLS(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:0", inlineUser("e2e", "pw"))
	o := newOrigin(t, "127.0.0.1", true)

	t.Run("curl", func(t *testing.T) {
		proxy := proxyURL(p.addr(), "e2e", "pw").String()
		for _, trust := range [][]string{{"--cacert", o.certFile(t)}, {"-k"}} {
			args := append(trust, o.URL+"/hello")
			r := curlVia(t, proxy, args...)
			if r.code != 0 || r.status != 200 || r.body != "hello from origin\n" {
				t.Fatalf("curl %q through the proxy: exit %d status %d body %q stderr %q",
					args, r.code, r.status, r.body, r.stderr)
			}
		}
		// An upload through the tunnel arrives intact.
		upload := randomBytes(10, 300<<10)
		r := curlVia(t, proxy, "--cacert", o.certFile(t), "--data-binary", "@"+writeFile(t, "up.bin", string(upload)), o.URL+"/echo")
		if r.code != 0 || r.status != 200 {
			t.Fatalf("curl POST through the tunnel: exit %d status %d stderr %q", r.code, r.status, r.stderr)
		}
		e := decodeEcho(t, r.body)
		if e.Length != int64(len(upload)) || e.SHA256 != sha256Hex(upload) {
			t.Errorf("origin got %d bytes (sha256 %.12s), want %d (%.12s)", e.Length, e.SHA256, len(upload), sha256Hex(upload))
		}
	})

	t.Run("go", func(t *testing.T) {
		before := o.conns.Load()
		c := newProxyClient(t, proxyURL(p.addr(), "e2e", "pw"), o)
		for i := range 3 {
			resp, body := c.fetch(t, "GET", o.URL+"/hello", nil)
			if resp.StatusCode != 200 || body != "hello from origin\n" {
				t.Fatalf("request %d: status %s body %q", i, resp.Status, body)
			}
		}
		if n := c.dials.Load(); n != 1 {
			t.Errorf("client opened %d connections to the proxy, want 1 tunnel for 3 requests", n)
		}
		if n := o.conns.Load() - before; n != 1 {
			t.Errorf("origin accepted %d connections, want 1 (one tunnel)", n)
		}
	})
}

func TestConnectHalfClose(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:0", "")
	echo := newEchoServer(t)
	c, err := openTunnel(context.Background(), p.addr(), echo.addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	data := randomBytes(20, 200<<10)
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		if _, werr = c.Write(data); werr == nil {
			werr = c.(*net.TCPConn).CloseWrite()
		}
	})
	// The echo origin sees EOF only if the proxy passes the half-close on;
	// it then closes, and we see EOF after every byte came back.
	got, err := io.ReadAll(c)
	wg.Wait()
	if werr != nil {
		t.Fatalf("write and half-close: %v", werr)
	}
	if err != nil {
		t.Fatalf("read until EOF after half-close: %v (got %d of %d bytes)", err, len(got), len(data))
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo after half-close returned %d bytes, want the %d sent", len(got), len(data))
	}
}

// tunnelCount is how many CONNECT tunnels TestThousandTunnels holds open
// at once.
const tunnelCount = 1000

// TestThousandTunnels opens 1,000 CONNECT tunnels to a local echo
// origin, all open at once; each sends its own random bytes and must read
// back exactly the same. It logs the proxy's RSS with 0 and 1,000 idle
// tunnels and checks that its file descriptors return near the baseline
// once the tunnels are closed.
func TestThousandTunnels(t *testing.T) {
	start := time.Now()
	p := startProxy(t, "127.0.0.1:0", "")
	echo := newEchoServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Warm up: one tunnel, so that the baseline includes what the first
	// tunnel allocates for good (engine buffers, goroutines).
	fds0 := procFDs(t, p.pid())
	warm, err := openTunnel(ctx, p.addr(), echo.addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := echoOnce(warm, []byte("warm-up")); err != nil {
		t.Fatal(err)
	}
	warm.Close()
	waitFDs(t, p.pid(), func(n int) bool { return echo.open.Load() == 0 }, 5*time.Second)
	// The origin closes first; the proxy closes the warm-up tunnel's two
	// sockets right after: the baseline is taken once they are gone (a
	// pooled splice pipe, two descriptors, may stay).
	waitFDs(t, p.pid(), func(n int) bool { return n <= fds0+2 }, 5*time.Second)

	baseFDs := procFDs(t, p.pid())
	rss0 := procRSS(t, p.pid())

	conns := make([]net.Conn, tunnelCount)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	err = forEachBounded(ctx, tunnelCount, 64, func(i int) error {
		c, err := openTunnel(ctx, p.addr(), echo.addr(), "")
		if err != nil {
			return fmt.Errorf("tunnel %d: %w", i, err)
		}
		conns[i] = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Since(start)
	waitFDs(t, p.pid(), func(int) bool { return echo.open.Load() == tunnelCount }, 5*time.Second)
	if n := echo.open.Load(); n != tunnelCount {
		t.Fatalf("echo origin has %d connections open, want %d", n, tunnelCount)
	}
	openFDs := procFDs(t, p.pid())
	// The warm-up's pooled splice pipe, in the baseline, may have been
	// let go since (idle tunnels hold none): count from before it.
	if openFDs < fds0+2*tunnelCount {
		t.Errorf("proxy has %d file descriptors with %d tunnels open (%d before the warm-up, baseline %d); want at least 2 per tunnel",
			openFDs, tunnelCount, fds0, baseFDs)
	}
	rssIdle := procRSS(t, p.pid())

	// Every tunnel, all still open, echoes its own bytes.
	payloads := make([][]byte, tunnelCount)
	for i := range payloads {
		payloads[i] = randomBytes(uint64(1000+i), 512+i*7%7680)
	}
	err = forEachBounded(ctx, tunnelCount, 64, func(i int) error {
		if err := echoOnce(conns[i], payloads[i]); err != nil {
			return fmt.Errorf("tunnel %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := echo.open.Load(); n != tunnelCount {
		t.Errorf("after the echo round the origin has %d connections open, want %d", n, tunnelCount)
	}
	rssUsed := procRSS(t, p.pid())
	echoed := time.Since(start)

	for i, c := range conns {
		c.Close()
		conns[i] = nil
	}
	ok := waitFDs(t, p.pid(), func(n int) bool { return n <= baseFDs+8 && echo.open.Load() == 0 }, 10*time.Second)
	endFDs := procFDs(t, p.pid())
	if !ok {
		t.Errorf("proxy leaks: %d file descriptors 10s after closing %d tunnels, baseline %d (%d had been open); echo origin still has %d connections",
			endFDs, tunnelCount, baseFDs, openFDs, echo.open.Load())
	}
	rssAfter := procRSS(t, p.pid())

	perTunnel := float64(rssIdle-rss0) / tunnelCount
	t.Logf("proxy VmRSS: %s with 0 tunnels; %s with %d idle tunnels (%+.0f bytes/tunnel); %s after each echoed 0.5-8 KB; %s after closing them",
		mib(rss0), mib(rssIdle), tunnelCount, perTunnel, mib(rssUsed), mib(rssAfter))
	t.Logf("proxy fds: %d baseline, %d with %d tunnels, %d after closing; opened in %v, echoed by %v",
		baseFDs, openFDs, tunnelCount, endFDs, opened.Round(time.Millisecond), echoed.Round(time.Millisecond))
	for _, rss := range []int64{rss0, rssIdle, rssUsed} {
		if rss > 200<<20 {
			t.Errorf("proxy VmRSS %s is over the 200 MiB sanity bound", mib(rss))
		}
	}
}

// echoOnce writes data on a tunnel to the echo origin and checks that
// exactly data comes back.
func echoOnce(c net.Conn, data []byte) error {
	c.SetDeadline(time.Now().Add(15 * time.Second))
	defer c.SetDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		errc <- err
	}()
	got := make([]byte, len(data))
	_, rerr := io.ReadFull(c, got)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("write %d bytes: %w", len(data), werr)
	}
	if rerr != nil {
		return fmt.Errorf("read %d echoed bytes: %w", len(data), rerr)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("echo of %d bytes differs from what was sent", len(data))
	}
	return nil
}

// forEachBounded calls f(0..n-1) with at most limit calls at once and
// returns the first error; after an error no new calls start.
func forEachBounded(ctx context.Context, n, limit int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// waitFDs polls pid's descriptor count until ok returns true or d
// passes, and reports whether ok returned true.
func waitFDs(t testing.TB, pid int, ok func(fds int) bool, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if ok(procFDs(t, pid)) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
