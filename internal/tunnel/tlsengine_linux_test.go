package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRelayTLSLastBytes sends the last bytes of each direction together
// with its end (close_notify and FIN on the client side, FIN or a full
// close on the origin side), so that the relay sees them in one event:
// every byte must arrive before the end of the stream.
func TestRelayTLSLastBytes(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		for _, size := range []int{1, 100, 16<<10 + 1, 300 << 10} {
			for _, full := range []bool{false, true} {
				t.Run(fmt.Sprintf("%d/full close %v", size, full), func(t *testing.T) {
					te := newTLSTunnel(t, impl, context.Background(), 0, 0)
					up, down := bytes.Repeat([]byte{'u'}, size), bytes.Repeat([]byte{'d'}, size)
					// Both ends write everything and end at once,
					// before anything is read.
					errc := make(chan error, 2)
					go func() {
						_, err := te.client.Write(up)
						if err == nil {
							err = te.client.CloseWrite()
						}
						if err == nil {
							err = te.client.NetConn().(*net.TCPConn).CloseWrite()
						}
						errc <- err
					}()
					go func() {
						_, err := te.origin.Write(down)
						if err == nil {
							err = te.origin.CloseWrite()
						}
						errc <- err
					}()
					gotDown, err := io.ReadAll(te.client)
					if err != nil || !bytes.Equal(gotDown, down) {
						t.Fatalf("client got %d bytes, %v; want %d then close_notify", len(gotDown), err, size)
					}
					gotUp, err := io.ReadAll(te.origin)
					if err != nil || !bytes.Equal(gotUp, up) {
						t.Fatalf("origin got %d bytes, %v; want %d then EOF", len(gotUp), err, size)
					}
					if err := errors.Join(<-errc, <-errc); err != nil {
						t.Fatal(err)
					}
					if full {
						te.origin.Close()
					}
					if r := te.wait(t); r.err != nil || r.up != int64(size) || r.down != int64(size) {
						t.Errorf("%s = %d, %d, %v; want %d each way, nil", impl.name, r.up, r.down, r.err, size)
					}
				})
			}
		}
	})
}

// TestRelayTLSEndedBeforeRelay has both ends send their last bytes and
// FIN (the client without close_notify: a FIN at a record boundary) before
// the relay starts, so that the relay's first look at each socket finds
// bytes and the end of the stream together (on the engine: one
// edge-triggered event, no other to follow).
func TestRelayTLSEndedBeforeRelay(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		for _, size := range []int{1, 1000, 16 << 10} {
			t.Run(strconv.Itoa(size), func(t *testing.T) {
				up, down := bytes.Repeat([]byte{'u'}, size), bytes.Repeat([]byte{'d'}, size)
				te := newTLSTunnelWith(t, impl, context.Background(), 0, 0, func(te *tlsTunnelEnds, clientProxy, upstreamProxy *net.TCPConn) {
					if _, err := te.client.Write(up); err != nil {
						t.Fatal(err)
					}
					if err := te.client.NetConn().(*net.TCPConn).CloseWrite(); err != nil {
						t.Fatal(err)
					}
					if _, err := te.origin.Write(down); err != nil {
						t.Fatal(err)
					}
					if err := te.origin.CloseWrite(); err != nil {
						t.Fatal(err)
					}
					waitRDHUP(t, clientProxy)
					waitRDHUP(t, upstreamProxy)
				})
				gotDown, err := io.ReadAll(te.client)
				if err != nil || !bytes.Equal(gotDown, down) {
					t.Fatalf("client got %d bytes, %v; want %d then close_notify", len(gotDown), err, size)
				}
				gotUp, err := io.ReadAll(te.origin)
				if err != nil || !bytes.Equal(gotUp, up) {
					t.Fatalf("origin got %d bytes, %v; want %d then EOF", len(gotUp), err, size)
				}
				if r := te.wait(t); r.err != nil || r.up != int64(size) || r.down != int64(size) {
					t.Errorf("%s = %d, %d, %v; want %d each way, nil", impl.name, r.up, r.down, r.err, size)
				}
			})
		}
	})
}

// waitRDHUP waits until c's peer has ended its stream (the FIN is in c's
// receive queue, after any bytes).
func waitRDHUP(t *testing.T, c *net.TCPConn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var revents int16
	for deadline := time.Now().Add(10 * time.Second); revents&unix.POLLRDHUP == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no FIN from the peer")
		}
		rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
			if n, err := unix.Poll(fds, 100); n == 1 && err == nil {
				revents = fds[0].Revents
			}
		})
	}
}

// TestAddTLSBackpressure downloads through AddTLS to a client that does
// not read at first: the origin must stall once the socket buffers are
// full, with the proxy holding no more than a few records, and every
// byte must arrive once the client reads, in small reads.
func TestAddTLSBackpressure(t *testing.T) {
	checkNoTLSRelays(t)
	const size = 64 << 20
	te := newTLSTunnel(t, tlsImpls[1], context.Background(), 0, 0)
	te.origin.SetDeadline(time.Time{})
	te.client.SetDeadline(time.Time{})
	before := settledMem()
	var sent atomic.Int64
	stalled := make(chan int64, 1)
	sum := make(chan [32]byte, 1)
	errc := make(chan error, 1)
	go func() {
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for n := 0; n < size; {
			chunk := buf[:min(len(buf), size-n)]
			chunk[0] = byte(n >> 16)
			// A write that makes no progress for a second means
			// the tunnel holds back: report it once, then go on.
			te.origin.SetWriteDeadline(time.Now().Add(time.Second))
			w, err := te.origin.Write(chunk)
			h.Write(chunk[:w])
			n += w
			sent.Store(int64(n))
			if errors.Is(err, os.ErrDeadlineExceeded) {
				select {
				case stalled <- int64(n):
				default:
				}
				continue
			}
			if err != nil {
				errc <- err
				return
			}
		}
		te.origin.SetWriteDeadline(time.Time{})
		sum <- [32]byte(h.Sum(nil))
		errc <- te.origin.CloseWrite()
	}()
	var at int64
	select {
	case at = <-stalled:
	case err := <-errc:
		t.Fatalf("the origin wrote all %d bytes to a client that reads nothing: %v", size, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the origin neither stalled nor finished")
	}
	grown := settledMem().heap - before.heap
	t.Logf("stalled after %d KiB sent (socket buffers); proxy heap grew %d KiB", at>>10, grown>>10)
	if at >= size/2 {
		t.Errorf("the origin sent %d bytes before stalling; want the tunnel to hold back", at)
	}
	if grown > 4<<20 {
		t.Errorf("the proxy's heap grew %d bytes while the client did not read; want a few records", grown)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{te.client}, make([]byte, 1000))
	if err != nil || n != size {
		t.Fatalf("client read %d bytes, %v; want %d", n, err, size)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if [32]byte(h.Sum(nil)) != <-sum {
		t.Fatal("the client's bytes differ from the origin's")
	}
	te.client.CloseWrite()
	if r := te.wait(t); r.err != nil || r.down != size || r.up != 0 {
		t.Errorf("AddTLS = %d, %d, %v; want 0, %d, nil", r.up, r.down, r.err, size)
	}
}

// TestAddTLSMisuse checks that AddTLS refuses a connection it cannot
// relay and leaves it to the caller, open.
func TestAddTLSMisuse(t *testing.T) {
	e := newEngine(t, Config{})
	ln := tlsListener(t)
	serverConf, clientConf := tlsConfs(t, 0)
	client, server, raw := tlsHandshake(t, ln, serverConf, clientConf, true)
	defer client.Close()
	defer raw.Close()
	up, origin := tcpPairTLS(t, ln)
	defer origin.Close()
	defer up.Close()
	called := false
	_, err := e.AddTLS(server, raw, up, func(Result) { called = true })
	if err == nil || !strings.Contains(err.Error(), "RecordConn") {
		t.Fatalf("AddTLS over a plain conn: %v, want an error naming RecordConn", err)
	}
	// Still the caller's: both work.
	if _, err := up.Write([]byte("x")); err != nil {
		t.Errorf("upstream after a refused AddTLS: %v", err)
	}
	if _, err := server.Write([]byte("y")); err != nil {
		t.Errorf("client after a refused AddTLS: %v", err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(client, make([]byte, 1)); err != nil {
		t.Errorf("client read after a refused AddTLS: %v", err)
	}
	if called || e.Len() != 0 {
		t.Errorf("done called %v, %d tunnels; want none", called, e.Len())
	}

	e.Close()
	client2, server2, raw2 := tlsHandshake(t, ln, serverConf, clientConf, false)
	defer client2.Close()
	defer raw2.Close()
	if _, err := e.AddTLS(server2, raw2, up, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddTLS on a closed engine: %v, want ErrClosed", err)
	}
	if _, err := server2.Write([]byte("z")); err != nil {
		t.Errorf("client after AddTLS on a closed engine: %v", err)
	}
}

// TestAddTLSKeyUpdate relays OpenSSL's s_client, which sends a KeyUpdate
// that asks for one back between two lines: crypto/tls answers it from
// inside the engine's read, through the non-blocking write, and the
// tunnel carries on both ways under the new keys.
func TestAddTLSKeyUpdate(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("openssl is missing (scripts/deps.sh installs it)")
		}
		t.Skip("openssl is not installed")
	}
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		var e *Engine
		if impl.engine {
			e = newEngine(t, Config{})
		}
		ln := tlsListener(t)
		serverConf, _ := tlsConfs(t, 0)
		originLn := tlsListener(t)
		result := make(chan relayResult, 1)
		go func() {
			raw, err := ln.AcceptTCP()
			if err != nil {
				result <- relayResult{err: err}
				return
			}
			server := tls.Server(RecordConn(raw), serverConf)
			server.SetDeadline(time.Now().Add(20 * time.Second))
			if err := server.Handshake(); err != nil {
				raw.Close()
				result <- relayResult{err: err}
				return
			}
			server.SetDeadline(time.Time{})
			up, err := net.DialTCP("tcp", nil, originLn.Addr().(*net.TCPAddr))
			if err != nil {
				raw.Close()
				result <- relayResult{err: err}
				return
			}
			if e == nil {
				u, d, err := RelayTLS(context.Background(), server, raw, up, 0)
				result <- relayResult{u, d, err}
				return
			}
			if _, err := e.AddTLS(server, raw, up, func(r Result) { result <- relayResult{r.Up, r.Down, r.Err} }); err != nil {
				result <- relayResult{err: err}
			}
		}()
		cmd := exec.Command(openssl, "s_client", "-connect", ln.Addr().String(), "-tls1_3")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		errPipe, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// s_client reads its input in blocks and drops the rest of a
		// block that starts with a command: the next line goes only
		// once it has said KEYUPDATE.
		var (
			mu     sync.Mutex
			stderr strings.Builder // guarded by mu
		)
		said := func() string {
			mu.Lock()
			defer mu.Unlock()
			return stderr.String()
		}
		keyUpdated := make(chan struct{})
		stderrDone := make(chan struct{})
		go func() {
			defer close(stderrDone)
			sc := bufio.NewScanner(errPipe)
			for sc.Scan() {
				mu.Lock()
				stderr.WriteString(sc.Text() + "\n")
				mu.Unlock()
				if sc.Text() == "KEYUPDATE" {
					close(keyUpdated)
				}
			}
		}()
		defer func() {
			cmd.Process.Kill()
			cmd.Wait()
		}()
		origin, err := originLn.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		defer origin.Close()
		origin.SetDeadline(time.Now().Add(20 * time.Second))
		fromOrigin := bufio.NewReader(origin)
		fromClient := bufio.NewReader(stdout)
		// In s_client, a line "K" sends a KeyUpdate asking for one back.
		// The reply after it proves the answer got through: without it
		// the client would not decrypt records under the server's new
		// key.
		for i, line := range []string{"before\n", "K\n", "after\n"} {
			if _, err := io.WriteString(stdin, line); err != nil {
				t.Fatal(err)
			}
			if line == "K\n" {
				select {
				case <-keyUpdated:
				case <-time.After(20 * time.Second):
					t.Fatal("s_client did not send its KeyUpdate")
				}
				continue
			}
			got, err := fromOrigin.ReadString('\n')
			if err != nil || got != line {
				t.Fatalf("line %d at the origin: %q, %v; want %q (s_client: %s)", i, got, err, line, said())
			}
			reply := "re: " + line
			if _, err := io.WriteString(origin, reply); err != nil {
				t.Fatal(err)
			}
			// Interactive (for its commands), s_client prints the
			// session too.
			for err == nil && got != reply {
				got, err = fromClient.ReadString('\n')
			}
			if err != nil {
				t.Fatalf("reply %d at the client: %q, %v; want %q (s_client: %s)", i, got, err, reply, said())
			}
		}
		origin.Close()
		stdin.Close()
		select {
		case r := <-result:
			if r.up != int64(len("before\nafter\n")) {
				t.Errorf("%s = %d, %d, %v; want %d bytes up", impl.name, r.up, r.down, r.err, len("before\nafter\n"))
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the tunnel did not end")
		}
	})
}
