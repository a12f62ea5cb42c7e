// Command load is the benchmark campaign's Go load tool, for the tests wrk
// cannot run: CONNECT or SOCKS5 tunnels, requests through an HTTPS proxy,
// and WebSocket messages, through a proxy or, with an empty -proxy,
// straight to the target (the "no proxy" column).
//
// Every subcommand takes the same flags to reach its target: -proxy ADDR,
// -auth USER:PASS (HTTP Basic, or SOCKS5 username/password), -tls (TLS to
// the proxy, an HTTPS proxy; or to the target without a proxy) with -ca
// FILE and -resume (a TLS session cache, so that new connections resume a
// session; without it every connection makes a full handshake), and
// -socks5 (SOCKS5 CONNECT instead of HTTP CONNECT, for bulk and hold),
// and -h2 (with -tls: HTTP/2, ALPN "h2", one connection per tunnel with one
// CONNECT stream, for bulk and hold; without a proxy, a POST stream to the
// origin's HTTP/2 sink at H2SinkPath).
//
// Subcommands:
//
//	load bulk -proxy ADDR -auth USER:PASS -target SINK -stats URL -conns N -duration D
//
// opens N tunnels to the origin's sink, writes as fast as it can through all
// of them for D and prints one JSON line (BulkResult): the throughput is the
// growth of the sink's byte counter, read from the origin's /_stats URL at
// the start and the end of the window.
//
//	load hold -proxy ADDR -auth USER:PASS -target HOLD -steps 1000,5000,9000
//
// opens tunnels to the origin's hold port, sends one small message through
// each and waits for its echo, then leaves them idle. After reaching each
// step it prints one JSON line (HoldStep) and waits for a line on stdin
// before going on; after the last step it waits for stdin to close, then
// closes every tunnel and exits. The caller measures the proxy's memory at
// each step.
//
//	load http -proxy ADDR -tls -ca FILE [-resume] -target ORIGIN -path /1k -conns N [-newconn] -duration D
//
// keeps N connections, each sending absolute-form GET requests with
// Proxy-Authorization one after the other (origin form without a proxy),
// or one request per connection with -newconn ("Connection: close", then
// a new connection, resuming the TLS session with -resume). It counts like
// wrk: requests whose response was complete within D, bytes read, connect,
// read, write, timeout and status (>399) errors, latency percentiles; and
// prints one line, report.WrkMarker followed by JSON (HTTPResult), that
// report.ParseWrk reads like wrk's.
//
//	load ws -proxy ADDR [-tls -ca FILE -resume] -target ECHO -size 64 -conns N [-newconn] -duration D
//
// opens N WebSocket connections through the proxy (an absolute-form GET
// with Upgrade: websocket and Proxy-Authorization, on the plain or TLS
// proxy connection), each sending one binary message at a time and waiting
// for its echo; or, with -newconn, one connection per exchange. It prints
// one JSON line (WSResult): messages per second (round trips), Gbit/s of
// echoed payload, round-trip percentiles.
//
//	load h2 -proxy ADDR -tls -ca FILE [-resume] -target ORIGIN -path /1k -conns N [-inflight K | -newconn] -duration D
//
// is "load http" over HTTP/2 (a minimal client on golang.org/x/net/http2's
// Framer and HPACK, over a TLS connection that offered only "h2"; the
// tunnels of bulk and hold -h2 use x/net/http2's ClientConn): N
// connections, each sending
// forwarded requests (:scheme http, :authority the origin, with
// Proxy-Authorization) one after the other, one stream at a time, no
// multiplexing; with -inflight K, K at a time on each connection (each on
// a stream of its own, through x/net/http2's ClientConn); or, with
// -newconn, one request per connection, closed after the response.
// Straight to the origin (no -proxy) the requests are https to its HTTP/2
// listener. Counted and printed like "load http"; bytes are response body
// bytes.
//
//	load h3 -proxy ADDR -tls -ca FILE -target ORIGIN -path /1k -conns N [-inflight K | -newconn] -duration D
//
// is "load http" over HTTP/3 (quic-go's http3 client): N QUIC connections
// to the proxy's port over UDP, each sending forwarded requests (:scheme
// http, :authority the origin, with Proxy-Authorization) one after the
// other, or K at a time with -inflight K; or, with -newconn, one request
// per connection. Straight to the
// origin (no -proxy) the requests are https to its HTTP/3 listener.
// Counted and printed like "load http"; bytes are response body bytes.
//
//	load udp -proxy ADDR (-tls -ca FILE | -socks5) -auth USER:PASS -target ECHO -size 64 -conns N -duration D
//
// opens N UDP flows to the origin's UDP echo, each with one datagram in
// flight (closed loop, like "load ws"): CONNECT-UDP (RFC 9298) over
// HTTP/3 with -tls (masque-go's client, one QUIC connection per flow,
// payloads in HTTP Datagrams), or SOCKS5 UDP ASSOCIATE with -socks5 (a
// TCP control connection and a UDP socket per flow, RFC 1928's 10-byte
// header); without -proxy, plain UDP. A datagram whose echo is not back
// within -req-timeout counts as lost and the flow sends the next one. It
// prints one JSON line (UDPResult): datagrams per second (round trips),
// lost datagrams, round-trip percentiles.
//
// "load hold -h3" holds QUIC connections instead of tunnels (each after
// one forwarded GET of -path), "load hold -udp" CONNECT-UDP flows (with
// -tls, -flows-per-conn on each QUIC connection) or SOCKS5 UDP
// associations (with -socks5), each after one datagram echoed.
//
// With -rate R, http, h2, h3 and ws run at a fixed offered rate (open
// loop): R exchanges per second over -duration, due at fixed times
// whatever the proxy does, taken in order by -conns connections opened
// before the window, each sending the next exchange due as soon as it is
// free (a worker free early waits for the due time on a timerfd: Go's
// timers wake up to 1 ms late for short waits). Latency runs from the
// time an exchange was due, not from the time it was sent, so an
// exchange that waited for a connection held up by a slow answer counts
// the wait (no coordinated omission). After the window the run drains
// for at most -req-timeout; what was not sent by then counts as unsent.
// -sync prints "ready" before the window and "done" after it, each time
// waiting for a line on stdin, so that the caller can read the proxy's
// CPU over the window alone. It prints one JSON line (RateResult):
// exchanges scheduled, completed and unsent, errors, and the 50th, 99th
// and 99.9th percentiles of the latency, of the send lag (due to sent)
// and of the load side's own timer lag. At most 2,000,000 exchanges per
// run.
//
//	load memloop [-mb 64 -reads 10000000]
//
// reads the words of a 64 MiB array at random, ten million times, and
// prints the CPU time and the wall time that took (MemLoopResult): the
// campaign runs it on the proxy's core before each fixed-rate run, to see
// whether the machine's memory is slow at the time (runMemLoop).
//
// -curves NAMES (with -tls) restricts the key exchanges the client
// offers (Go's names: X25519, X25519MLKEM768, CurveP256, ...).
//
// bulk and hold are bounded by -timeout, http and ws by their duration plus
// twice -req-timeout.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "bulk":
		err = runBulk(os.Args[2:])
	case "hold":
		err = runHold(os.Args[2:])
	case "http":
		err = runHTTP(os.Args[2:])
	case "ws":
		err = runWS(os.Args[2:])
	case "h2":
		err = runH2(os.Args[2:])
	case "h3":
		err = runH3(os.Args[2:])
	case "udp":
		err = runUDP(os.Args[2:])
	case "memloop":
		err = runMemLoop(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: load bulk|hold|http|ws|h2|h3|udp|memloop [flags]; load bulk -h for the flags")
	os.Exit(2)
}
