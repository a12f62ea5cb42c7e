package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/quic-go/masque-go"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/yosida95/uritemplate/v3"
)

// UDPResult is the JSON line printed by "load udp".
type UDPResult struct {
	Flows int `json:"flows"`
	// Opened counts the flows established (CONNECT-UDP answered 200, or
	// UDP ASSOCIATE answered with a relay).
	Opened int64 `json:"opened"`
	// Datagrams counts round trips: a datagram sent and its echo received
	// before the end of the window; Bytes their echoed payload bytes.
	Datagrams int64 `json:"datagrams"`
	Bytes     int64 `json:"bytes"`
	// Lost counts datagrams whose echo did not come back within
	// -req-timeout (the flow then sends the next one).
	Lost int64 `json:"lost"`
	// Errors counts flows that failed to open or to send.
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	DurationUS int64   `json:"duration_us"`
	PerSec     float64 `json:"datagrams_per_s"`
	RTTP50US   int64   `json:"rtt_p50_us"`
	RTTP99US   int64   `json:"rtt_p99_us"`
	RTTMaxUS   int64   `json:"rtt_max_us"`
}

// flow is one UDP flow to the echo: through CONNECT-UDP, a SOCKS5 UDP
// association, or a plain UDP socket.
type flow interface {
	// send sends one datagram with payload p; recv reads the payload of
	// the next one into buf, until the read deadline.
	send(p []byte) error
	recv(buf []byte) (int, error)
	SetReadDeadline(time.Time) error
	Close() error
}

// flowDialer opens flows to target: over CONNECT-UDP on HTTP/3 (masque-go's
// client) with perConn flows on each QUIC connection, over SOCKS5 UDP
// ASSOCIATE with socks, or straight without a proxy.
type flowDialer struct {
	d       dialer
	socks   bool
	perConn int
	tmpl    *uritemplate.Template
	qconf   *quic.Config

	mu    sync.Mutex
	cc    *masque.ClientConn
	used  int
	conns []*quic.Conn
}

// newFlowDialer returns the flow dialer of d; tmplPath is the proxy's
// CONNECT-UDP URI template path.
func newFlowDialer(d dialer, socks bool, perConn int, tmplPath string) (*flowDialer, error) {
	fd := &flowDialer{d: d, socks: socks, perConn: max(perConn, 1),
		qconf: &quic.Config{EnableDatagrams: true, InitialPacketSize: 1350, KeepAlivePeriod: 15 * time.Second}}
	if d.proxy != "" && !socks {
		if d.tlsConf == nil {
			return nil, errors.New("udp: CONNECT-UDP needs -tls (or -socks5)")
		}
		d.tlsConf.NextProtos = []string{http3.NextProtoH3}
		t, err := uritemplate.New("https://" + d.proxy + tmplPath)
		if err != nil {
			return nil, fmt.Errorf("udp: template %q: %w", tmplPath, err)
		}
		fd.tmpl = t
	}
	return fd, nil
}

// open opens one flow and checks nothing on it yet.
func (fd *flowDialer) open(ctx context.Context) (flow, error) {
	ctx, cancel := context.WithTimeout(ctx, fd.d.timeout)
	defer cancel()
	switch {
	case fd.d.proxy == "":
		var nd net.Dialer
		c, err := nd.DialContext(ctx, "udp", fd.d.target)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", fd.d.target, err)
		}
		return plainFlow{c.(*net.UDPConn)}, nil
	case fd.socks:
		return fd.d.socksAssociate(ctx)
	}
	cc, own, err := fd.clientConn(ctx)
	if err != nil {
		return nil, err
	}
	req, err := masque.NewRequest(ctx, fd.tmpl, fd.d.target)
	if err != nil {
		return nil, fmt.Errorf("CONNECT-UDP request for %s: %w", fd.d.target, err)
	}
	if fd.d.authHeader != "" {
		req.Header().Set("Proxy-Authorization", fd.d.authHeader)
	}
	c, rsp, err := cc.Dial(req)
	if err != nil {
		if own != nil {
			own.CloseWithError(0, "")
		}
		if rsp != nil {
			return nil, fmt.Errorf("CONNECT-UDP %s: status %d: %w", fd.d.target, rsp.StatusCode, err)
		}
		return nil, fmt.Errorf("CONNECT-UDP %s: %w", fd.d.target, err)
	}
	return masqueFlow{c: c, own: own}, nil
}

// clientConn returns the QUIC connection the next flow goes on: a new one
// per flow with perConn 1 (returned as own, closed with the flow), or the
// current one until it carries perConn flows.
func (fd *flowDialer) clientConn(ctx context.Context) (*masque.ClientConn, *quic.Conn, error) {
	if fd.perConn > 1 {
		fd.mu.Lock()
		defer fd.mu.Unlock()
		if fd.cc != nil && fd.used < fd.perConn {
			fd.used++
			return fd.cc, nil, nil
		}
	}
	qc, err := quic.DialAddr(ctx, fd.d.proxy, fd.d.tlsConf, fd.qconf)
	if err != nil {
		return nil, nil, fmt.Errorf("QUIC dial %s: %w", fd.d.proxy, err)
	}
	cc, err := (&masque.Transport{}).NewClientConn(qc)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, nil, fmt.Errorf("HTTP/3 on %s: %w", fd.d.proxy, err)
	}
	if fd.perConn == 1 {
		return cc, qc, nil
	}
	fd.cc, fd.used = cc, 1
	fd.conns = append(fd.conns, qc)
	return cc, nil, nil
}

// close closes the shared QUIC connections.
func (fd *flowDialer) close() {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	for _, qc := range fd.conns {
		qc.CloseWithError(0, "")
	}
	fd.conns, fd.cc = nil, nil
}

// masqueFlow is a CONNECT-UDP flow; own, when not nil, is its QUIC
// connection, closed with it.
type masqueFlow struct {
	c   *masque.Conn
	own *quic.Conn
}

func (f masqueFlow) send(p []byte) error {
	_, err := f.c.WriteTo(p, nil)
	return err
}

func (f masqueFlow) recv(buf []byte) (int, error) {
	n, _, err := f.c.ReadFrom(buf)
	return n, err
}

func (f masqueFlow) SetReadDeadline(t time.Time) error { return f.c.SetReadDeadline(t) }

func (f masqueFlow) Close() error {
	err := f.c.Close()
	if f.own != nil {
		f.own.CloseWithError(0, "")
	}
	return err
}

// plainFlow is a UDP socket connected to the echo.
type plainFlow struct{ *net.UDPConn }

func (f plainFlow) send(p []byte) error {
	_, err := f.Write(p)
	return err
}

func (f plainFlow) recv(buf []byte) (int, error) { return f.Read(buf) }

// socksFlow is a SOCKS5 UDP association (RFC 1928 §7): the TCP control
// connection, which keeps it alive, and a UDP socket connected to the
// relay; every datagram carries the header hdr (RSV, FRAG 0, the target).
type socksFlow struct {
	ctrl net.Conn
	udp  *net.UDPConn
	hdr  []byte
	out  []byte
	in   []byte
}

// socksAssociate opens a SOCKS5 UDP association through the proxy for
// datagrams to the target.
func (d dialer) socksAssociate(ctx context.Context) (*socksFlow, error) {
	c, err := d.dialConn(ctx)
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("UDP socket: %w", err)
	}
	fail := func(err error) (*socksFlow, error) {
		c.Close()
		udp.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	tc := &tunnelConn{Conn: c, r: bufio.NewReaderSize(c, 512)}
	// The client's own UDP address, which rustle takes as the only source
	// of the association's datagrams.
	relay, err := d.socksRequest(tc, 3, udp.LocalAddr().String())
	if err != nil {
		return fail(err)
	}
	c.SetDeadline(time.Time{})
	if relay.Addr().IsUnspecified() {
		// A relay on "any address" is reached at the proxy's host.
		h, _, _ := net.SplitHostPort(d.proxy)
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return fail(fmt.Errorf("SOCKS5 relay %s of %s: %w", relay, d.proxy, err))
		}
		relay = netip.AddrPortFrom(ip, relay.Port())
	}
	udp.Close()
	// Reconnect the same local port to the relay, so that reads see only
	// its datagrams.
	laddr := udp.LocalAddr().(*net.UDPAddr)
	cu, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(relay))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("UDP socket to the relay %s: %w", relay, err)
	}
	hdr, err := socksUDPHeader(d.target)
	if err != nil {
		c.Close()
		cu.Close()
		return nil, err
	}
	return &socksFlow{ctrl: c, udp: cu, hdr: hdr}, nil
}

// socksUDPHeader returns the header of RFC 1928 §7 for datagrams to
// target (an IP address and port): RSV 0 0, FRAG 0, the address.
func socksUDPHeader(target string) ([]byte, error) {
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		return nil, fmt.Errorf("SOCKS5 UDP target %q: %w", target, err)
	}
	hdr := []byte{0, 0, 0}
	if ap.Addr().Is4() {
		a := ap.Addr().As4()
		hdr = append(append(hdr, 1), a[:]...)
	} else {
		a := ap.Addr().As16()
		hdr = append(append(hdr, 4), a[:]...)
	}
	return binary.BigEndian.AppendUint16(hdr, ap.Port()), nil
}

// socksUDPPayload returns the payload of a datagram from a SOCKS5 relay,
// after its header.
func socksUDPPayload(b []byte) ([]byte, error) {
	if len(b) < 4 || b[2] != 0 {
		return nil, fmt.Errorf("%w: bad UDP header % x", errSOCKS, b[:min(len(b), 4)])
	}
	n := 4
	switch b[3] {
	case 1:
		n += 4
	case 4:
		n += 16
	case 3:
		if len(b) < 5 {
			return nil, fmt.Errorf("%w: short UDP header", errSOCKS)
		}
		n += 1 + int(b[4])
	default:
		return nil, fmt.Errorf("%w: UDP header address type %d", errSOCKS, b[3])
	}
	n += 2
	if len(b) < n {
		return nil, fmt.Errorf("%w: short UDP header", errSOCKS)
	}
	return b[n:], nil
}

func (f *socksFlow) send(p []byte) error {
	f.out = append(append(f.out[:0], f.hdr...), p...)
	_, err := f.udp.Write(f.out)
	return err
}

func (f *socksFlow) recv(buf []byte) (int, error) {
	if cap(f.in) < len(buf)+262 {
		f.in = make([]byte, len(buf)+262)
	}
	n, err := f.udp.Read(f.in[:cap(f.in)])
	if err != nil {
		return 0, err
	}
	p, err := socksUDPPayload(f.in[:n])
	if err != nil {
		return 0, err
	}
	return copy(buf, p), nil
}

func (f *socksFlow) SetReadDeadline(t time.Time) error { return f.udp.SetReadDeadline(t) }

func (f *socksFlow) Close() error {
	f.udp.Close()
	return f.ctrl.Close()
}

// echoDatagram sends payload (its first 8 bytes overwritten with seq) on f
// and waits until timeout for its echo, skipping late echoes of earlier
// datagrams.
func echoDatagram(f flow, payload, buf []byte, seq uint64, timeout time.Duration) error {
	binary.BigEndian.PutUint64(payload, seq)
	if err := f.send(payload); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	f.SetReadDeadline(time.Now().Add(timeout))
	for {
		n, err := f.recv(buf)
		if err != nil {
			return err
		}
		if n == len(payload) && binary.BigEndian.Uint64(buf) == seq {
			return nil
		}
	}
}

func runUDP(args []string) error {
	fs := flag.NewFlagSet("udp", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "UDP echo `host:port`")
	size := fs.Int("size", 64, "payload `bytes` of each datagram (8 to 1200)")
	flows := fs.Int("conns", 16, "flows, each with one datagram in flight")
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	reqTimeout := fs.Duration("req-timeout", time.Second, "an echo not back after this long counts as lost")
	tmplPath := fs.String("template", "/.well-known/masque/udp/{target_host}/{target_port}/", "CONNECT-UDP URI template `path`")
	fs.Parse(args)
	if *target == "" || *flows < 1 || *size < 8 || *size > 1200 {
		return errors.New("udp: -target, -conns >= 1 and 8 <= -size <= 1200 are required")
	}
	d, err := df.dialer(*target, 10*time.Second)
	if err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	fd, err := newFlowDialer(d, *df.socks, 1, *tmplPath)
	if err != nil {
		return err
	}
	results := make([]udpCounts, *flows)
	elapsed := runWindow(*duration, 2*d.timeout, *flows, func(ctx context.Context, end time.Time, i int) {
		udpWorker(ctx, fd, *size, end, *reqTimeout, &results[i])
	})
	res := UDPResult{Flows: *flows, DurationUS: elapsed.Microseconds()}
	var total counts
	for i := range results {
		r := &results[i]
		total.merge(&r.counts)
		res.Opened += r.opened
		res.Lost += r.lost
	}
	res.Datagrams, res.Bytes = total.requests, total.bytes
	res.Errors = total.errs.Connect + total.errs.Write + total.errs.Read
	if total.firstErr != nil {
		res.FirstError = total.firstErr.Error()
	}
	res.RTTP50US, res.RTTP99US, res.RTTMaxUS = total.percentiles()
	if s := elapsed.Seconds(); s > 0 {
		res.PerSec = float64(res.Datagrams) / s
	}
	return printJSON(res)
}

// udpCounts are one flow's tallies.
type udpCounts struct {
	counts
	opened, lost int64
}

// udpWorker keeps one flow open (reopened after an error) and echoes one
// datagram after the other on it until end.
func udpWorker(ctx context.Context, fd *flowDialer, size int, end time.Time, timeout time.Duration, c *udpCounts) {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	payload := make([]byte, size)
	buf := make([]byte, 2048)
	var f flow
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var seq uint64
	for time.Now().Before(end) && ctx.Err() == nil {
		if f == nil {
			var err error
			if f, err = fd.open(ctx); err != nil {
				f = nil
				if time.Now().Before(end) {
					c.fail(&c.errs.Connect, err)
					sleep(ctx, 10*time.Millisecond)
				}
				continue
			}
			c.opened++
		}
		seq++
		start := time.Now()
		err := echoDatagram(f, payload, buf, seq, min(timeout, time.Until(end)+time.Millisecond))
		switch {
		case err != nil && !time.Now().Before(end):
			return // cut by the end of the run
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.lost++
		case errors.Is(err, errWrite):
			c.fail(&c.errs.Write, err)
		case err != nil:
			c.fail(&c.errs.Read, err)
		default:
			c.requests++
			c.bytes += int64(size)
			c.latencies = append(c.latencies, time.Since(start))
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			f.Close()
			f = nil
		}
	}
}

// flowHoldCheck is the check of a held flow: one datagram echoed.
func flowHoldCheck(f flow) error {
	return echoDatagram(f, make([]byte, 16), make([]byte, 64), 1, 10*time.Second)
}
