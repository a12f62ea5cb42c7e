//go:build linux

package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// BenchmarkSNICheck measures what the SNI check costs the proxy per
// tunnel. Two rustle processes (the binary, one worker each) run side
// by side, one with listen.sni = "off" and one with "match", and each
// iteration opens one new CONNECT tunnel through each, in turn: the
// client sends a browser-sized ClientHello (Go's, with ALPN and a
// post-quantum key share, about 1.8 KB) to a raw TCP origin that reads
// it, answers 1 KiB and closes. off-cpu-ns/tunnel and
// match-cpu-ns/tunnel are each rustle's own CPU per tunnel (the
// schedstat run time of all its threads, which the client's and the
// origin's work, in this process, do not touch): accept, the CONNECT
// head, the dial (of "localhost"), the hello's read and check (match
// only), the relay and the close. check-overhead-% is how much more the
// checking one used. Interleaving the two keeps load from elsewhere on
// the machine from favouring either; a few tunnels are in flight at
// once (SetParallelism), as on a proxy under load, where a setup's CPU
// matters, rather than one at a time, where the runtime's idle
// spinning between a client's round trips would dominate both. Run
// with -count for the spread:
//
//	go test ./e2e -run '^$' -bench SNICheck -benchtime 5000x -count 6
func BenchmarkSNICheck(b *testing.B) {
	hello := proxytest.ClientHello(b, &tls.Config{ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
	origin := newHelloOrigin(b, len(hello))
	_, port, _ := net.SplitHostPort(origin.Addr().String())
	target := "localhost:" + port
	req := []byte("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")
	tunnel := func(proxy string, buf []byte) {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.Contains(line, " 200 ") {
			b.Fatalf("CONNECT: %q %v", line, err)
		}
		if _, err := br.ReadString('\n'); err != nil { // the empty line
			b.Fatal(err)
		}
		if _, err := c.Write(hello); err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, br, buf)
		if err != nil || n != helloReply {
			b.Fatalf("the origin's answer: %d bytes, %v", n, err)
		}
	}
	var procs [2]*proc
	for i, mode := range []string{"off", "match"} {
		cfg := fmt.Sprintf("workers = 1\n\n[[listen]]\nname = \"bench\"\naddress = \"127.0.0.1:0\"\nsni = %q\n", mode)
		procs[i] = startRustle(b, "-c", writeFile(b, "rustle.toml", cfg))
		procs[i].waitStarted(b)
	}
	off, match := procs[0], procs[1]
	buf := make([]byte, 4096)
	for range 200 { // warm up: the first tunnels grow rustle's pools
		tunnel(off.addr(), buf)
		tunnel(match.addr(), buf)
	}
	cpuOff, cpuMatch := schedCPU(b, off.pid()), schedCPU(b, match.pid())
	b.SetParallelism(4) // tunnels in flight at once, as a proxy under load has them
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		for i := 0; pb.Next(); i++ {
			if i%2 == 0 {
				tunnel(off.addr(), buf)
				tunnel(match.addr(), buf)
			} else {
				tunnel(match.addr(), buf)
				tunnel(off.addr(), buf)
			}
		}
	})
	b.StopTimer()
	perOff := float64(schedCPU(b, off.pid())-cpuOff) / float64(b.N)
	perMatch := float64(schedCPU(b, match.pid())-cpuMatch) / float64(b.N)
	b.ReportMetric(perOff, "off-cpu-ns/tunnel")
	b.ReportMetric(perMatch, "match-cpu-ns/tunnel")
	b.ReportMetric(100*(perMatch-perOff)/perOff, "check-overhead-%")
}

// helloReply is the size of what the hello origin answers.
const helloReply = 1 << 10

// newHelloOrigin starts a raw TCP server on 127.0.0.1 that reads n bytes
// (a tunnel's ClientHello), answers helloReply bytes and closes.
func newHelloOrigin(b *testing.B, n int) net.Listener {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	reply := make([]byte, helloReply)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(c, make([]byte, n)); err == nil {
					c.Write(reply)
				}
			})
		}
	})
	b.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln
}

// schedCPU returns the nanoseconds the threads of pid have run on a CPU
// (the first field of each /proc/PID/task/TID/schedstat).
func schedCPU(b *testing.B, pid int) int64 {
	b.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Skipf("no schedstat for pid %d: %v", pid, err)
	}
	var sum int64
	for _, path := range tasks {
		s, err := os.ReadFile(path)
		if err != nil {
			continue // a thread that ended
		}
		f := strings.Fields(string(s))
		if len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			sum += v
		}
	}
	return sum
}
