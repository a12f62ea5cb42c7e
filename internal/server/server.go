// Package server runs rustle from a configuration: with the parts that
// package wire builds from it (each listener's policy and front-ends,
// the upstream pool, the tunnel engines), it starts one worker per core,
// each with its own SO_REUSEPORT listening socket per configured listener
// and its own tunnel engine; it admits each connection (gate.Policy.Admit),
// tells the protocols of "mixed" and "https" listeners apart, hands the
// connection to its front-end, swaps in a new configuration on Reload and
// drains on shutdown. It builds no part itself.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/lists"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/route"
	"github.com/rustle-proxy/rustle/internal/tunnel"
	"github.com/rustle-proxy/rustle/internal/wire"
)

// Server is a running rustle. Create it with New, then Start; change its
// configuration with Reload; stop it with Shutdown or Close.
type Server struct {
	log  *slog.Logger
	opts options

	pool    *dialer.Pool     // nil = no upstream keep-alive
	engines []*tunnel.Engine // one per worker
	// env is what every generation's policies share (wire.Env).
	env wire.Env

	// gen is the current generation; Reload replaces it. nil until New
	// has built the first. Guarded by mu.
	gen *generation

	// revoked tracks every generation's sessions and tunnels by user, so
	// that a reload that removes a user ends them.
	revoked *gate.Registry
	// instance names this server in the Via of what it sends parents,
	// for every generation: a request that comes back naming it is a
	// loop (see route.Instance).
	instance *route.Instance
	// shared holds the quota counters and the cluster link, which every
	// generation shares.
	shared shared
	// lists loads the lists the rules and routes name, and refreshes
	// those from URLs (which every generation shares).
	lists *lists.Registry

	// connCtx is the context of every client connection; cancelling it
	// asks idle connections to close.
	connCtx    context.Context
	connCancel context.CancelFunc
	// cutCtx is done when Close cuts the connections and tunnels still
	// running (gate.Policy.Cut).
	cutCtx    context.Context
	cutCancel context.CancelFunc

	mu sync.Mutex
	// quics are the QUIC sockets opened, kept until Close: a socket a
	// reload stops using still carries its connections. Guarded by mu.
	quics    []*quicSocket
	started  bool       // guarded by mu
	stopped  bool       // listeners closed for good; guarded by mu
	closed   bool       // guarded by mu
	reloadMu sync.Mutex // serializes Reload

	accepts sync.WaitGroup // accept loops
	conns   sync.WaitGroup // connection goroutines

	connMu sync.Mutex
	active map[*net.TCPConn]struct{} // client connections served now; guarded by connMu
}

// listener is one configured listener: its policy and front-ends
// (wire.Listener) and its sockets, one per worker.
type listener struct {
	*wire.Listener
	lns  []net.Listener
	quic *quicSocket // h3's UDP socket; nil without h3

	handshakes *handshakeSlots // the server's TLS handshake slots
	// cur is the listener that the accept loops of lns hand connections
	// to; Reload stores the next generation's listener in it when that one
	// keeps these sockets.
	cur *atomic.Pointer[listener]
}

// Addr names the address a listener is bound to.
type Addr struct {
	Name     string
	Protocol string
	Addr     net.Addr
}

// Option adds an observer to a Server.
type Option func(*options)

type options struct {
	metrics *metrics.Metrics
	access  *accesslog.Logger
	own     []netip.AddrPort // listening addresses besides the proxy's (WithOwnAddrs)
}

// WithMetrics makes the server count connections, requests, bytes,
// tunnels and refusals in m (nil = none).
func WithMetrics(m *metrics.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithAccessLog makes the server log every request and tunnel to l
// (nil = none).
func WithAccessLog(l *accesslog.Logger) Option { return func(o *options) { o.access = l } }

// WithOwnAddrs adds the bound addresses of the process's other TCP
// listeners (the admin listener, which also serves the metrics) to those
// the private-destination guard refuses as the proxy's own, whatever
// allow_private and the access rules allow, from the start and after
// every reload: no proxy client reaches them through the proxy. An
// address on 0.0.0.0 or :: stands for every local address on its port.
// Addresses other than *net.TCPAddr are ignored.
func WithOwnAddrs(addrs ...net.Addr) Option {
	return func(o *options) {
		for _, a := range addrs {
			if ta, ok := a.(*net.TCPAddr); ok {
				o.own = append(o.own, ta.AddrPort())
			}
		}
	}
}

// New builds a Server from a validated configuration. logger may be nil.
func New(cfg *config.Config, logger *slog.Logger, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{log: logger, opts: o, active: make(map[*net.TCPConn]struct{}), revoked: new(gate.Registry), instance: route.NewInstance(),
		lists: lists.NewRegistry(logger)}
	s.connCtx, s.connCancel = context.WithCancel(context.Background())
	s.cutCtx, s.cutCancel = context.WithCancel(context.Background())
	pool, err := wire.Pool(cfg)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.pool = pool
	for range workerCount(cfg, logger) {
		e, err := wire.Engine(cfg, logger)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("server: %w", err)
		}
		s.engines = append(s.engines, e)
	}
	if err := s.newShared(cfg); err != nil {
		s.Close()
		return nil, err
	}
	s.env = wire.Env{Logger: logger, Pool: s.pool, Metrics: o.metrics, AccessLog: o.access, Revoked: s.revoked,
		Cut: s.cutCtx, Quota: s.shared.quota, Cluster: s.shared.cluster, Instance: s.instance, Lists: s.lists}
	o.metrics.SetListStats(s.lists.Stats)
	g, err := s.build(cfg, nil)
	if err != nil {
		s.Close()
		return nil, err
	}
	observeRoutes(o.metrics, g.Routes)
	s.useLocked(g) // s is not shared yet
	return s, nil
}

// Instance returns the token that names this server in the Via element
// of every request it sends a parent ("rustle-" and 16 hex digits,
// random, for the server's life): a request that comes back naming it is
// refused as a loop.
func (s *Server) Instance() string { return s.instance.Token() }

// Start opens every listener (one SO_REUSEPORT socket per worker, all on
// the same port even when the configured port is 0) and starts serving.
//
// With a cluster, its link starts first (see cluster.Cluster.Start): its
// first sync, bounded by cluster.timeout, comes before the first
// connection.
func (s *Server) Start() error {
	s.mu.Lock()
	ready := !s.closed && !s.started
	s.mu.Unlock()
	if ready {
		s.startShared() // not under s.mu: its first sync reads the limiter under it
	}
	s.mu.Lock()
	err := s.startLocked()
	s.mu.Unlock()
	return err
}

func (s *Server) startLocked() error {
	if s.closed {
		return errors.New("server: closed")
	}
	if s.started {
		return errors.New("server: already started")
	}
	s.started = true
	if soft, hard, err := wire.OpenFileLimit(); err == nil {
		s.log.Info("open file limit", "soft", soft, "hard", hard)
	}
	g := s.gen
	s.logBudget(g.Budget)
	workers := len(s.engines)
	for _, l := range g.listeners {
		if err := openWithQUIC(l, func() ([]net.Listener, error) { return openSockets(l.Config, workers) }, s.log); err != nil {
			s.closeListenersLocked()
			return err
		}
		if l.quic != nil {
			s.quics = append(s.quics, l.quic)
		}
		s.log.Info("listening", "listener", l.Config.Name, "protocol", l.Config.Protocol,
			"addr", l.lns[0].Addr().String(), "auth", g.Config.EffectiveAuth(l.Config), "workers", workers, "http3", l.quic != nil)
		if l.Config.ProxyProtocol && l.ProxyFrom == nil {
			s.log.Warn("listener takes a PROXY protocol header, and so a client address, from any peer; "+
				"list the balancers in proxy_protocol_from", "listener", l.Config.Name)
		}
		if l.Config.Protocol == config.ProtocolTransparent && len(g.Config.Intercept.Rules) > 0 {
			s.log.Warn("transparent listener never intercepts: its TLS connections are spliced whatever "+
				"[[intercept.rules]] say; clients to intercept must use a proxy port", "listener", l.Config.Name)
		}
	}
	s.setOwnAddrs(g)
	s.logGuard(g)
	for _, l := range g.listeners {
		for w, ln := range l.lns {
			s.accepts.Add(1)
			go s.acceptLoop(ln, l.cur, s.engines[w])
		}
		if l.quic != nil {
			s.accepts.Add(1)
			go s.acceptQUIC(l.quic, l.cur)
		}
	}
	return nil
}

// Addrs returns the bound address of every listener, in configuration
// order. It is meaningful after Start.
func (s *Server) Addrs() []Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Addr
	for _, l := range s.listenersLocked() {
		if len(l.lns) > 0 {
			out = append(out, Addr{Name: l.Config.Name, Protocol: l.Config.Protocol, Addr: l.lns[0].Addr()})
		}
	}
	return out
}

// Tunnels returns the number of open tunnels.
func (s *Server) Tunnels() int {
	n := 0
	for _, e := range s.engines {
		n += e.Len()
	}
	return n
}

// acceptLoop accepts connections on ln until it is closed, handing each
// to the listener cur holds at that moment. When accept
// fails for want of resources (EMFILE, ENFILE, ENOBUFS) it backs off
// instead of spinning, and the connections already open keep being
// served.
func (s *Server) acceptLoop(ln net.Listener, cur *atomic.Pointer[listener], eng *tunnel.Engine) {
	defer s.accepts.Done()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff *= 2; backoff > time.Second {
				backoff = time.Second
			}
			s.log.Warn("accept failed; backing off", "addr", ln.Addr().String(), "err", err, "backoff", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc := c.(*net.TCPConn)
		l := cur.Load() // the connection keeps this generation (see Reload)
		if l.Config.ProxyProtocol {
			// The client's address comes in the header: admission
			// waits for it, off this loop.
			s.conns.Add(1)
			go s.serveProxied(l, tc, eng)
			continue
		}
		var client netip.AddrPort
		if a, ok := tc.RemoteAddr().(*net.TCPAddr); ok {
			client = a.AddrPort()
		}
		if a := l.Policy.Admit(client.Addr().Unmap()); !a.OK() {
			refuse(l, tc, a)
			continue
		}
		s.conns.Add(1)
		go s.serveConn(l, tc, client, eng)
	}
}

// serveConn serves a connection admitted as coming from client, in a
// session of the listener's policy that gives the admission back when it
// closes, or when the tunnel the connection became ends.
//
// An HTTP/2 connection is served on goroutines of its own, none of which
// waits while it is idle (h2.Server.ServeConnThen): then this goroutine
// returns at once, and the connection's end does the rest (connEnd). So
// does an intercepted tunnel's (see serveHTTP1) once it is intercepted.
func (s *Server) serveConn(l *listener, c *net.TCPConn, client netip.AddrPort, eng *tunnel.Engine) {
	s.connMu.Lock()
	s.active[c] = struct{}{}
	s.connMu.Unlock()
	pol, ip := l.Policy, client.Addr().Unmap()
	sess := pol.NewSession(s.connCtx, client, eng, func() { pol.Release(ip) })
	sess.Attach(c)
	pol.Metrics.Accepted()
	end := connEnd{s: s, l: l, c: c, sess: sess}
	if !l.serve(c, sess, &end) {
		end.run()
	}
}

// connEnd is what serveConn does once a connection has been served: the
// listener's count, the session's end, the server's books.
type connEnd struct {
	s    *Server
	l    *listener
	c    *net.TCPConn
	sess *gate.Session
}

func (e *connEnd) run() {
	e.l.Policy.Metrics.Closed()
	e.sess.Close()
	e.s.connMu.Lock()
	delete(e.s.active, e.c)
	e.s.connMu.Unlock()
	e.s.conns.Done()
}

// then returns e.run on a copy of e, so that only a connection handed
// on with it (serveH2, serveHTTP1) takes an allocation.
func (e *connEnd) then() func() {
	ec := *e
	return ec.run
}

// Shutdown drains the server: it stops accepting, lets requests in
// flight finish and closes idle keep-alive connections, waits for
// connections and tunnels to end until ctx is done, then closes the
// tunnels that remain. It returns ctx's error when it had to cut
// connections or tunnels short.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closeListenersLocked()
	s.mu.Unlock()
	s.accepts.Wait()
	s.connCancel()

	done := make(chan struct{})
	go func() {
		s.conns.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
		// Requests are over; give tunnels the rest of the drain time.
		t := time.NewTicker(50 * time.Millisecond)
		for s.Tunnels() > 0 && err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-t.C:
			}
		}
		t.Stop()
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.Close()
	<-done
	return err
}

// Close stops the server at once: listeners, tunnels and idle upstream
// connections are closed; requests in progress fail. Close is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.closeListenersLocked()
	g := s.gen // nil when New failed before its first build
	quics := s.quics
	s.mu.Unlock()
	s.accepts.Wait()
	s.cutCancel() // first: what the closing below ends is logged as drained
	s.connCancel()
	s.connMu.Lock()
	for c := range s.active {
		c.Close() // ServeConn closes it again, harmlessly
	}
	s.connMu.Unlock()
	for _, e := range s.engines {
		e.Close()
	}
	for _, q := range quics {
		q.close() // its connections with it
	}
	if g != nil {
		for _, l := range g.listeners {
			if l.TLS != nil {
				l.TLS.Close()
			}
		}
		if g.Resolver != nil {
			g.Resolver.Close()
		}
		g.Routes.Close() // the probes
		closeFrontEnds(g.listeners)
	}
	s.lists.Close() // the refreshers
	if s.pool != nil {
		s.pool.Close()
	}
	s.closeShared() // after the engines: their tunnels' last bytes are counted
	return nil
}

func (s *Server) closeListenersLocked() {
	s.stopped = true
	for _, l := range s.listenersLocked() {
		for _, ln := range l.lns {
			ln.Close()
		}
	}
	for _, q := range s.quics {
		q.stop() // connections go on until Close
	}
}
