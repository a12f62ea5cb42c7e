package socks5

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// Config configures a Server: the wire settings. Who may connect where,
// and what is counted and logged, is the session's [gate.Policy].
type Config struct {
	// HandshakeTimeout bounds the handshake: every read and write from the
	// connection's first byte to the request's reply (the upstream dial,
	// bounded by the Dialer, aside); 0 = no limit (the configuration
	// always sets one).
	HandshakeTimeout time.Duration
	// UDPIdleTimeout ends a UDP association that relayed no datagram in
	// either direction for this long; 0 = no limit, the association then
	// ends only with its control connection or the session (the
	// configuration always sets one).
	UDPIdleTimeout time.Duration
	// SocketBufferBytes sets SO_SNDBUF and SO_RCVBUF on client sockets;
	// 0 leaves the kernel's autotuning alone.
	SocketBufferBytes int
	// Logger receives connection-level events at debug level; nil
	// discards them.
	Logger *slog.Logger
}

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

// New returns a Server for cfg. It fills in no defaults: a zero timeout
// arms no deadline.
func New(cfg Config) *Server {
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
	c      *net.TCPConn
	sess   *gate.Session
	buf    [bufSize]byte // bytes read and not yet parsed are buf[r:w]
	r, w   int
	out    [4 + 16 + 2]byte // a reply being written
	target []byte           // the request's destination as the access log shows it
	grant  gate.Grant       // the request's passage through the policy
	// then is what ServeConnThen was given: called once the connection
	// has ended when its intercepted tunnel went on without the
	// goroutine that served it (held); nil = it is served on the
	// caller's goroutine throughout.
	then func()
	// held says the connection's tunnel is intercepted and goes on
	// without the goroutine that served it, and without the conn
	// (intercept).
	held bool
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

// ServeConn serves one client connection of sess: SOCKS5 when its first
// byte is 5, SOCKS4 or 4a when it is 4; any other first byte closes it.
// It returns once the handshake has failed or was refused, a CONNECT
// tunnel has ended or been handed to the session's tunnel engine, or a UDP
// association has ended. ServeConn owns c: it closes it or hands it to the
// engine. It does not close sess; the caller does once it returns.
//
// The session's policy decides: username/password (RFC 1929) is the only
// method offered when it requires authentication, and SOCKS4 is then
// refused; "no authentication required" is the only one otherwise. When
// sess's context is done (shutdown, or the user's revocation) a UDP
// association ends; a dial in progress is not cut short by it, and a
// handshake is bounded by Config.HandshakeTimeout.
func (s *Server) ServeConn(c *net.TCPConn, sess *gate.Session) {
	s.ServeConnThen(c, sess, nil)
}

// ServeConnThen is ServeConn, except that with then set a CONNECT
// tunnel that is intercepted goes on without the calling goroutine
// (gate.Grant.InterceptThen), with none while it is idle between
// requests: ServeConnThen then reports true, and calls then once the
// connection has ended, on another goroutine or before it returns; sess
// must stay open until then. When it reports false the connection has
// been served, and then has not been called.
func (s *Server) ServeConnThen(c *net.TCPConn, sess *gate.Session, then func()) bool {
	if s.cfg.SocketBufferBytes > 0 {
		if rc, err := c.SyscallConn(); err == nil {
			dialer.SetBuffers(rc, s.cfg.SocketBufferBytes)
		}
	}
	cn := s.conns.Get().(*conn)
	cn.c, cn.sess, cn.r, cn.w, cn.then = c, sess, 0, 0, then
	if !s.serve(cn) {
		c.Close()
	}
	cn.grant.Finish(0, 0) // a no-op unless a path left it open
	held := cn.held
	cn.c, cn.sess, cn.grant, cn.then, cn.held = nil, nil, gate.Grant{}, nil, false
	s.conns.Put(cn)
	return held
}

// intercept hands a CONNECT whose tunnel is to be intercepted
// (gate.Grant.Intercepting), answered, to the policy's Interceptor, with
// first, the bytes the client sent into the tunnel so far (its
// ClientHello). Served with a continuation (ServeConnThen), the
// interception goes on without this goroutine and without the conn:
// it takes the client connection, then, and the grant, moved out of the
// conn, which it finishes (held says so). It reports true: the client
// connection was handed off.
func (cn *conn) intercept(first []byte) bool {
	cn.r = cn.w
	if cn.then == nil {
		cn.grant.Intercept(cn.c, first)
		return true
	}
	g := new(gate.Grant)
	*g, cn.grant = cn.grant, gate.Grant{}
	cn.held = g.InterceptThen(cn.c, first, cn.then)
	return true
}

// serve runs the handshake and reports whether c was handed to the
// session's tunnel engine.
func (s *Server) serve(cn *conn) bool {
	cn.c.SetDeadline(s.handshakeDeadline())
	if err := cn.fill(); err != nil {
		s.debug(cn, "socks5: read first byte", err)
		return false
	}
	if wait := cn.sess.CoolingDown(); wait > 0 {
		s.debug(cn, "socks5: client cooling down after failed authentications", nil,
			slog.Duration("retry_after", wait))
		return false
	}
	switch cn.buf[0] {
	case version5:
		return s.serve5(cn)
	case version4:
		return s.serve4(cn)
	}
	refuseNotSOCKS(cn)
	return false
}

// refuseNotSOCKS refuses a client whose first byte is no SOCKS version,
// and logs it (the access log with the reason not-socks, and the
// refusal's debug line): one that looks like an HTTP request (its first
// byte a capital letter, as a method's: an http:// proxy URL for a SOCKS
// port) is answered 400 in HTTP, saying what the port speaks; anything
// else is closed unanswered.
func refuseNotSOCKS(cn *conn) {
	first := cn.buf[0]
	http := 'A' <= first && first <= 'Z'
	status := 0
	if http {
		status = 400
	}
	cn.sess.Reject(&gate.Request{}, &cn.grant, status, accesslog.ReasonNotSOCKS,
		fmt.Errorf("%w: first byte %#02x, plain HTTP %v", errVersion, first, http))
	if http {
		http1.RefuseAndClose(cn.c, "this port speaks SOCKS5 and SOCKS4: use a socks5:// (or socks5h://) URL for this proxy")
	}
}

// serve5 runs a SOCKS5 handshake from the greeting on.
func (s *Server) serve5(cn *conn) bool {
	g, err := read(cn, parseGreeting)
	if err != nil {
		s.debug(cn, "socks5: read greeting", err)
		return false
	}
	method := s.selectMethod(cn, g.methods)
	if err := cn.write(append(cn.out[:0], version5, method)); err != nil {
		s.debug(cn, "socks5: write method selection", err)
		return false
	}
	if method == methodNoAcceptable {
		if cn.sess.Policy().RequiresAuth() {
			// No username/password offered: logged as a request refused
			// for missing credentials, before any request was read.
			g := &cn.grant
			cn.sess.NoCredentials(&gate.Request{Protocol: acl.SOCKS5, Log: accesslog.ProtoSOCKS5}, g)
			g.Answer(methodNoAcceptable, gate.NeedAuth.Status())
			g.Finish(0, 0)
		}
		s.debug(cn, "socks5: no acceptable authentication method", nil)
		return false
	}
	if method == methodUserPass && !s.authenticate(cn) {
		return false
	}

	req, err := read(cn, parseRequest)
	switch {
	case err == errAddrType:
		cn.reply5(repAddrTypeNotSupport, netip.AddrPort{})
		s.debug(cn, "socks5: read request", err)
		return false
	case err != nil && err != errBadHost && err != errUnspecified:
		s.debug(cn, "socks5: read request", err)
		return false
	}
	switch req.cmd {
	case cmdConnect:
		if err != nil {
			cn.reply5(repHostUnreachable, netip.AddrPort{})
			s.debug(cn, "socks5: connect", err, slog.Any("target", req.dst))
			return false
		}
		return s.connect(cn, req.dst, false)
	case cmdAssociate:
		// DST.ADDR is only a hint of the client's UDP source address.
		s.associate(cn, req.dst)
		return false
	}
	cn.reply5(repCmdNotSupported, netip.AddrPort{})
	s.debug(cn, "socks5: command not supported", nil, slog.Int("command", int(req.cmd)))
	return false
}

// selectMethod picks the authentication method for a greeting's methods:
// username/password when the policy requires authentication, none
// otherwise, or methodNoAcceptable when the client does not offer it.
func (s *Server) selectMethod(cn *conn, methods []byte) byte {
	want := byte(methodNoAuth)
	if cn.sess.Policy().RequiresAuth() {
		want = methodUserPass
	}
	if bytes.IndexByte(methods, want) >= 0 {
		return want
	}
	return methodNoAcceptable
}

// authenticate runs the RFC 1929 sub-negotiation and reports whether the
// client may go on. A failed login is answered with the failure status,
// logged as a SOCKS5 exchange without a method or target whose status is
// that status byte (1), and closes the connection; one refused because
// the client's address cools down, and not by the failure that started
// it, is closed unanswered (status 0).
func (s *Server) authenticate(cn *conn) bool {
	up, err := read(cn, parseUserPass)
	if err != nil {
		if err == errAuthVersion {
			cn.write(append(cn.out[:0], userPassVersion, userPassFailure))
		}
		s.debug(cn, "socks5: read username/password", err)
		return false
	}
	g := &cn.grant
	user, kind := cn.sess.Login(up.user, up.pass, g)
	if kind == gate.CoolingDown && g.AddressCooling() {
		// No RFC 1929 status says "cooling down": closed unanswered,
		// as the address's new connections are (see serve).
		g.AnswerNothing()
		g.Finish(0, 0)
		s.debug(cn, "socks5: login closed unanswered: the client's address cools down", nil,
			slog.Duration("retry_after", g.RetryAfter))
		return false
	}
	status := byte(userPassOK)
	if kind != gate.OK {
		status = userPassFailure
		g.Answer(int(status), kind.Status())
		defer g.Finish(0, 0)
	}
	if err := cn.write(append(cn.out[:0], userPassVersion, status)); err != nil {
		s.debug(cn, "socks5: write authentication status", err)
		return false
	}
	if kind != gate.OK {
		s.debug(cn, "socks5: authentication failed", nil, slog.String("outcome", kind.String()))
		return false
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.LogAttrs(context.Background(), slog.LevelDebug, "socks5: authenticated", slog.String("user", user),
			slog.String("client", cn.sess.Client().String()))
	}
	return true
}

// serve4 runs a SOCKS4 or SOCKS4a handshake.
func (s *Server) serve4(cn *conn) bool {
	req, err := read(cn, parseSOCKS4)
	switch {
	case err == errVersion || err == errUserIDTooBig:
		cn.reply4(socks4Rejected, netip.AddrPort{})
		s.debug(cn, "socks5: read socks4 request", err)
		return false
	case err != nil && err != errBadHost && err != errUnspecified:
		s.debug(cn, "socks5: read socks4 request", err)
		return false
	case cn.sess.Policy().RequiresAuth():
		cn.target = append(cn.target[:0], req.dst.String()...)
		g := &cn.grant
		cn.sess.NoCredentials(&gate.Request{
			Protocol: acl.SOCKS4, Log: accesslog.ProtoSOCKS4, Method: socks4Method(req.cmd),
			Host: req.dst.host, Addr: req.dst.ip, Port: req.dst.port, Target: cn.target,
		}, g)
		cn.reply4(socks4Rejected, netip.AddrPort{})
		g.Answer(socks4Rejected, gate.NeedAuth.Status())
		g.Finish(0, 0)
		s.debug(cn, "socks5: socks4 refused: the listener requires authentication", nil)
		return false
	case req.cmd != cmdConnect:
		cn.reply4(socks4Rejected, netip.AddrPort{})
		s.debug(cn, "socks5: socks4 command not supported", nil, slog.Int("command", int(req.cmd)))
		return false
	case err != nil:
		cn.reply4(socks4Rejected, netip.AddrPort{})
		s.debug(cn, "socks5: socks4 connect", err, slog.Any("target", req.dst))
		return false
	}
	return s.connect(cn, req.dst, true)
}

// connect authorizes a CONNECT to dst, dials it, replies (in SOCKS4 form
// when v4 is set) and relays the tunnel. It reports whether the tunnel was
// handed to the session's engine, which then owns the client connection.
func (s *Server) connect(cn *conn, dst addr, v4 bool) bool {
	reply := func(rep byte, bnd netip.AddrPort) error {
		cn.c.SetWriteDeadline(s.handshakeDeadline())
		if v4 {
			cd := byte(socks4Granted)
			if rep != repSucceeded {
				cd = socks4Rejected
			}
			return cn.reply4(cd, bnd)
		}
		return cn.reply5(rep, bnd)
	}
	proto, logProto := acl.SOCKS5, accesslog.ProtoSOCKS5
	if v4 {
		proto, logProto = acl.SOCKS4, accesslog.ProtoSOCKS4
	}
	target := dst.String()
	cn.target = append(cn.target[:0], target...)
	g := &cn.grant
	kind := cn.sess.Authorize(&gate.Request{
		Protocol: proto, Log: logProto, Method: "CONNECT",
		Host: dst.host, Addr: dst.ip, Port: dst.port, Target: cn.target,
	}, g)
	if kind != gate.OK {
		// Denied, UserLimit; NeedAuth and CoolingDown cannot come after a
		// login, nor on a listener without authentication.
		reply(repNotAllowed, netip.AddrPort{})
		g.Answer(repNotAllowed, replyClass(repNotAllowed))
		g.Finish(0, 0)
		s.debug(cn, "socks5: connect refused", nil, slog.String("target", target),
			slog.String("outcome", kind.String()), slog.String("rule", g.Rule))
		return false
	}
	if g.NeedsHello() {
		h, _, err := sni.Parse(cn.buf[cn.r:cn.w])
		if err == sni.ErrShort {
			return s.helloFirst(cn, target, reply)
		}
		// The client sent its hello behind the request without waiting
		// for the reply: decided before it.
		if k := g.CheckHello(h, err); k != gate.OK {
			reply(repNotAllowed, netip.AddrPort{})
			g.Answer(repNotAllowed, replyClass(repNotAllowed))
			g.Finish(0, 0)
			s.debug(cn, "socks5: connect refused by the SNI check", nil, slog.String("target", target),
				slog.String("sni", g.SNI()))
			return false
		}
		if g.Intercepting() {
			if err := reply(repSucceeded, netip.AddrPort{}); err != nil {
				g.Finish(0, 0) // nothing was answered: not reported
				s.debug(cn, "socks5: write reply", err)
				return false
			}
			g.Answer(repSucceeded, replyClass(repSucceeded))
			return cn.intercept(append([]byte(nil), cn.buf[cn.r:cn.w]...))
		}
	}
	upc, err := g.DialConn(context.WithoutCancel(cn.sess.Context()))
	if err != nil {
		rep := dialReply(err)
		reply(rep, netip.AddrPort{})
		g.Answer(int(rep), replyClass(rep))
		g.Finish(0, 0)
		s.debug(cn, "socks5: connect", err, slog.String("target", target), slog.String("rule", g.Rule))
		return false
	}
	var bnd netip.AddrPort
	if a, ok := upc.LocalAddr().(*net.TCPAddr); ok {
		bnd = a.AddrPort()
	}
	if err := reply(repSucceeded, bnd); err != nil {
		upc.Close()
		g.Finish(0, 0) // nothing was answered: not reported
		s.debug(cn, "socks5: write reply", err)
		return false
	}
	g.Answer(repSucceeded, replyClass(repSucceeded))
	if rest := cn.buf[cn.r:cn.w]; len(rest) > 0 {
		// Bytes the client sent right behind its request belong to
		// the tunnel.
		upc.SetWriteDeadline(s.handshakeDeadline())
		n, err := upc.Write(rest)
		g.AddBytes(int64(n), 0)
		if err != nil {
			upc.Close()
			g.Finish(0, 0)
			s.debug(cn, "socks5: write early data upstream", err)
			return false
		}
		cn.r = cn.w
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.debug(cn, "socks5: tunnel open", nil, slog.String("target", target), slog.String("user", g.User))
	}
	return g.Tunnel(cn.c, upc, nil)
}

// helloFirst serves a CONNECT whose ClientHello the SNI check reads
// before the dial (gate.Grant.NeedsHello): it replies success first,
// with an unspecified bound address (nothing is connected yet), as the
// client sends its hello only then; reads the hello (within the grant's
// HelloTimeout, at most sni.MaxBytes), decides it, and then dials and
// relays, the hello going to the origin first. A refusal, or a dial that
// fails, closes the connection: the client had its success reply, and
// the access log has the reason.
func (s *Server) helloFirst(cn *conn, target string, reply func(byte, netip.AddrPort) error) bool {
	g := &cn.grant
	if err := reply(repSucceeded, netip.AddrPort{}); err != nil {
		g.Finish(0, 0) // nothing was answered: not reported
		s.debug(cn, "socks5: write reply", err)
		return false
	}
	g.Answer(repSucceeded, replyClass(repSucceeded))
	hello := append([]byte(nil), cn.buf[cn.r:cn.w]...)
	cn.r = cn.w
	hello, k := g.ReadHello(cn.c, hello)
	if k != gate.OK {
		g.Finish(0, 0)
		s.debug(cn, "socks5: tunnel closed by the SNI check", nil, slog.String("target", target),
			slog.String("sni", g.SNI()), slog.String("outcome", k.String()))
		return false
	}
	if g.Intercepting() {
		return cn.intercept(hello)
	}
	upc, err := g.DialConn(context.WithoutCancel(cn.sess.Context()))
	if err != nil {
		g.Finish(0, 0)
		s.debug(cn, "socks5: connect after the SNI check", err, slog.String("target", target), slog.String("rule", g.Rule))
		return false
	}
	upc.SetWriteDeadline(s.handshakeDeadline())
	n, err := upc.Write(hello)
	g.AddBytes(int64(n), 0)
	if err != nil {
		upc.Close()
		g.Finish(0, 0)
		s.debug(cn, "socks5: write the ClientHello upstream", err)
		return false
	}
	return g.Tunnel(cn.c, upc, nil)
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

// dialReply returns the SOCKS5 reply code for a failed dial, from the
// one classification of dial errors (gate.DialKind): a destination not
// allowed, a timeout, or an unreachable upstream, which the cause refines
// into the replies RFC 1928 has for it: a name that did not resolve is
// host unreachable, a refused connection connection refused, and the
// network or host unreachable as the kernel said.
func dialReply(err error) byte {
	switch gate.DialKind(err) {
	case gate.Forbidden:
		return repNotAllowed
	case gate.TimedOut:
		return repTTLExpired
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return repHostUnreachable
	case errors.Is(err, syscall.ECONNREFUSED):
		return repConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return repNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH):
		return repHostUnreachable
	}
	return repGeneralFailure
}

// handshakeDeadline returns the deadline of a handshake step starting
// now: HandshakeTimeout from now, or none when it is 0.
func (s *Server) handshakeDeadline() time.Time {
	return gate.Deadline(time.Now(), s.cfg.HandshakeTimeout)
}

// aLongTimeAgo is a deadline in the past, which makes a blocked read
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// associate serves UDP ASSOCIATE: it binds a relay socket on the address
// the client connected to, authorizes the association, replies with the
// relay's address, and relays until the control connection closes, the
// association is idle for the idle timeout, or the session's context is
// done. hint is the request's DST: its port, when not 0 and the address
// is the client's or unspecified, is the only source port accepted. The
// association is reported once it has ended, as a tunnel whose bytes are
// the datagram payloads relayed; they are metered against the user's
// byte quota as they move, and the association ends (the control
// connection closed) once the quota is spent.
func (s *Server) associate(cn *conn, hint addr) {
	sess := cn.sess
	local := cn.c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	client := netip.AddrPortFrom(sess.ClientIP(), 0)
	if hint.host == "" && hint.port != 0 && (hint.ip == client.Addr() || hint.ip.IsUnspecified()) {
		client = netip.AddrPortFrom(client.Addr(), hint.port)
	}
	a, bindErr := newAssociation(local, client, s.cfg.UDPIdleTimeout, s.log)
	cn.target = cn.target[:0]
	if bindErr == nil {
		defer a.conn.Close()
		cn.target = a.addr().AppendTo(cn.target)
	}
	g := &cn.grant
	kind := sess.AuthorizeAssociation(&gate.Request{
		Protocol: acl.SOCKS5UDP, Log: accesslog.ProtoSOCKS5UDP, Method: "UDP ASSOCIATE",
		Host: hint.host, Addr: hint.ip, Port: hint.port, Target: cn.target,
	}, g)
	var rep byte
	switch {
	case kind != gate.OK:
		rep = repNotAllowed
		s.debug(cn, "socks5: udp associate refused", nil, slog.String("outcome", kind.String()))
	case bindErr != nil:
		rep = repGeneralFailure
		s.log.Warn("socks5: udp associate failed", "err", bindErr)
	}
	if rep != repSucceeded {
		cn.reply5(rep, netip.AddrPort{})
		g.Answer(int(rep), replyClass(rep))
		g.Finish(0, 0)
		return
	}
	a.grant = g
	g.Answer(repSucceeded, replyClass(repSucceeded))
	if err := cn.reply5(repSucceeded, a.addr()); err != nil {
		g.Finish(0, 0)
		s.debug(cn, "socks5: write reply", err)
		return
	}
	g.TunnelOpened()
	g.Meter() // a user with a byte quota: its datagrams are metered as they move
	cn.c.SetDeadline(time.Time{})

	ctx := sess.Context()
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
	g.Finish(a.up, a.down.Load())
}

// relayUDP runs an association's relay until it ends, then wakes the
// control connection's reader so that associate tears the rest down.
func (s *Server) relayUDP(ctx context.Context, cn *conn, a *association) {
	err := a.relay(ctx)
	cn.c.SetReadDeadline(aLongTimeAgo)
	s.debug(cn, "socks5: udp association ended", err)
}

// debug logs a failed or finished step of a connection at debug level.
func (s *Server) debug(cn *conn, msg string, err error, attrs ...slog.Attr) {
	if !s.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs = append(attrs, slog.String("client", cn.sess.Client().String()))
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	s.log.LogAttrs(context.Background(), slog.LevelDebug, msg, attrs...)
}
