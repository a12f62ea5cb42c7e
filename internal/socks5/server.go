package socks5

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// Access decides whether a request may proceed; *acl.Policy implements
// it.
type Access interface {
	// Decide decides r; see acl.Policy.Decide.
	Decide(r acl.Request) acl.Decision
}

// Limiter enforces the limits that depend on what a client says: failed
// authentications, connections per user, users' byte rates, and the end
// of connections handed to the tunnel engine.
type Limiter interface {
	// AuthFailed records a failed username/password from client; the
	// connection is closed in any case, and a cool-down is enforced when
	// the client connects again.
	AuthFailed(client netip.Addr) time.Duration
	// UserConn counts the connection as user's; false refuses it with
	// "not allowed". Each true is matched by one UserDone.
	UserConn(user string) bool
	// UserDone ends a count UserConn made.
	UserDone(user string)
	// Throttle returns user's byte bucket, or nil when user's bytes are
	// not paced.
	Throttle(user string) *limits.Bucket
	// Handoff is called before client is handed to the tunnel engine; the
	// function it returns (nil = none) is called once the tunnel ends.
	Handoff(client net.Conn) func()
}

// Config configures a Server.
type Config struct {
	// Auth checks RFC 1929 user names and passwords. nil means no
	// authentication: "no authentication required" (0x00) is the only
	// method offered, and SOCKS4 is served. When set, username/password
	// (0x02) is the only method offered and SOCKS4 is refused.
	Auth *auth.Authenticator
	// Dialer dials upstreams; required.
	Dialer *dialer.Dialer
	// Access decides each CONNECT (before it is dialed, and each address
	// it resolves to) and each UDP datagram's destination; a refused
	// CONNECT gets "not allowed" (0x02, SOCKS4 0x5B) and a refused
	// datagram is dropped. nil allows everything.
	Access Access
	// Limiter enforces authentication-failure, per-user and byte-rate
	// limits; nil = none.
	Limiter Limiter
	// HandshakeTimeout bounds the handshake: every read and write from the
	// connection's first byte to the request's reply (the upstream dial,
	// bounded by the Dialer, aside). 0 means 30s.
	HandshakeTimeout time.Duration
	// UDPIdleTimeout ends a UDP association that relayed no datagram in
	// either direction for this long. 0 means 60s.
	UDPIdleTimeout time.Duration
	// TunnelIdleTimeout ends a paced user's tunnel (relayed by goroutines
	// rather than the engine) that moved no byte for this long. 0 means
	// 1h.
	TunnelIdleTimeout time.Duration
	// SocketBufferBytes sets SO_SNDBUF and SO_RCVBUF on client sockets;
	// 0 leaves the kernel's autotuning alone.
	SocketBufferBytes int
	// Logger receives connection-level events at debug level; nil
	// discards them.
	Logger *slog.Logger
	// Listener names the listener in access log records; "" = none.
	Listener string
	// Metrics counts this listener's tunnels, bytes and refusals; nil =
	// none. SOCKS replies count as request classes: success 2xx, not
	// allowed 4xx, failures 5xx.
	Metrics *metrics.ListenerMetrics
	// AccessLog receives one record per CONNECT (when its tunnel ends, or
	// when it is refused) and per UDP ASSOCIATE (when the association
	// ends, with the relay's address as target and the datagram payload
	// bytes relayed), with the SOCKS reply code as status; nil = none.
	AccessLog *accesslog.Logger
}

// Defaults for zero Config fields.
const (
	defaultHandshakeTimeout = 30 * time.Second
	defaultUDPIdleTimeout   = 60 * time.Second
)

// bufSize is the handshake buffer of a connection: it holds the longest
// message (an RFC 1929 request, 513 bytes; a SOCKS4a request, 520) with
// room for bytes the client sends ahead.
const bufSize = 1024

// Server serves SOCKS5, SOCKS4 and SOCKS4a connections. It is safe for
// concurrent use by many connections. Create one with New.
type Server struct {
	cfg   Config
	log   *slog.Logger
	conns sync.Pool // *conn, reused across client connections
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	if cfg.UDPIdleTimeout <= 0 {
		cfg.UDPIdleTimeout = defaultUDPIdleTimeout
	}
	if cfg.TunnelIdleTimeout <= 0 {
		cfg.TunnelIdleTimeout = time.Hour
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log}
	s.conns.New = func() any { return new(conn) }
	return s
}

// conn is one client connection during its handshake. It is used by one
// goroutine at a time.
type conn struct {
	c        *net.TCPConn
	buf      [bufSize]byte // bytes read and not yet parsed are buf[r:w]
	r, w     int
	out      [4 + 16 + 2]byte // a reply being written
	client   netip.Addr       // the client's address
	clientAP netip.AddrPort   // the client's address and port
	user     string           // the authenticated user; "" none
	limUser  string           // the user counted with Limiter.UserConn; "" none
	decision acl.Decision     // the current CONNECT's access decision
}

// errBufferFull means a message did not fit the handshake buffer, which
// the message size limits rule out.
var errBufferFull = errors.New("socks5: handshake message too long")

// fill reads more bytes from the client into the buffer. It returns
// io.ErrUnexpectedEOF when the client closed before finishing a message.
func (cn *conn) fill() error {
	if cn.r > 0 {
		cn.w = copy(cn.buf[:], cn.buf[cn.r:cn.w])
		cn.r = 0
	}
	if cn.w == len(cn.buf) {
		return errBufferFull
	}
	n, err := cn.c.Read(cn.buf[cn.w:])
	cn.w += n
	switch {
	case n > 0:
		return nil
	case err == io.EOF || err == nil:
		return io.ErrUnexpectedEOF
	}
	return err
}

// read parses the next message with parse, reading more from the client
// while parse reports errShort. Any other parse error is returned with
// what parse returned, and the bytes it consumed are skipped.
func read[T any](cn *conn, parse func([]byte) (T, int, error)) (T, error) {
	for {
		v, n, err := parse(cn.buf[cn.r:cn.w])
		if err != errShort {
			cn.r += n
			return v, err
		}
		if err := cn.fill(); err != nil {
			return v, err
		}
	}
}

// write writes b to the client.
func (cn *conn) write(b []byte) error {
	_, err := cn.c.Write(b)
	return err
}

// reply5 writes a SOCKS5 reply.
func (cn *conn) reply5(rep byte, bnd netip.AddrPort) error {
	return cn.write(appendReply(cn.out[:0], rep, bnd))
}

// reply4 writes a SOCKS4 reply.
func (cn *conn) reply4(cd byte, bnd netip.AddrPort) error {
	return cn.write(appendSOCKS4Reply(cn.out[:0], cd, bnd))
}

// ServeConn serves one client connection: SOCKS5 when its first byte is 5,
// SOCKS4 or 4a when it is 4; any other first byte closes it. It returns
// once the handshake has failed, a CONNECT tunnel has been handed to eng,
// or a UDP association has ended. ServeConn owns c: it closes it or hands
// it to eng, which must not be nil.
//
// ctx is the connection's context: when it is done, a UDP association
// ends. A dial in progress is not cut short by it; a handshake is bounded
// by Config.HandshakeTimeout.
func (s *Server) ServeConn(ctx context.Context, c *net.TCPConn, eng *tunnel.Engine) {
	var client netip.AddrPort
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		client = ta.AddrPort()
	}
	s.ServeConnFrom(ctx, c, eng, client)
}

// ServeConnFrom is ServeConn for a client whose address is not c's peer:
// the one a PROXY protocol header gave. client is used for the access
// policy, the authentication-failure limits, logs and the access log,
// and its IP is the one a UDP association accepts datagrams from.
func (s *Server) ServeConnFrom(ctx context.Context, c *net.TCPConn, eng *tunnel.Engine, client netip.AddrPort) {
	if s.cfg.SocketBufferBytes > 0 {
		if rc, err := c.SyscallConn(); err == nil {
			dialer.SetBuffers(rc, s.cfg.SocketBufferBytes)
		}
	}
	cn := s.conns.Get().(*conn)
	cn.c, cn.r, cn.w = c, 0, 0
	cn.clientAP, cn.client = client, client.Addr().Unmap()
	if !s.serve(ctx, cn, eng) {
		c.Close()
	}
	if cn.limUser != "" {
		s.cfg.Limiter.UserDone(cn.limUser)
	}
	cn.c, cn.client, cn.clientAP, cn.user, cn.limUser, cn.decision = nil, netip.Addr{}, netip.AddrPort{}, "", "", acl.Decision{}
	s.conns.Put(cn)
}

// serve runs the handshake and reports whether c was handed to eng.
func (s *Server) serve(ctx context.Context, cn *conn, eng *tunnel.Engine) bool {
	cn.c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	if err := cn.fill(); err != nil {
		s.debug(ctx, cn, "socks5: read first byte", err)
		return false
	}
	switch cn.buf[0] {
	case version5:
		return s.serve5(ctx, cn, eng)
	case version4:
		return s.serve4(ctx, cn, eng)
	}
	s.debug(ctx, cn, "socks5: unknown protocol version", errVersion)
	return false
}

// serve5 runs a SOCKS5 handshake from the greeting on.
func (s *Server) serve5(ctx context.Context, cn *conn, eng *tunnel.Engine) bool {
	g, err := read(cn, parseGreeting)
	if err != nil {
		s.debug(ctx, cn, "socks5: read greeting", err)
		return false
	}
	method := s.selectMethod(g.methods)
	if err := cn.write(append(cn.out[:0], version5, method)); err != nil {
		s.debug(ctx, cn, "socks5: write method selection", err)
		return false
	}
	if method == methodNoAcceptable {
		s.debug(ctx, cn, "socks5: no acceptable authentication method", nil)
		return false
	}
	if method == methodUserPass && !s.authenticate(ctx, cn) {
		return false
	}
	userOK := true
	if s.cfg.Limiter != nil && cn.user != "" {
		if userOK = s.cfg.Limiter.UserConn(cn.user); userOK {
			cn.limUser = cn.user
		}
	}

	req, err := read(cn, parseRequest)
	switch {
	case err == errAddrType:
		cn.reply5(repAddrTypeNotSupport, netip.AddrPort{})
		s.debug(ctx, cn, "socks5: read request", err)
		return false
	case err != nil && err != errBadHost && err != errUnspecified:
		s.debug(ctx, cn, "socks5: read request", err)
		return false
	}
	if !userOK && (req.cmd == cmdConnect || req.cmd == cmdAssociate) {
		cn.reply5(repNotAllowed, netip.AddrPort{})
		s.debug(ctx, cn, "socks5: too many connections for the user", nil, slog.String("user", cn.user))
		return false
	}
	switch req.cmd {
	case cmdConnect:
		if err != nil {
			cn.reply5(repHostUnreachable, netip.AddrPort{})
			s.debug(ctx, cn, "socks5: connect", err, slog.Any("target", req.dst))
			return false
		}
		return s.connect(ctx, cn, req.dst, eng, false)
	case cmdAssociate:
		// DST.ADDR is only a hint of the client's UDP source address.
		s.associate(ctx, cn, req.dst)
		return false
	}
	cn.reply5(repCmdNotSupported, netip.AddrPort{})
	s.debug(ctx, cn, "socks5: command not supported", nil, slog.Int("command", int(req.cmd)))
	return false
}

// selectMethod picks the authentication method for a greeting's methods:
// username/password when the server has an authenticator, none otherwise,
// or methodNoAcceptable when the client does not offer it.
func (s *Server) selectMethod(methods []byte) byte {
	want := byte(methodNoAuth)
	if s.cfg.Auth != nil {
		want = methodUserPass
	}
	if bytes.IndexByte(methods, want) >= 0 {
		return want
	}
	return methodNoAcceptable
}

// authenticate runs the RFC 1929 sub-negotiation and reports whether the
// client may go on.
func (s *Server) authenticate(ctx context.Context, cn *conn) bool {
	up, err := read(cn, parseUserPass)
	if err != nil {
		if err == errAuthVersion {
			cn.write(append(cn.out[:0], userPassVersion, userPassFailure))
		}
		s.debug(ctx, cn, "socks5: read username/password", err)
		return false
	}
	user, ok := s.cfg.Auth.CheckUserPassword(up.user, up.pass)
	status := byte(userPassOK)
	if !ok {
		status = userPassFailure
		s.cfg.Metrics.AuthFailed()
		if s.cfg.Limiter != nil {
			s.cfg.Limiter.AuthFailed(cn.client)
		}
	}
	if err := cn.write(append(cn.out[:0], userPassVersion, status)); err != nil {
		s.debug(ctx, cn, "socks5: write authentication status", err)
		return false
	}
	if !ok {
		s.debug(ctx, cn, "socks5: authentication failed", nil)
		return false
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.LogAttrs(ctx, slog.LevelDebug, "socks5: authenticated", slog.String("user", user),
			slog.String("client", cn.clientAP.String()))
	}
	cn.user = user
	return true
}

// serve4 runs a SOCKS4 or SOCKS4a handshake.
func (s *Server) serve4(ctx context.Context, cn *conn, eng *tunnel.Engine) bool {
	req, err := read(cn, parseSOCKS4)
	switch {
	case err == errVersion || err == errUserIDTooBig:
		cn.reply4(socks4Rejected, netip.AddrPort{})
		s.debug(ctx, cn, "socks5: read socks4 request", err)
		return false
	case err != nil && err != errBadHost && err != errUnspecified:
		s.debug(ctx, cn, "socks5: read socks4 request", err)
		return false
	case s.cfg.Auth != nil:
		cn.reply4(socks4Rejected, netip.AddrPort{})
		s.debug(ctx, cn, "socks5: socks4 refused: the listener requires authentication", nil)
		return false
	case req.cmd != cmdConnect:
		cn.reply4(socks4Rejected, netip.AddrPort{})
		s.debug(ctx, cn, "socks5: socks4 command not supported", nil, slog.Int("command", int(req.cmd)))
		return false
	case err != nil:
		cn.reply4(socks4Rejected, netip.AddrPort{})
		s.debug(ctx, cn, "socks5: socks4 connect", err, slog.Any("target", req.dst))
		return false
	}
	return s.connect(ctx, cn, req.dst, eng, true)
}

// decide asks the Access policy about a CONNECT to dst and records the
// decision for the dial. It reports whether the request may proceed,
// logging a refusal at debug level with the rule that made it.
func (s *Server) decide(ctx context.Context, cn *conn, dst addr, proto acl.Protocol) bool {
	if s.cfg.Access == nil {
		return true
	}
	cn.decision = s.cfg.Access.Decide(acl.Request{
		Client: cn.client, User: cn.user, Host: dst.host, Addr: dst.ip, Port: dst.port,
		Method: "CONNECT", Protocol: proto,
	})
	if cn.decision.Allow {
		return true
	}
	s.debug(ctx, cn, "socks5: access denied", nil, slog.Any("target", dst), slog.String("user", cn.user),
		slog.String("rule", cn.decision.Rule))
	return false
}

// permitter returns what the dialer checks resolved addresses with: the
// request's decision, or nil without an Access policy.
func (s *Server) permitter(cn *conn) dialer.Permitter {
	if s.cfg.Access == nil {
		return nil
	}
	return &cn.decision
}

// connect dials dst, replies (in SOCKS4 form when v4 is set) and hands the
// client and upstream connections to eng. It reports whether it did.
func (s *Server) connect(ctx context.Context, cn *conn, dst addr, eng *tunnel.Engine, v4 bool) bool {
	reply := func(rep byte, bnd netip.AddrPort) error {
		cn.c.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
		if v4 {
			cd := byte(socks4Granted)
			if rep != repSucceeded {
				cd = socks4Rejected
			}
			return cn.reply4(cd, bnd)
		}
		return cn.reply5(rep, bnd)
	}
	if eng == nil {
		reply(repGeneralFailure, netip.AddrPort{})
		s.log.Error("socks5: no tunnel engine for a CONNECT")
		return false
	}
	proto := acl.SOCKS5
	if v4 {
		proto = acl.SOCKS4
	}
	obs := s.observe(cn, dst)
	if !s.decide(ctx, cn, dst, proto) {
		reply(repNotAllowed, netip.AddrPort{})
		s.cfg.Metrics.ACLDenied()
		obs(repNotAllowed, netip.AddrPort{}, 0, 0, cn.decision.Rule)
		return false
	}
	upc, err := s.cfg.Dialer.DialPermit(context.WithoutCancel(ctx), dst.String(), s.permitter(cn))
	if err != nil {
		reply(dialReply(err), netip.AddrPort{})
		obs(dialReply(err), netip.AddrPort{}, 0, 0, cn.decision.Rule)
		s.debug(ctx, cn, "socks5: connect", err, slog.Any("target", dst), slog.String("rule", cn.decision.Rule))
		return false
	}
	bnd := upc.LocalAddr().(*net.TCPAddr).AddrPort()
	if err := reply(repSucceeded, bnd); err != nil {
		upc.Close()
		s.debug(ctx, cn, "socks5: write reply", err)
		return false
	}
	if rest := cn.buf[cn.r:cn.w]; len(rest) > 0 {
		// Bytes the client sent right behind its request belong to
		// the tunnel.
		upc.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
		if _, err := upc.Write(rest); err != nil {
			upc.Close()
			s.debug(ctx, cn, "socks5: write early data upstream", err)
			return false
		}
		upc.SetWriteDeadline(time.Time{})
		cn.r = cn.w
	}
	cn.c.SetDeadline(time.Time{})
	lim := s.cfg.Limiter
	if lim != nil {
		if bucket := lim.Throttle(cn.user); bucket != nil {
			// A paced user's tunnel is relayed by goroutines that can
			// wait; ServeConn returns when it ends.
			limits.RelayPaced(ctx, cn.c, upc, bucket, s.cfg.TunnelIdleTimeout)
			upc.Close()
			obs(repSucceeded, netip.AddrPort{}, 0, 0, cn.decision.Rule)
			return false
		}
	}
	var logDone func(tunnel.Result)
	upAddr := upc.RemoteAddr().(*net.TCPAddr).AddrPort()
	rule := cn.decision.Rule // cn is reused before the tunnel ends
	s.cfg.Metrics.TunnelOpened()
	if s.log.Enabled(ctx, slog.LevelDebug) {
		client, target := cn.clientAP.String(), dst.String()
		logDone = func(r tunnel.Result) {
			obs(repSucceeded, upAddr, r.Up, r.Down, rule)
			s.log.LogAttrs(context.Background(), slog.LevelDebug, "socks5: tunnel closed",
				slog.String("client", client), slog.String("target", target),
				slog.Int64("up", r.Up), slog.Int64("down", r.Down), slog.Any("err", r.Err))
		}
	} else if s.cfg.Metrics != nil || s.cfg.AccessLog != nil {
		logDone = func(r tunnel.Result) { obs(repSucceeded, upAddr, r.Up, r.Down, rule) }
	}
	done := logDone
	if lim != nil {
		// The tunnel outlives ServeConn: it carries the connection's
		// counts until it ends.
		release, user := lim.Handoff(cn.c), cn.limUser
		cn.limUser = ""
		if release != nil || user != "" {
			done = func(r tunnel.Result) {
				if logDone != nil {
					logDone(r)
				}
				if user != "" {
					lim.UserDone(user)
				}
				if release != nil {
					release()
				}
			}
		}
	}
	if err := eng.Add(cn.c, upc, done); err != nil {
		s.debug(ctx, cn, "socks5: hand tunnel to engine", err)
		if done != nil {
			done(tunnel.Result{Err: err})
		}
	}
	return true
}

// observe returns the function that reports a CONNECT to dst with reply
// code rep (and the ACL rule that decided it) to the metrics and the
// access log; it does nothing when neither is configured. It copies what
// it needs from cn now, as cn is reused before a tunnel ends.
func (s *Server) observe(cn *conn, dst addr) func(rep byte, upstream netip.AddrPort, up, down int64, rule string) {
	if s.cfg.Metrics == nil && s.cfg.AccessLog == nil {
		return func(byte, netip.AddrPort, int64, int64, string) {}
	}
	start := time.Now()
	rec := accesslog.Record{
		Time: start, Listener: s.cfg.Listener, User: cn.user,
		Protocol: accesslog.ProtoSOCKS5, Method: "CONNECT", Target: dst.String(),
	}
	rec.Client = cn.clientAP
	return func(rep byte, upstream netip.AddrPort, up, down int64, rule string) {
		s.cfg.Metrics.Request(replyClass(rep), up, down) // counts the bytes too
		if s.cfg.AccessLog != nil {
			r := rec
			r.Status, r.Upstream, r.BytesUp, r.BytesDown = int(rep), upstream, up, down
			r.Duration = time.Since(start)
			r.Rule = rule
			s.cfg.AccessLog.Log(&r)
		}
	}
}

// replyClass maps a SOCKS5 reply code to the HTTP status whose class the
// request metrics count it in.
func replyClass(rep byte) int {
	switch rep {
	case repSucceeded:
		return 200
	case repNotAllowed:
		return 403
	case repTTLExpired:
		return 504
	case repCmdNotSupported, repAddrTypeNotSupport:
		return 501
	}
	return 502
}

// dialReply returns the SOCKS5 reply code for a failed dial.
func dialReply(err error) byte {
	var dnsErr *net.DNSError
	var de *dialer.Error
	switch {
	case errors.As(err, &de) && de.Forbidden:
		return repNotAllowed
	case errors.As(err, &dnsErr):
		return repHostUnreachable
	case errors.As(err, &de) && de.Timeout, errors.Is(err, syscall.ETIMEDOUT):
		return repTTLExpired
	case errors.Is(err, syscall.ECONNREFUSED):
		return repConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return repNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH):
		return repHostUnreachable
	}
	return repGeneralFailure
}

// aLongTimeAgo is a deadline in the past, which makes a blocked read
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// associate serves UDP ASSOCIATE: it binds a relay socket on the address
// the client connected to, replies with it, and relays until the control
// connection closes, the association is idle for the idle timeout, or
// ctx is done. hint is the request's DST: its port, when not 0 and the
// address is the client's or unspecified, is the only source port
// accepted.
func (s *Server) associate(ctx context.Context, cn *conn, hint addr) {
	local := cn.c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	client := netip.AddrPortFrom(cn.client, 0)
	if hint.host == "" && hint.port != 0 && (hint.ip == client.Addr() || hint.ip.IsUnspecified()) {
		client = netip.AddrPortFrom(client.Addr(), hint.port)
	}
	var start time.Time
	if s.cfg.Metrics != nil || s.cfg.AccessLog != nil {
		start = time.Now()
	}
	a, err := newAssociation(local, client, s.cfg.UDPIdleTimeout, s.log)
	if err == nil {
		a.access, a.dialer, a.user = s.cfg.Access, s.cfg.Dialer, cn.user
	}
	if err != nil {
		cn.reply5(repGeneralFailure, netip.AddrPort{})
		s.observeUDP(cn, start, repGeneralFailure, nil)
		s.log.Warn("socks5: udp associate failed", "err", err)
		return
	}
	defer a.conn.Close()
	if err := cn.reply5(repSucceeded, a.addr()); err != nil {
		s.observeUDP(cn, start, repSucceeded, a)
		s.debug(ctx, cn, "socks5: write reply", err)
		return
	}
	cn.c.SetDeadline(time.Time{})

	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.relayUDP(actx, cn, a) })
	c := cn.c // the AfterFunc may still run after stop, when cn is reused
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(aLongTimeAgo) })
	// Nothing more is expected on the control connection; whatever comes is
	// discarded until it closes.
	for {
		if _, err := cn.c.Read(cn.buf[:]); err != nil {
			break
		}
	}
	stop()
	cancel()
	a.conn.Close() // ends relay
	wg.Wait()
	s.observeUDP(cn, start, repSucceeded, a)
}

// observeUDP reports a UDP ASSOCIATE, started at start and answered with
// reply code rep, to the metrics and the access log once it has ended; a
// is its association, nil when no relay socket was bound. a's relay must
// have returned. It does nothing when neither is configured.
func (s *Server) observeUDP(cn *conn, start time.Time, rep byte, a *association) {
	if s.cfg.Metrics == nil && s.cfg.AccessLog == nil {
		return
	}
	var up, down int64
	if a != nil {
		up, down = a.up, a.down
	}
	// Request adds the bytes too.
	s.cfg.Metrics.Request(replyClass(rep), up, down)
	if s.cfg.AccessLog == nil {
		return
	}
	r := accesslog.Record{
		Time: start, Listener: s.cfg.Listener, Client: cn.clientAP, User: cn.user,
		Protocol: accesslog.ProtoSOCKS5UDP, Method: "UDP ASSOCIATE",
		Status: int(rep), BytesUp: up, BytesDown: down, Duration: time.Since(start),
	}
	if a != nil {
		r.Target, r.Rule = a.addr().String(), a.decision.Rule
	}
	s.cfg.AccessLog.Log(&r)
}

// relayUDP runs an association's relay until it ends, then wakes the
// control connection's reader so that associate tears the rest down.
func (s *Server) relayUDP(ctx context.Context, cn *conn, a *association) {
	err := a.relay(ctx)
	cn.c.SetReadDeadline(aLongTimeAgo)
	s.debug(ctx, cn, "socks5: udp association ended", err)
}

// debug logs a failed or finished step of a connection at debug level.
func (s *Server) debug(ctx context.Context, cn *conn, msg string, err error, attrs ...slog.Attr) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs = append(attrs, slog.String("client", cn.clientAP.String()))
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, msg, attrs...)
}
