package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"
)

// WSResult is the JSON line printed by "load ws".
type WSResult struct {
	Conns int `json:"conns"`
	// Messages counts round trips: a message sent and its echo received
	// before the end of the window.
	Messages int64 `json:"messages"`
	// Bytes counts the payload bytes of the echoes received.
	Bytes      int64    `json:"bytes"`
	Errors     WSErrors `json:"errors"`
	FirstError string   `json:"first_error,omitempty"`
	// Upgrades counts the upgrades answered with 101; CutConnects the
	// connection attempts (connect, TLS handshake, upgrade) still under
	// way when the window ended, not counted as errors.
	Upgrades    int64 `json:"upgrades"`
	CutConnects int64 `json:"cut_connects"`
	Handshakes  int64 `json:"tls_handshakes"`
	Resumed     int64 `json:"tls_resumed"`
	// Curves and Cert are as in HTTPResult.
	Curves     map[string]int64 `json:"tls_curves,omitempty"`
	Cert       string           `json:"tls_cert,omitempty"`
	DurationUS int64            `json:"duration_us"`
	MsgPerSec  float64          `json:"msg_per_s"`
	Gbps       float64          `json:"gbps"`
	// Round trip of one message (with -newconn: of the whole exchange,
	// connection and upgrade included), in microseconds.
	RTTP50US int64 `json:"rtt_p50_us"`
	RTTP99US int64 `json:"rtt_p99_us"`
	RTTMaxUS int64 `json:"rtt_max_us"`
}

// WSErrors counts the failures of a WebSocket run.
type WSErrors struct {
	Connect int64 `json:"connect"`
	// Upgrade counts answers to the upgrade other than a valid 101.
	Upgrade int64 `json:"upgrade"`
	Read    int64 `json:"read"`
	Write   int64 `json:"write"`
	Timeout int64 `json:"timeout"`
}

// Total returns the sum of all counters.
func (e WSErrors) Total() int64 { return e.Connect + e.Upgrade + e.Read + e.Write + e.Timeout }

// wsKey is the Sec-WebSocket-Key of every upgrade (the RFC 6455 example);
// the echo origin does not care, and a fixed key costs nothing per
// connection.
const wsKey = "dGhlIHNhbXBsZSBub25jZQ=="

func runWS(args []string) error {
	fs := flag.NewFlagSet("ws", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "WebSocket echo `host:port`")
	size := fs.Int("size", 64, "payload `bytes` of each message")
	conns := fs.Int("conns", 16, "connections, each with one message in flight")
	newConn := fs.Bool("newconn", false, "one exchange per connection: connect, upgrade, one message and its echo, close")
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	reqTimeout := fs.Duration("req-timeout", 10*time.Second, "an echo not back after this long counts as a timeout")
	rf := addRateFlags(fs)
	fs.Parse(args)
	if *target == "" || *conns < 1 || *size < 0 || *size > 1<<20 {
		return errors.New("ws: -target, -conns >= 1 and 0 <= -size <= 1 MiB are required")
	}
	d, err := df.dialer(*target, *reqTimeout)
	if err != nil {
		return fmt.Errorf("ws: %w", err)
	}
	upgrade := wsUpgradeRequest(d)
	frame := wsClientFrame(*size)
	if rated, err := rf.check(); rated || err != nil {
		if err != nil {
			return fmt.Errorf("ws: %w", err)
		}
		return runRated(rf.run("ws", *conns, *duration, *reqTimeout, d, func() rateSlot {
			return &wsSlot{w: wsWorker{d: d, upgrade: upgrade, frame: frame, size: *size, timeout: *reqTimeout}, newConn: *newConn}
		}))
	}
	results := make([]wsCounts, *conns)
	elapsed := runWindow(*duration, 2**reqTimeout, *conns, func(ctx context.Context, end time.Time, i int) {
		w := wsWorker{d: d, upgrade: upgrade, frame: frame, size: *size, end: end, timeout: *reqTimeout, c: &results[i]}
		w.run(ctx, *newConn)
	})

	var total counts
	res := WSResult{Conns: *conns, Handshakes: d.handshakes.Load(), Resumed: d.resumed.Load(), DurationUS: elapsed.Microseconds()}
	res.Curves, res.Cert = d.seen.result()
	for i := range results {
		r := &results[i]
		total.merge(&r.counts)
		res.Upgrades += r.upgrades
		res.CutConnects += r.cutConnects
		res.Errors.Upgrade += r.upgradeErrs
	}
	res.Messages, res.Bytes = total.requests, total.bytes
	res.Errors.Connect, res.Errors.Read, res.Errors.Write, res.Errors.Timeout = total.errs.Connect, total.errs.Read, total.errs.Write, total.errs.Timeout
	if total.firstErr != nil {
		res.FirstError = total.firstErr.Error()
	}
	res.RTTP50US, res.RTTP99US, res.RTTMaxUS = total.percentiles()
	if s := elapsed.Seconds(); s > 0 {
		res.MsgPerSec = float64(res.Messages) / s
		res.Gbps = float64(res.Bytes) * 8 / s / 1e9
	}
	return printJSON(res)
}

// wsCounts are one WebSocket worker's tallies.
type wsCounts struct {
	counts
	upgrades, upgradeErrs, cutConnects int64
}

// wsWorker runs one connection slot of "load ws".
type wsWorker struct {
	d              dialer
	upgrade, frame []byte
	size           int
	end            time.Time
	timeout        time.Duration
	c              *wsCounts
}

// run exchanges messages until the end of the window: on one connection
// (reopened if it fails), or on a new connection per message with newConn.
func (w *wsWorker) run(ctx context.Context, newConn bool) {
	// Connection attempts end with the window too.
	ctx, cancel := context.WithDeadline(ctx, w.end)
	defer cancel()
	var conn net.Conn
	var br *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	c := w.c
	for time.Now().Before(w.end) && ctx.Err() == nil {
		start := time.Now()
		if conn == nil {
			var err error
			conn, br, err = w.connect(ctx)
			if err != nil {
				if !time.Now().Before(w.end) {
					c.cutConnects++
				} else {
					if errors.Is(err, errUpgrade) {
						c.upgradeErrs++
						if c.firstErr == nil {
							c.firstErr = err
						}
					} else {
						c.fail(&c.errs.Connect, err)
					}
					sleep(ctx, 10*time.Millisecond)
				}
				continue
			}
			c.upgrades++
		}
		conn.SetDeadline(earliest(time.Now().Add(w.timeout), w.end))
		if !newConn {
			start = time.Now()
		}
		err := w.echo(conn, br)
		if err != nil && time.Now().After(w.end) {
			return // cut by the end of the run
		}
		c.record(start, 0, int64(w.size), err)
		if err != nil || newConn {
			conn.Close()
			conn = nil
		}
	}
}

// errUpgrade marks an upgrade the proxy or the origin did not accept.
var errUpgrade = errors.New("load: WebSocket upgrade refused")

// connect opens a connection to the proxy (or the origin) and upgrades it.
func (w *wsWorker) connect(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	conn, err := w.d.dialConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(earliest(time.Now().Add(w.timeout), w.end))
	if _, err := conn.Write(w.upgrade); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("send upgrade: %w", err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	if err := readUpgradeAnswer(br); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, br, nil
}

// echo sends one message and reads its echo.
func (w *wsWorker) echo(conn net.Conn, br *bufio.Reader) error {
	if _, err := conn.Write(w.frame); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	n, err := readWSFrame(br)
	if err != nil {
		return err
	}
	if n != w.size {
		return fmt.Errorf("load: echo of %d bytes, want %d", n, w.size)
	}
	return nil
}

// wsUpgradeRequest formats the upgrade request once: absolute form with
// Proxy-Authorization through a proxy, origin form straight to the origin.
func wsUpgradeRequest(d dialer) []byte {
	var b bytes.Buffer
	if d.proxy != "" {
		b.WriteString("GET http://" + d.target + "/echo HTTP/1.1\r\n")
		if d.authHeader != "" {
			b.WriteString("Proxy-Authorization: " + d.authHeader + "\r\n")
		}
	} else {
		b.WriteString("GET /echo HTTP/1.1\r\n")
	}
	b.WriteString("Host: " + d.target + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + wsKey + "\r\nSec-WebSocket-Version: 13\r\n\r\n")
	return b.Bytes()
}

// wsClientFrame builds one binary client frame of size payload bytes. It
// is masked, as RFC 6455 requires of a client, with the all-zero key: the
// payload goes out as it is, so the load core spends nothing on masking
// (a proxy relays the bytes without looking at the key).
func wsClientFrame(size int) []byte {
	var f []byte
	switch {
	case size <= 125:
		f = []byte{0x82, 0x80 | byte(size)}
	case size <= 0xffff:
		f = binary.BigEndian.AppendUint16([]byte{0x82, 0x80 | 126}, uint16(size))
	default:
		f = binary.BigEndian.AppendUint64([]byte{0x82, 0x80 | 127}, uint64(size))
	}
	f = append(f, 0, 0, 0, 0)
	for i := range size {
		f = append(f, byte('a'+i%26))
	}
	return f
}

// wantAccept is the Sec-WebSocket-Accept that answers wsKey.
var wantAccept = []byte(wsAccept(wsKey))

// readUpgradeAnswer reads the answer to an upgrade: 101 with the right
// Sec-WebSocket-Accept, or errUpgrade.
func readUpgradeAnswer(br *bufio.Reader) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("read upgrade answer: %w", err)
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 101 ")) {
		return fmt.Errorf("%w: %q", errUpgrade, bytes.TrimSpace(line))
	}
	accepted := false
	for i := 0; i < 100; i++ {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("read upgrade answer: %w", err)
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			if !accepted {
				return fmt.Errorf("%w: 101 without the right Sec-WebSocket-Accept", errUpgrade)
			}
			return nil
		}
		if name, value, ok := bytes.Cut(h, []byte(":")); ok && bytes.EqualFold(name, []byte("Sec-WebSocket-Accept")) {
			accepted = bytes.Equal(bytes.TrimSpace(value), wantAccept)
		}
	}
	return fmt.Errorf("%w: more than 100 headers", errUpgrade)
}

// readWSFrame reads one unmasked server frame and discards its payload,
// returning its length.
func readWSFrame(br *bufio.Reader) (int, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, fmt.Errorf("read frame: %w", err)
	}
	if h[1]&0x80 != 0 {
		return 0, errors.New("load: masked frame from the server")
	}
	size := uint64(h[1] & 0x7f)
	switch size {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return 0, fmt.Errorf("read frame: %w", err)
		}
		size = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return 0, fmt.Errorf("read frame: %w", err)
		}
		size = binary.BigEndian.Uint64(ext[:])
	}
	if size > 1<<20 {
		return 0, fmt.Errorf("load: frame of %d bytes", size)
	}
	if _, err := br.Discard(int(size)); err != nil {
		return 0, fmt.Errorf("read frame: %w", err)
	}
	return int(size), nil
}

// wsAccept returns the Sec-WebSocket-Accept value for a client key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}
