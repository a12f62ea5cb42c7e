// Package admin serves rustle's admin HTTP listener: Prometheus metrics
// at /metrics, liveness at /healthz and readiness at /readyz, the
// running proxy's endpoints, /quota and /revoke, added with
// [Server.HandleProxy] for a [Proxy] (the server), and the operators'
// page at / with its JSON API under /api/, added with
// [Server.HandleConsole].
//
// The listener is for operators and their monitoring, not for clients:
// bind it to loopback or to a network only the scraper and the
// orchestrator reach. It serves no proxy traffic. Its [Access] says who
// may call it: with a bearer token or htpasswd users, every endpoint but
// /healthz, /readyz and /metrics needs an Authorization header one of
// them accepts; without, only loopback clients are answered there.
// Whatever the access, it answers only Host names of its own (a
// DNS-rebinding page gets 421), and takes a call that changes state (any
// method but GET and HEAD) only with Content-Type: application/json and
// no foreign Origin or Sec-Fetch-Site, which a cross-site form cannot
// send (403 or 415). Each refusal is logged, without the credentials.
//
// The page costs nothing on the data path: it reads the counters the
// metrics keep anyway, once a second, into a ring of the last hour, and
// keeps the latest access log records from the log's writer goroutine.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Timeouts of the admin HTTP server. A scrape of a busy process takes
// milliseconds; these only bound misbehaving clients.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 16 << 10
)

// Server is the admin HTTP server. Create it with [New], then Start; stop
// it with Shutdown or Close.
type Server struct {
	addr   string
	log    *slog.Logger
	ready  func() bool
	access Access
	http   *http.Server
	mux    *http.ServeMux
	cross  *http.CrossOriginProtection
	names  map[string]bool // Host names answered besides localhost and IP addresses (see hostAllowed); read-only
	// bound is the address Start bound, for hostAllowed; nil before.
	bound atomic.Pointer[netip.Addr]

	console atomic.Pointer[Console] // the page at /, once HandleConsole added it; nil = the text index

	mu      sync.Mutex
	ln      net.Listener // guarded by mu; set by Start
	started bool         // guarded by mu

	served chan struct{} // closed when serve returns

	stop     chan struct{}  // closed by Shutdown and Close: ends the background work
	stopOnce sync.Once      // closes stop
	bg       sync.WaitGroup // background work (the console's sampler)
}

// New creates an admin server for addr (host:port; port 0 picks a free
// port) that access guards (its zero value: no authentication). metrics
// serves /metrics; nil answers it with 404. ready reports readiness for
// /readyz; nil means always ready. logger receives the server's errors
// and refusals; nil discards them.
func New(addr string, metrics http.Handler, ready func() bool, logger *slog.Logger, access Access) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if ready == nil {
		ready = func() bool { return true }
	}
	if metrics == nil {
		metrics = http.NotFoundHandler()
	}
	s := &Server{addr: addr, log: logger, ready: ready, access: access, served: make(chan struct{}),
		cross: http.NewCrossOriginProtection(), names: make(map[string]bool), stop: make(chan struct{})}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		s.names[normalHost(host)] = true
	}
	for _, h := range access.Hosts {
		s.names[normalHost(h)] = true
	}
	s.http = &http.Server{
		Handler:           s.guard(s.routes(metrics)),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	return s
}

// Handler returns the server's routes, for tests that serve them
// elsewhere.
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Handle adds an endpoint: pattern as http.ServeMux takes it ("GET
// /quota"). It may be called while the server serves. With
// Access.HealthAndMetricsOnly the endpoint answers 404, saying why.
func (s *Server) Handle(pattern string, h http.Handler) {
	if s.access.HealthAndMetricsOnly {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.refuse(w, r, http.StatusNotFound, "off",
				"rustle admin: "+r.URL.Path+" is off here: admin_access.health_and_metrics_only serves only /healthz, /readyz and /metrics\n")
		})
	}
	s.mux.Handle(pattern, h)
}

// routes maps the endpoints. GET patterns also answer HEAD; other
// methods get 405.
func (s *Server) routes(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	s.mux = mux
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.ready() {
			writeText(w, http.StatusOK, "ready\n")
			return
		}
		writeText(w, http.StatusServiceUnavailable, "not ready\n")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if c := s.console.Load(); c != nil {
			c.servePage(w, r)
			return
		}
		writeText(w, http.StatusOK, "rustle admin\n/metrics  Prometheus metrics\n/healthz  liveness\n/readyz   readiness (503 while starting or draining)\n")
	})
	return mux
}

func writeText(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write([]byte(body))
}

// Start listens on the address and serves in the background. It returns
// the error of listening, such as the address being in use.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("admin: already started")
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.addr, err)
	}
	s.started = true
	s.ln = ln
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		ip := a.AddrPort().Addr().Unmap().WithZone("")
		s.bound.Store(&ip)
	}
	go s.serve(ln)
	return nil
}

// serve runs the HTTP server on ln until Shutdown or Close.
func (s *Server) serve(ln net.Listener) {
	defer close(s.served)
	if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("admin: serve failed", "addr", ln.Addr().String(), "err", err)
	}
}

// Addr returns the address the server listens on, or nil before Start.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// background runs fn in a goroutine until Shutdown or Close, which
// close its stop channel and wait for it to return.
func (s *Server) background(fn func(stop <-chan struct{})) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn(s.stop)
	}()
}

// stopBackground ends the background work and waits for it.
func (s *Server) stopBackground() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.bg.Wait()
}

// Shutdown stops accepting, waits for requests in progress to finish
// until ctx is done, then closes what is left and returns ctx's error.
// Calling it before Start or again is harmless.
func (s *Server) Shutdown(ctx context.Context) error {
	defer s.stopBackground()
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	s.wait()
	if err != nil {
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	return nil
}

// Close stops the server at once. It is idempotent.
func (s *Server) Close() error {
	defer s.stopBackground()
	err := s.http.Close()
	s.wait()
	return err
}

// wait waits for serve to return, if it was started.
func (s *Server) wait() {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		<-s.served
	}
}
