package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tlsTestPKI is a self-signed server certificate for 127.0.0.1, made once.
var tlsTestPKI = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
})

// tlsConfs returns a server config and a client config that trusts it,
// both limited to TLS version v (0: both 1.2 and 1.3).
func tlsConfs(t testing.TB, v uint16) (server, client *tls.Config) {
	t.Helper()
	cert, err := tlsTestPKI()
	if err != nil {
		t.Fatalf("test certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: v, MaxVersion: v}
	client = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: v, MaxVersion: v}
	return server, client
}

// relayResult is what RelayTLS returned.
type relayResult struct {
	up, down int64
	err      error
}

// tlsTunnelEnds are the application sides of one TLS tunnel.
type tlsTunnelEnds struct {
	client *tls.Conn     // the TLS client application
	origin *net.TCPConn  // the origin server application
	done   chan struct{} // closed when RelayTLS has returned
	res    relayResult   // what it returned; read after done
	cut    func()        // the engine's cut function; nil for RelayTLS
	eng    *Engine       // the engine relaying the tunnel; nil for RelayTLS
}

// wait returns RelayTLS's result, failing the test if none comes in time.
func (te *tlsTunnelEnds) wait(t testing.TB) relayResult {
	t.Helper()
	select {
	case <-te.done:
		return te.res
	case <-time.After(20 * time.Second):
		t.Fatal("RelayTLS did not return")
		return relayResult{}
	}
}

// ended reports whether RelayTLS has returned.
func (te *tlsTunnelEnds) ended() bool {
	select {
	case <-te.done:
		return true
	default:
		return false
	}
}

// tlsHandshake runs both sides of a TLS handshake over a fresh loopback
// connection from ln. The proxy side is made over RecordConn unless plain
// is set.
func tlsHandshake(t testing.TB, ln *net.TCPListener, serverConf, clientConf *tls.Config, plain bool) (client, server *tls.Conn, raw *net.TCPConn) {
	t.Helper()
	dialed, accepted := tcpPairTLS(t, ln)
	var nc net.Conn = RecordConn(accepted)
	if plain {
		nc = accepted
	}
	server = tls.Server(nc, serverConf)
	client = tls.Client(dialed, clientConf)
	deadline := time.Now().Add(20 * time.Second)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	cerr := client.Handshake()
	serr := <-errc
	if err := errors.Join(cerr, serr); err != nil {
		dialed.Close()
		accepted.Close()
		t.Fatalf("TLS handshake: %v", err)
	}
	server.SetDeadline(time.Time{})
	return client, server, accepted
}

// tcpPairTLS returns both ends of one loopback TCP connection from ln.
func tcpPairTLS(t testing.TB, ln *net.TCPListener) (dialed, accepted *net.TCPConn) {
	t.Helper()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		d.Close()
		t.Fatalf("accept: %v", err)
	}
	return d, a
}

// tlsListener returns a loopback listener closed at the end of the test.
func tlsListener(t testing.TB) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// tlsImpl is one of the two TLS tunnel relays: RelayTLS on goroutines, or
// Engine.AddTLS on the engine's loop.
type tlsImpl struct {
	name   string
	engine bool
}

// tlsImpls are the relays every TLS tunnel test runs on.
var tlsImpls = []tlsImpl{{"RelayTLS", false}, {"AddTLS", true}}

// forTLSImpls runs f as a subtest for each TLS relay.
func forTLSImpls(t *testing.T, f func(t *testing.T, impl tlsImpl)) {
	t.Helper()
	for _, impl := range tlsImpls {
		t.Run(impl.name, func(t *testing.T) { f(t, impl) })
	}
}

// newTLSTunnel connects a TLS client and an origin through impl with TLS
// version v (0: any) and the given idle timeout. On the engine (its own,
// with that idle timeout), ctx's end cuts the tunnel. The application conns
// are closed, and the relay awaited, at the end of the test.
func newTLSTunnel(t testing.TB, impl tlsImpl, ctx context.Context, v uint16, idle time.Duration) *tlsTunnelEnds {
	t.Helper()
	return newTLSTunnelWith(t, impl, ctx, v, idle, nil)
}

// newTLSTunnelWith is newTLSTunnel with before, if not nil, called with
// the application ends and the proxy's two sockets before the relay
// starts.
func newTLSTunnelWith(t testing.TB, impl tlsImpl, ctx context.Context, v uint16, idle time.Duration,
	before func(te *tlsTunnelEnds, clientProxy, upstreamProxy *net.TCPConn)) *tlsTunnelEnds {
	t.Helper()
	var e *Engine
	if impl.engine {
		e = newEngine(t, Config{IdleTimeout: idle})
	}
	ln := tlsListener(t)
	serverConf, clientConf := tlsConfs(t, v)
	client, server, raw := tlsHandshake(t, ln, serverConf, clientConf, false)
	upProxy, origin := tcpPairTLS(t, ln)
	te := &tlsTunnelEnds{client: client, origin: origin, done: make(chan struct{})}
	// A relay bug shows up as an I/O timeout, not as a hung test.
	deadline := time.Now().Add(30 * time.Second)
	client.SetDeadline(deadline)
	origin.SetDeadline(deadline)
	if before != nil {
		before(te, raw, upProxy)
	}
	if e != nil {
		cut, err := e.AddTLS(server, raw, upProxy, func(r Result) {
			te.res = relayResult{r.Up, r.Down, r.Err}
			close(te.done)
		})
		if err != nil {
			t.Fatalf("AddTLS: %v", err)
		}
		te.cut, te.eng = cut, e
		stop := context.AfterFunc(ctx, cut)
		t.Cleanup(func() { stop() })
	} else {
		go func() {
			up, down, err := RelayTLS(ctx, server, raw, upProxy, idle)
			te.res = relayResult{up, down, err}
			close(te.done)
		}()
	}
	t.Cleanup(func() {
		client.NetConn().Close()
		origin.Close()
		select {
		case <-te.done:
		case <-time.After(20 * time.Second):
			t.Error("RelayTLS did not return after both ends closed")
		}
	})
	return te
}

// checkNoTLSRelays makes the test fail if a relay goroutine outlives it.
// Call it first, so that it runs after the test's other cleanups.
func checkNoTLSRelays(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		var stacks string
		for range 50 {
			buf := make([]byte, 1<<20)
			stacks = string(buf[:runtime.Stack(buf, true)])
			if !strings.Contains(stacks, "tunnel.(*tlsRelay)") && !strings.Contains(stacks, "tunnel.RelayTLS") {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("TLS relay goroutine leaked:\n%s", stacks)
	})
}

// sendSeeded writes n pseudo-random bytes derived from seed to w in writes
// of random sizes (so that TLS records of many sizes go out), and returns
// their SHA-256.
func sendSeeded(w io.Writer, seed uint64, n int64) ([32]byte, error) {
	src := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for n > 0 {
		chunk := buf[:min(int64(1+src.IntN(len(buf))), n)]
		for i := range chunk {
			chunk[i] = byte(src.Uint32())
		}
		h.Write(chunk)
		if _, err := w.Write(chunk); err != nil {
			return [32]byte{}, err
		}
		n -= int64(len(chunk))
	}
	return [32]byte(h.Sum(nil)), nil
}

// hashAll reads r to EOF and returns the byte count and SHA-256.
func hashAll(r io.Reader) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, make([]byte, 32<<10))
	return n, [32]byte(h.Sum(nil)), err
}

func TestRelayTLSEcho(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		sizes := []int64{0, 1, 100, 16 << 10, 16<<10 + 1, 1 << 20, 16 << 20}
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			for _, size := range sizes {
				if v == tls.VersionTLS12 && size > 1<<20 {
					continue // one 16 MiB run (TLS 1.3) is enough
				}
				t.Run(fmt.Sprintf("%s/%d", tls.VersionName(v), size), func(t *testing.T) {
					te := newTLSTunnel(t, impl, context.Background(), v, 0)
					type got struct {
						n   int64
						sum [32]byte
						err error
					}
					atOrigin, atClient := make(chan got, 1), make(chan got, 1)
					go func() {
						n, sum, err := hashAll(te.origin)
						atOrigin <- got{n, sum, err}
					}()
					go func() {
						n, sum, err := hashAll(te.client)
						atClient <- got{n, sum, err}
					}()
					upErr := make(chan error, 1)
					var upSum [32]byte
					go func() {
						var err error
						upSum, err = sendSeeded(te.client, uint64(size), size)
						if err == nil {
							err = te.client.CloseWrite()
						}
						upErr <- err
					}()
					downSum, err := sendSeeded(te.origin, uint64(size)+1, size)
					if err == nil {
						err = te.origin.CloseWrite()
					}
					if err != nil {
						t.Fatalf("origin send: %v", err)
					}
					if err := <-upErr; err != nil {
						t.Fatalf("client send: %v", err)
					}
					o, c := <-atOrigin, <-atClient
					if o.err != nil || o.n != size || o.sum != upSum {
						t.Errorf("origin got %d bytes (err %v), match %v; want %d", o.n, o.err, o.sum == upSum, size)
					}
					if c.err != nil || c.n != size || c.sum != downSum {
						t.Errorf("client got %d bytes (err %v), match %v; want %d", c.n, c.err, c.sum == downSum, size)
					}
					r := te.wait(t)
					if r.err != nil || r.up != size || r.down != size {
						t.Errorf("RelayTLS = %d, %d, %v; want %d, %d, nil", r.up, r.down, r.err, size, size)
					}
				})
			}
		}
	})
}

// TestRelayTLSPingPong exchanges small messages one at a time: if any
// record stayed inside tls.Conn while the relay slept on an empty socket,
// a round trip would never complete.
func TestRelayTLSPingPong(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			t.Run(tls.VersionName(v), func(t *testing.T) {
				te := newTLSTunnel(t, impl, context.Background(), v, 0)
				echoDone := make(chan error, 1)
				go func() {
					_, err := io.CopyBuffer(te.origin, struct{ io.Reader }{te.origin}, make([]byte, 1500))
					echoDone <- err
				}()
				src := mrand.New(mrand.NewPCG(uint64(v), 7))
				msg := make([]byte, 20<<10)
				back := make([]byte, len(msg))
				for i := range 1000 {
					n := 1 + src.IntN(len(msg))
					for j := range msg[:n] {
						msg[j] = byte(src.Uint32())
					}
					te.client.SetDeadline(time.Now().Add(10 * time.Second))
					// Several writes make several records that arrive
					// together.
					for off := 0; off < n; {
						k := min(n-off, 1+src.IntN(n))
						if _, err := te.client.Write(msg[off : off+k]); err != nil {
							t.Fatalf("round trip %d: write: %v", i, err)
						}
						off += k
					}
					if _, err := io.ReadFull(te.client, back[:n]); err != nil {
						t.Fatalf("round trip %d (%d bytes): %v", i, n, err)
					}
					if !bytes.Equal(back[:n], msg[:n]) {
						t.Fatalf("round trip %d: echo differs", i)
					}
				}
				te.client.CloseWrite()
				if err := <-echoDone; err != nil {
					t.Fatalf("echo: %v", err)
				}
				te.origin.CloseWrite()
				if r := te.wait(t); r.err != nil || r.up != r.down {
					t.Errorf("RelayTLS = %d, %d, %v", r.up, r.down, r.err)
				}
			})
		}
	})
}

func TestRelayTLSHalfClose(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		readAll := func(t *testing.T, r io.Reader, want string) {
			t.Helper()
			b, err := io.ReadAll(r)
			if err != nil || string(b) != want {
				t.Fatalf("read %q, %v; want %q then EOF", b, err, want)
			}
		}
		t.Run("client first", func(t *testing.T) {
			te := newTLSTunnel(t, impl, context.Background(), 0, 0)
			io.WriteString(te.client, "request")
			if err := te.client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			readAll(t, te.origin, "request")
			// The other direction still flows after the client's close.
			io.WriteString(te.origin, "late response")
			buf := make([]byte, 13)
			if _, err := io.ReadFull(te.client, buf); err != nil || string(buf) != "late response" {
				t.Fatalf("client read %q, %v", buf, err)
			}
			te.origin.CloseWrite()
			readAll(t, te.client, "")
			if r := te.wait(t); r.err != nil || r.up != 7 || r.down != 13 {
				t.Errorf("RelayTLS = %d, %d, %v; want 7, 13, nil", r.up, r.down, r.err)
			}
		})
		t.Run("upstream first", func(t *testing.T) {
			te := newTLSTunnel(t, impl, context.Background(), 0, 0)
			io.WriteString(te.origin, "goodbye")
			te.origin.CloseWrite()
			readAll(t, te.client, "goodbye") // ends with close_notify
			// The close_notify is followed by a FIN on the client's socket,
			// while the tunnel still carries the other direction.
			raw := te.client.NetConn()
			raw.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := raw.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("client socket after close_notify: %d, %v; want EOF", n, err)
			}
			if te.ended() {
				t.Fatalf("RelayTLS returned while the client could still send: %v", te.res.err)
			}
			io.WriteString(te.client, "but wait")
			te.client.CloseWrite()
			readAll(t, te.origin, "but wait")
			if r := te.wait(t); r.err != nil || r.up != 8 || r.down != 7 {
				t.Errorf("RelayTLS = %d, %d, %v; want 8, 7, nil", r.up, r.down, r.err)
			}
		})
	})
}

func TestRelayTLSIdleTimeout(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		const idle = 500 * time.Millisecond
		t.Run("idle", func(t *testing.T) {
			te := newTLSTunnel(t, impl, context.Background(), 0, idle)
			r := te.wait(t)
			if !errors.Is(r.err, ErrIdleTimeout) {
				t.Fatalf("RelayTLS error %v, want ErrIdleTimeout", r.err)
			}
			if _, err := te.client.Read(make([]byte, 1)); err == nil {
				t.Error("client read succeeded after the idle timeout")
			}
		})
		t.Run("one busy direction keeps it open", func(t *testing.T) {
			// Longer, so that the test's own pauses on a loaded
			// machine are seldom long enough to end the tunnel.
			const idle = time.Second
			for try := 1; ; try++ {
				from := time.Now()
				te := newTLSTunnel(t, impl, context.Background(), 0, idle)
				buf := make([]byte, 1)
				proves, err := keepBusy(from, idle, func(int) error {
					if _, err := te.origin.Write([]byte{'x'}); err != nil {
						return fmt.Errorf("origin write: %w", err)
					}
					return nil
				}, func(int) error {
					if _, err := io.ReadFull(te.client, buf); err != nil {
						return fmt.Errorf("client read: %w", err)
					}
					return nil
				})
				if proves {
					t.Fatalf("tunnel ended while bytes moved: %v", err)
				}
				if err != nil {
					if try == busyTries {
						t.Fatalf("the test paused for over %v in each of %d tries: %v", idle/2, try, err)
					}
					t.Logf("try %d: %v", try, err)
					continue
				}
				// Open for three idle timeouts; idle now.
				if r := te.wait(t); !errors.Is(r.err, ErrIdleTimeout) {
					t.Fatalf("RelayTLS error %v, want ErrIdleTimeout", r.err)
				}
				return
			}
		})
	})
}

func TestRelayTLSCancel(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		ctx, cancel := context.WithCancel(context.Background())
		te := newTLSTunnel(t, impl, ctx, 0, 0)
		io.WriteString(te.client, "x")
		if _, err := io.ReadFull(te.origin, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		cancel()
		r := te.wait(t)
		// On the engine the context's end is a cut.
		want := context.Canceled
		if impl.engine {
			want = ErrCut
		}
		if !errors.Is(r.err, want) || r.up != 1 {
			t.Fatalf("%s = %d, %d, %v; want 1, 0, %v", impl.name, r.up, r.down, r.err, want)
		}
		// RelayTLS closes; the engine resets a cut tunnel, as it does a
		// spliced one.
		if _, err := te.origin.Read(make([]byte, 1)); err != io.EOF && (!impl.engine || !errors.Is(err, unix.ECONNRESET)) {
			t.Errorf("origin read after cancel: %v, want the end of the stream", err)
		}
	})
}

func TestRelayTLSReset(t *testing.T) {
	checkNoTLSRelays(t)
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		te := newTLSTunnel(t, impl, context.Background(), 0, 0)
		io.WriteString(te.origin, "partial")
		buf := make([]byte, 7)
		if _, err := io.ReadFull(te.client, buf); err != nil {
			t.Fatal(err)
		}
		te.origin.SetLinger(0)
		te.origin.Close()
		r := te.wait(t)
		if r.err == nil || errors.Is(r.err, ErrIdleTimeout) {
			t.Fatalf("RelayTLS error %v, want a read error", r.err)
		}
		t.Logf("RelayTLS after an upstream reset: %v", r.err)
		// The client must not see a clean end (close_notify) of a stream that
		// was cut.
		if _, err := te.client.Read(buf); err == nil || err == io.EOF {
			t.Errorf("client read after upstream reset: %v, want an error other than EOF", err)
		}
	})
}

func TestRelayTLSMisuse(t *testing.T) {
	checkNoTLSRelays(t)
	ln := tlsListener(t)
	serverConf, clientConf := tlsConfs(t, 0)
	client, server, raw := tlsHandshake(t, ln, serverConf, clientConf, true)
	defer client.Close()
	up, origin := tcpPairTLS(t, ln)
	defer origin.Close()
	_, _, err := RelayTLS(context.Background(), server, raw, up, 0)
	if err == nil || !strings.Contains(err.Error(), "RecordConn") {
		t.Fatalf("RelayTLS over a plain conn: %v, want an error naming RecordConn", err)
	}
	origin.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := origin.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("upstream not closed: %v", err)
	}
}

// record returns a TLS record header for a body of n bytes, and the body.
func record(n int, fill byte) []byte {
	b := make([]byte, recordHeaderLen+n)
	b[0], b[1], b[2], b[3], b[4] = 23, 3, 3, byte(n>>8), byte(n)
	for i := recordHeaderLen; i < len(b); i++ {
		b[i] = fill
	}
	return b
}

// readLimits returns the offset of each record of a stream of TLS
// records, and the offset just past its end: the furthest a Read starting
// in that record may go.
func readLimits(stream []byte) (starts, limits []int) {
	for off := 0; off < len(stream); {
		n := recordHeaderLen
		if off+recordHeaderLen <= len(stream) {
			n += int(stream[off+3])<<8 | int(stream[off+4])
		}
		starts = append(starts, off)
		limits = append(limits, off+n)
		off += n
	}
	return starts, limits
}

// checkBounds fails if reads (given as successive lengths) of stream ever
// went past the end of the record they started in.
func checkBounds(t *testing.T, stream []byte, reads []int) {
	t.Helper()
	starts, limits := readLimits(stream)
	pos, rec := 0, 0
	for i, n := range reads {
		for rec+1 < len(starts) && starts[rec+1] <= pos {
			rec++
		}
		if pos+n > limits[rec] {
			t.Fatalf("read %d took [%d, %d), past %d, the end of the record at %d",
				i, pos, pos+n, limits[rec], starts[rec])
		}
		pos += n
	}
}

func TestRecordConn(t *testing.T) {
	ln := tlsListener(t)
	dialed, accepted := tcpPairTLS(t, ln)
	defer dialed.Close()
	defer accepted.Close()
	var stream []byte
	src := mrand.New(mrand.NewPCG(1, 2))
	for i := range 300 {
		n := src.IntN(17 << 10)
		if i%10 == 0 {
			n = src.IntN(3) // empty and tiny records too
		}
		stream = append(stream, record(n, byte(i))...)
	}
	go func() {
		dialed.Write(stream) // all at once: the reader's socket has many records
		dialed.CloseWrite()
	}()
	rc := RecordConn(accepted)
	rc.SetReadDeadline(time.Now().Add(20 * time.Second))
	var got []byte
	var reads []int
	buf := make([]byte, 256<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			got = append(got, buf[:n]...)
			reads = append(reads, n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(stream))
	}
	checkBounds(t, stream, reads)
	t.Logf("%d records in %d reads", 300, len(reads))
}

// FuzzRecordBounds reads an arbitrary byte stream in chunks of arbitrary
// sizes, each capped by recordBounds.limit, and checks that no read goes
// past the end of the current record, and that the stream is never stuck
// (limit is always positive).
func FuzzRecordBounds(f *testing.F) {
	f.Fuzz(func(t *testing.T, stream []byte, chunks []byte) {
		var b RecordBounds
		var reads []int
		for pos, i := 0, 0; pos < len(stream); i++ {
			lim := b.Limit()
			if lim <= 0 || lim > 0xffff {
				t.Fatalf("limit %d at %d", lim, pos)
			}
			want := len(stream) - pos
			if len(chunks) > 0 {
				want = 1 + int(chunks[i%len(chunks)])*97
			}
			n := min(lim, want, len(stream)-pos)
			b.Advance(stream[pos : pos+n])
			reads = append(reads, n)
			pos += n
		}
		checkBounds(t, stream, reads)
	})
}

// TestRelayTLSIdleMemory measures the Go heap and stacks that idle TLS
// tunnels cost the relaying process. The TLS clients and the origin run in
// a child process (this test binary again), so that only the proxy side
// is counted.
func TestRelayTLSIdleMemory(t *testing.T) {
	checkNoTLSRelays(t)
	if testing.Short() {
		t.Skip("opens 1,000 TLS tunnels")
	}
	const tunnels = 500
	tests := []struct {
		name     string
		up, down int  // bytes each tunnel carries before it idles
		fullSize bool // the client sends 16 KiB records at once, as OpenSSL and BoringSSL do
	}{
		{"handshake only", 0, 0, false},
		{"download", 2 << 10, 256 << 10, false},
		// crypto/tls keeps its input buffer, grown to hold the client's
		// largest record, for the connection's life: about 18 KiB when
		// the client sends full-size records from the start, 32 KiB when
		// their size grows step by step (Go clients), as bytes.Buffer
		// doubles.
		{"upload, full-size records", 256 << 10, 256 << 10, true},
		{"upload, growing records", 256 << 10, 256 << 10, false},
	}
	forTLSImpls(t, func(t *testing.T, impl tlsImpl) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				heap, stacks, goroutines := measureIdleTLS(t, impl, tunnels, tt.up, tt.down, tt.fullSize)
				perTunnel := heap + stacks
				t.Logf("%s: %d idle TLS tunnels, %s (%d bytes up, %d down): %.1f KiB of heap+stacks per tunnel (race detector: %v)",
					impl.name, tunnels, tt.name, tt.up, tt.down, perTunnel/1024, raceEnabled)
				// Generous: the point is to catch a buffer or goroutine
				// per tunnel too many, not to time anything.
				if limit := 80.0 * 1024; perTunnel > limit {
					t.Errorf("%.1f KiB per idle TLS tunnel, want under %.0f KiB", perTunnel/1024, limit/1024)
				}
				// On the engine an idle tunnel has no goroutine, no
				// stack and no buffer.
				if impl.engine {
					if goroutines > tunnels/10 || stacks > 1024 {
						t.Errorf("%d goroutines, %.1f KiB of stacks per tunnel on the engine; want none", goroutines, stacks/1024)
					}
					// Measured 6.0 KiB after a handshake alone: crypto/tls's
					// state, its input buffer at 576 bytes (the
					// ClientHello handed to it in small records; 7.1
					// KiB in one record).
					limit := 7.5 * 1024
					if raceEnabled {
						limit = 16 * 1024
					}
					if tt.up == 0 && heap > limit {
						t.Errorf("%.1f KiB of heap per tunnel on the engine, want under %.1f KiB: no buffer held, the ClientHello read in small records", heap/1024, limit/1024)
					}
				}
			})
		}
	})
}

// raceEnabled reports whether the race detector is on (goroutine stacks
// are larger then).
var raceEnabled = func() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}()

// measureIdleTLS relays tunnels TLS tunnels with impl whose ends live in
// a child process and returns the growth of HeapInuse and StackInuse per
// tunnel, and of the goroutines.
func measureIdleTLS(t *testing.T, impl tlsImpl, tunnels, up, down int, fullSize bool) (heap, stacks float64, goroutines int) {
	const warm = 20 // tunnels open before the baseline, to exclude one-time costs
	var e *Engine
	if impl.engine {
		e = newEngine(t, Config{})
	}
	ln := tlsListener(t)
	serverConf, _ := tlsConfs(t, 0)
	cert, _ := tlsTestPKI()

	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayTLSMemoryHelper$", "-test.v")
	cmd.Env = append(os.Environ(),
		"TUNNEL_TLS_HELPER=1",
		"TUNNEL_TLS_PROXY="+ln.Addr().String(),
		"TUNNEL_TLS_CERT="+string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})),
		fmt.Sprintf("TUNNEL_TLS_N=%d", tunnels),
		fmt.Sprintf("TUNNEL_TLS_WARM=%d", warm),
		fmt.Sprintf("TUNNEL_TLS_UP=%d", up),
		fmt.Sprintf("TUNNEL_TLS_DOWN=%d", down),
		fmt.Sprintf("TUNNEL_TLS_FULLSIZE=%v", fullSize),
	)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	waited := false
	defer func() {
		stdin.Close()
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	lines := bufio.NewScanner(stdout)
	var other strings.Builder // the helper's other output, for errors
	expect := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			if rest, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return rest
			}
			other.WriteString(lines.Text() + "\n")
		}
		t.Fatalf("helper ended before %q: %v\n%s%s", prefix, lines.Err(), other.String(), stderr.String())
		return ""
	}
	originAddr := expect("ORIGIN ")

	// The proxy: one goroutine per connection does the handshake, dials
	// the origin and relays, as the HTTPS port would.
	var wg sync.WaitGroup
	results := make(chan error, tunnels+warm)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range tunnels + warm {
			raw, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				server := tls.Server(RecordConn(raw), serverConf)
				if err := server.Handshake(); err != nil {
					raw.Close()
					results <- err
					return
				}
				up, err := net.Dial("tcp", originAddr)
				if err != nil {
					raw.Close()
					results <- err
					return
				}
				if e == nil {
					_, _, err = RelayTLS(context.Background(), server, raw, up.(*net.TCPConn), 0)
					results <- err
					return
				}
				// As the HTTPS port does, the serving goroutine
				// returns once the engine has the tunnel.
				wg.Add(1)
				if _, err := e.AddTLS(server, raw, up.(*net.TCPConn), func(r Result) {
					results <- r.Err
					wg.Done()
				}); err != nil {
					wg.Done()
					results <- err
				}
			}()
		}
	}()

	expect("WARM")
	before := settledMem()
	goroutinesBefore := runtime.NumGoroutine()
	io.WriteString(stdin, "go\n")
	expect("READY")
	after := settledMem()
	goroutines = runtime.NumGoroutine() - goroutinesBefore

	stdin.Close() // the helper closes every connection and exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v\n%s", err, stderr.String())
	}
	waited = true
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("relays did not end after the helper closed its connections")
	}
	close(results)
	failed := 0
	var sample error
	for err := range results {
		if err != nil {
			failed++
			sample = err
		}
	}
	t.Logf("%d tunnels: %d goroutines (%.1f per tunnel); %d ended with an error when the helper exited (%v)",
		tunnels, goroutines, float64(goroutines)/float64(tunnels), failed, sample)
	heap = float64(after.heap-before.heap) / float64(tunnels)
	stacks = float64(after.stack-before.stack) / float64(tunnels)
	t.Logf("per tunnel: heap %.1f KiB, stacks %.1f KiB", heap/1024, stacks/1024)
	return heap, stacks, goroutines
}

// memUse is the part of runtime.MemStats the memory test compares.
type memUse struct{ heap, stack int64 }

// settledMem returns HeapInuse and StackInuse after a few collections
// (which also shrink the stacks of parked goroutines).
func settledMem() memUse {
	var ms runtime.MemStats
	for range 4 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return memUse{int64(ms.HeapInuse), int64(ms.StackInuse)}
}

// TestRelayTLSMemoryHelper is the child process of TestRelayTLSIdleMemory:
// it opens the TLS clients and serves as their origin.
func TestRelayTLSMemoryHelper(t *testing.T) {
	if os.Getenv("TUNNEL_TLS_HELPER") != "1" {
		t.Skip("run by TestRelayTLSIdleMemory")
	}
	atoi := func(k string) int {
		n, err := strconv.Atoi(os.Getenv(k))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		return n
	}
	n, warm := atoi("TUNNEL_TLS_N"), atoi("TUNNEL_TLS_WARM")
	up, down := atoi("TUNNEL_TLS_UP"), atoi("TUNNEL_TLS_DOWN")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(os.Getenv("TUNNEL_TLS_CERT"))) {
		t.Fatal("no certificate")
	}
	conf := &tls.Config{
		RootCAs:                     pool,
		ServerName:                  "127.0.0.1",
		DynamicRecordSizingDisabled: os.Getenv("TUNNEL_TLS_FULLSIZE") == "true",
	}
	ln := tlsListener(t)
	fmt.Printf("ORIGIN %s\n", ln.Addr())
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	upMsg, downMsg := make([]byte, up), make([]byte, down)
	upGot, downGot := make([]byte, up), make([]byte, down)
	open := func() {
		c, err := tls.Dial("tcp", os.Getenv("TUNNEL_TLS_PROXY"), conf)
		if err != nil {
			t.Fatalf("dial proxy: %v", err)
		}
		o, err := ln.AcceptTCP()
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		conns = append(conns, c, o)
		deadline := time.Now().Add(30 * time.Second)
		c.SetDeadline(deadline)
		o.SetDeadline(deadline)
		errc := make(chan error, 2)
		go func() {
			_, err := c.Write(upMsg)
			errc <- err
		}()
		go func() {
			_, err := o.Write(downMsg)
			errc <- err
		}()
		if _, err := io.ReadFull(o, upGot); err != nil {
			t.Fatalf("origin read: %v", err)
		}
		if _, err := io.ReadFull(c, downGot); err != nil {
			t.Fatalf("client read: %v", err)
		}
		if err := errors.Join(<-errc, <-errc); err != nil {
			t.Fatalf("write: %v", err)
		}
		c.SetDeadline(time.Time{})
		o.SetDeadline(time.Time{})
	}
	for range warm {
		open()
	}
	fmt.Println("WARM")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	for range n {
		open()
	}
	fmt.Println("READY")
	io.Copy(io.Discard, in) // until the parent closes stdin
}

// BenchmarkRelayTLSUpload moves 1 MiB per op from a TLS client through
// RelayTLS to the origin.
func BenchmarkRelayTLSUpload(b *testing.B) {
	impl := tlsImpls[0]
	te := newTLSTunnel(b, impl, context.Background(), 0, 0)
	msg := make([]byte, 1<<20)
	sink := make([]byte, 64<<10)
	te.client.SetDeadline(time.Time{})
	te.origin.SetDeadline(time.Time{})
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		errc := make(chan error, 1)
		go func() {
			_, err := te.client.Write(msg)
			errc <- err
		}()
		for got := 0; got < len(msg); {
			n, err := te.origin.Read(sink)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}

// TestRecordConnReadAhead checks that RecordConn reads the socket ahead in
// one read, hands crypto/tls a record read ahead whole in one Read but
// never more than the current record, gives its buffer back once drained,
// and that a TLS Parker does not wait while bytes read ahead are pending.
func TestRecordConnReadAhead(t *testing.T) {
	ln := tlsListener(t)
	dialed, accepted := tcpPairTLS(t, ln)
	defer dialed.Close()
	defer accepted.Close()
	stream := append(record(100, 1), record(200, 2)...)
	if _, err := dialed.Write(stream); err != nil {
		t.Fatal(err)
	}
	raw, err := accepted.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		var n int
		raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(stream); {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d bytes arrived", queued(), len(stream))
		}
		runtime.Gosched()
	}
	nc := RecordConn(accepted)
	rc := nc.(*recordConn)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := nc.Read(buf)
	if first := recordHeaderLen + 100; err != nil || n != first {
		t.Fatalf("first read: %d bytes, %v; want the first record, header and body read ahead: %d", n, err, first)
	}
	if q := queued(); q != 0 {
		t.Errorf("%d bytes left in the socket after the first read, want all read ahead", q)
	}
	// The socket is empty, but bytes wait: a Parker must not sleep. A
	// short deadline turns a wrong wait into an error, not a hang.
	p := NewParker(rc.rc)
	p.ahead = rc
	accepted.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if err := p.Wait(); err != nil {
		t.Fatalf("Parker.Wait with bytes read ahead: %v", err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var reads []int
	reads = append(reads, n)
	got := append([]byte(nil), buf[:n]...)
	for len(got) < len(stream) {
		n, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		reads = append(reads, n)
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, stream) {
		t.Fatal("read-ahead changed the stream")
	}
	checkBounds(t, stream, reads)
	if len(reads) != 2 {
		t.Errorf("reads %v, want one per record", reads)
	}
	if rc.ahead != nil || rc.pending() {
		t.Error("the read-ahead buffer is kept after it was drained")
	}
	// Drained: the Parker waits on the socket again.
	accepted.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := p.Wait(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Parker.Wait on an empty socket: %v, want the deadline", err)
	}
}
