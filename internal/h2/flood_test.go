package h2

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// floodFor is how long the flood helper floods at most.
const floodFor = 2 * time.Second

// TestFloodCPU measures the CPU time the proxy spends while a client
// (in a child process, so that only the proxy is counted) floods one
// connection for up to 2 s with empty CONTINUATION frames of a header
// block that never ends, with requests reset at once (rapid reset), or
// with SETTINGS frames of 2,730 entries each (a full 16 KiB frame of
// duplicate SETTINGS_INITIAL_WINDOW_SIZE).
// Each flood must be cut short (GOAWAY, then close) so that the proxy
// spends a small part of a core on it: an unbounded flood keeps one core
// or more busy for the whole 2 s.
func TestFloodCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("floods for seconds")
	}
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	for _, kind := range []string{"continuation", "rapid-reset", "settings"} {
		t.Run(kind, func(t *testing.T) {
			p := startProxy(t, testConfig(Config{}), nil)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(),
				"H2_FLOOD_HELPER="+kind,
				"H2_FLOOD_PROXY="+p.addr,
				"H2_FLOOD_ORIGIN="+o.Addr,
				"H2_FLOOD_CA="+string(p.caPEM),
			)
			var out, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &stderr
			before, ok := cpuTime()
			if !ok {
				t.Skip("no process CPU time on this platform")
			}
			// The heap is sampled while the flood runs (runtime/metrics
			// reads it without stopping the world): its peak over the
			// start is what the flood made the proxy hold.
			heap0 := heapBytes()
			var peak atomic.Uint64
			stop := make(chan struct{})
			var sampled sync.WaitGroup
			sampled.Go(func() {
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					if h := heapBytes(); h > peak.Load() {
						peak.Store(h)
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			})
			start := time.Now()
			err := cmd.Run()
			close(stop)
			sampled.Wait()
			if err != nil {
				t.Fatalf("flood helper: %v\n%s", err, stderr.String())
			}
			grew := int64(peak.Load()) - int64(heap0)
			summary(t, "h2: a %s flood grew the proxy's heap by at most %d KiB (limit %d KiB)", kind, grew>>10, floodHeap>>10)
			if grew > floodHeap {
				t.Errorf("a %s flood grew the proxy's heap by %d KiB, want under %d KiB", kind, grew>>10, floodHeap>>10)
			}
			// The proxy's side of the connection ends soon after the
			// client's.
			if err := proxytest.CheckGoroutines(10*time.Second, "h2.(*conn).serve"); err != nil {
				t.Fatalf("the flooded connection did not end: %v", err)
			}
			wall := time.Since(start)
			after, _ := cpuTime()
			used := after - before
			limit := floodFor / 4
			summary(t, "h2: a %s flood (%s) cost the proxy %v of CPU in %v (limit %v)",
				kind, strings.TrimSpace(out.String()), used.Round(time.Millisecond), wall.Round(time.Millisecond), limit)
			if used > limit {
				t.Errorf("the proxy spent %v of CPU on a %s flood, want under %v", used, kind, limit)
			}
		})
	}
}

// settingsBatch is how many 16 KiB SETTINGS frames the settings flood
// writes at a time.
const settingsBatch = 64

// floodHeap bounds how much a flood may grow the proxy's heap: one
// connection's streams are bounded, so it must not grow with the frames.
const floodHeap = 16 << 20

// heapBytes returns the bytes of live and not yet swept heap objects.
func heapBytes() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// floodHelper is the client of TestFloodCPU, run in a child process: it
// opens an HTTP/2 connection to H2_FLOOD_PROXY and floods it with the
// kind H2_FLOOD_HELPER names until the proxy closes it or floodFor has
// passed, then prints how many frames it wrote.
func floodHelper() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "flood helper:", err)
		return 1
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(os.Getenv("H2_FLOOD_CA")))
	c, err := tls.Dial("tcp", os.Getenv("H2_FLOOD_PROXY"), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	go io.Copy(io.Discard, c) // the proxy's SETTINGS and answers
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings()
	fr.WriteSettingsAck()
	if _, err := c.Write(buf.Bytes()); err != nil {
		return fail(err)
	}
	const batch = 4096 // frames (or pairs) per write
	var next func() []byte
	switch kind := os.Getenv("H2_FLOOD_HELPER"); kind {
	case "continuation":
		buf.Reset()
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndStream: true, BlockFragment: block(":method", "GET")})
		c.Write(buf.Bytes())
		buf.Reset()
		for range batch {
			fr.WriteContinuation(1, false, nil)
		}
		conts := bytes.Clone(buf.Bytes())
		next = func() []byte { return conts }
	case "rapid-reset":
		id := uint32(1)
		origin := os.Getenv("H2_FLOOD_ORIGIN")
		next = func() []byte {
			b := rapidResets(id, batch, origin)
			id += 2 * batch
			return b
		}
	case "settings":
		buf.Reset()
		entries := make([]http2.Setting, minFrameSize/6)
		for range settingsBatch {
			for i := range entries {
				entries[i] = http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(65535 + i%2)}
			}
			fr.WriteSettings(entries...)
		}
		frames := bytes.Clone(buf.Bytes())
		next = func() []byte { return frames }
	default:
		return fail(fmt.Errorf("unknown flood %q", kind))
	}
	frames, per := 0, batch
	switch os.Getenv("H2_FLOOD_HELPER") {
	case "rapid-reset":
		per = 2 * batch
	case "settings":
		per = settingsBatch
	}
	c.SetWriteDeadline(time.Now().Add(floodFor))
	for {
		if _, err := c.Write(next()); err != nil {
			break
		}
		frames += per
	}
	fmt.Printf("%d frames written\n", frames)
	return 0
}
