package resolve

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// Transport is how a server is asked.
type Transport uint8

// The transports of a server URL's scheme.
const (
	// UDP is plain DNS over UDP (udp://host[:53]); a truncated answer is
	// asked again over TCP.
	UDP Transport = iota + 1
	// TCP is plain DNS over TCP (tcp://host[:53]).
	TCP
	// TLS is DNS over TLS, RFC 7858 (tls://host[:853]); the certificate
	// is verified for host.
	TLS
	// HTTPS is DNS over HTTPS, RFC 8484 (https://host[:443]/path), with
	// POST requests of type application/dns-message.
	HTTPS
)

// Server is one configured DNS server.
type Server struct {
	// Transport is how it is asked.
	Transport Transport
	// Addr is host:port of a UDP, TCP or TLS server; "" for HTTPS.
	Addr string
	// Host is the name the TLS certificate is verified for (TLS, HTTPS).
	Host string
	// URL is the DNS over HTTPS endpoint; "" for the others.
	URL string
	// Label names the server in metrics and logs: its URL without
	// credentials, query or fragment.
	Label string
}

// ParseServer parses a server URL: udp://host[:port], tcp://host[:port],
// tls://host[:port] (DNS over TLS) or https://host[:port]/path (DNS over
// HTTPS). An IPv6 host is bracketed. Userinfo is refused except in an
// https URL, where it is sent as Basic authorization and kept out of
// Label.
func ParseServer(s string) (Server, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Server{}, fmt.Errorf("resolve: resolver %q: %w", redact(s), err)
	}
	var srv Server
	port := ""
	switch u.Scheme {
	case "udp":
		srv.Transport, port = UDP, "53"
	case "tcp":
		srv.Transport, port = TCP, "53"
	case "tls":
		srv.Transport, port = TLS, "853"
	case "https":
		srv.Transport = HTTPS
	default:
		return Server{}, fmt.Errorf("resolve: resolver %q: scheme %q is not udp, tcp, tls or https", redact(s), u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return Server{}, fmt.Errorf("resolve: resolver %q has no host", redact(s))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return Server{}, fmt.Errorf("resolve: resolver %q: port %q is not a number from 1 to 65535", redact(s), p)
		}
	}
	srv.Host = host
	label := *u
	label.User, label.RawQuery, label.Fragment, label.ForceQuery = nil, "", "", false
	srv.Label = label.String()
	if srv.Transport == HTTPS {
		if u.Path == "" {
			return Server{}, fmt.Errorf("resolve: resolver %q: an https resolver needs its path, as in https://dns.example/dns-query", redact(s))
		}
		srv.URL = u.String()
		return srv, nil
	}
	if u.User != nil {
		return Server{}, fmt.Errorf("resolve: resolver %q: credentials are only for https resolvers", redact(s))
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Server{}, fmt.Errorf("resolve: resolver %q: a %s resolver is scheme://host[:port], without a path", redact(s), u.Scheme)
	}
	if p := u.Port(); p != "" {
		port = p
	}
	srv.Addr = net.JoinHostPort(host, port)
	return srv, nil
}

// redact returns a server URL without its password, for errors.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	if i := strings.Index(s, "@"); i >= 0 {
		return "…@" + s[i+1:]
	}
	return s
}

// exchanger asks servers; it holds what the transports share.
type exchanger struct {
	dialer net.Dialer
	tls    *tls.Config // roots for TLS and HTTPS servers
	http   *http.Client
}

func newExchanger(tlsCfg *tls.Config, mark uint32) *exchanger {
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	e := &exchanger{tls: tlsCfg}
	if mark != 0 {
		e.dialer.Control = func(_, _ string, rc syscall.RawConn) error { return dialer.SetMark(rc, mark) }
	}
	tr := &http.Transport{
		DialContext:         e.dialer.DialContext,
		TLSClientConfig:     tlsCfg.Clone(),
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	e.http = &http.Client{Transport: tr}
	return e
}

func (e *exchanger) close() { e.http.CloseIdleConnections() }

// maxMessage is the largest DNS message (over TCP, TLS, HTTPS).
const maxMessage = 65535

// exchange asks srv the question q and returns its answer. Over UDP,
// stray is called with the reason of each datagram that is no answer to
// q, which is ignored.
func (e *exchanger) exchange(ctx context.Context, srv *Server, q dnsmessage.Question, stray func(error)) (answer, error) {
	id := uint16(rand.Uint32())
	if srv.Transport == HTTPS {
		id = 0 // RFC 8484 §4.1: cache friendly
	}
	msg, err := buildQuery(make([]byte, 2, 512), id, q.Name, q.Type)
	if err != nil {
		return answer{}, fmt.Errorf("resolve: build query for %s: %w", q.Name, err)
	}
	msg = msg[2:] // room was kept for TCP's length prefix
	var resp []byte
	switch srv.Transport {
	case UDP:
		a, err := e.udp(ctx, srv.Addr, msg, id, q, stray)
		if !errors.Is(err, errTruncated) {
			return a, err
		}
		resp, err = e.stream(ctx, srv, msg)
		if err != nil {
			return answer{}, err
		}
	case TCP, TLS:
		resp, err = e.stream(ctx, srv, msg)
	case HTTPS:
		resp, err = e.https(ctx, srv, msg)
	}
	if err != nil {
		return answer{}, err
	}
	return parseAnswer(resp, id, srv.Transport != HTTPS, q)
}

// udp sends msg (the query with id for q) to addr and returns the answer
// to q, or errTruncated or an errRCode. Every other datagram (another
// ID, not a response, another question, malformed: a late answer or a
// spoof) is passed to stray and ignored, until ctx ends: a spoofer that
// knows the port and the ID cannot end the query before its answer.
func (e *exchanger) udp(ctx context.Context, addr string, msg []byte, id uint16, q dnsmessage.Question, stray func(error)) (answer, error) {
	c, err := e.dialer.DialContext(ctx, "udp", addr)
	if err != nil {
		return answer{}, fmt.Errorf("resolve: query %s: %w", addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(msg); err != nil {
		return answer{}, fmt.Errorf("resolve: query %s: %w", addr, err)
	}
	buf := make([]byte, ednsSize*2)
	strays := 0
	for {
		n, err := c.Read(buf)
		if err != nil {
			if strays > 0 {
				return answer{}, fmt.Errorf("resolve: query %s: %w (%d datagrams that were no answer ignored)", addr, err, strays)
			}
			return answer{}, fmt.Errorf("resolve: query %s: %w", addr, err)
		}
		var a answer
		if n >= 2 && binary.BigEndian.Uint16(buf) == id {
			a, err = parseAnswer(buf[:n], id, true, q)
			if isAnswer(err) {
				return a, err
			}
		} else {
			err = errors.New("resolve: response ID does not match the query")
		}
		strays++
		stray(err)
	}
}

// stream asks over TCP or TLS, one connection per query.
func (e *exchanger) stream(ctx context.Context, srv *Server, msg []byte) ([]byte, error) {
	var c net.Conn
	var err error
	if srv.Transport == TLS {
		cfg := e.tls.Clone()
		cfg.ServerName = srv.Host
		d := tls.Dialer{NetDialer: &e.dialer, Config: cfg}
		c, err = d.DialContext(ctx, "tcp", srv.Addr)
	} else {
		c, err = e.dialer.DialContext(ctx, "tcp", srv.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve: query %s: %w", srv.Label, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	out := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(out, uint16(len(msg)))
	copy(out[2:], msg)
	if _, err := c.Write(out); err != nil {
		return nil, fmt.Errorf("resolve: query %s: %w", srv.Label, err)
	}
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, fmt.Errorf("resolve: query %s: read length: %w", srv.Label, err)
	}
	resp := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, fmt.Errorf("resolve: query %s: read response: %w", srv.Label, err)
	}
	return resp, nil
}

// https asks a DNS over HTTPS server with a POST (RFC 8484 §4.1).
func (e *exchanger) https(ctx context.Context, srv *Server, msg []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader(msg))
	if err != nil {
		return nil, fmt.Errorf("resolve: query %s: %w", srv.Label, err)
	}
	req.Header.Set("Content-Type", "application/dns-message")
	req.Header.Set("Accept", "application/dns-message")
	resp, err := e.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry credentials
		}
		return nil, fmt.Errorf("resolve: query %s: %w", srv.Label, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("resolve: query %s: HTTP status %d", srv.Label, resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/dns-message") {
		return nil, fmt.Errorf("resolve: query %s: content type %q is not application/dns-message", srv.Label, ct)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage+1))
	if err != nil {
		return nil, fmt.Errorf("resolve: query %s: read response: %w", srv.Label, err)
	}
	if len(body) > maxMessage {
		return nil, fmt.Errorf("resolve: query %s: response larger than a DNS message", srv.Label)
	}
	return body, nil
}
