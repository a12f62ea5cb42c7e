package authz

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/metrics"
)

// Defaults of a [Config]'s zero fields.
const (
	// DefaultTimeout bounds a decision when Config.Timeout is 0.
	DefaultTimeout = 2 * time.Second
	// DefaultMaxInFlight bounds the calls in flight when
	// Config.MaxInFlight is 0.
	DefaultMaxInFlight = 64
	// DefaultCacheSize bounds the cache when Config.CacheSize is 0.
	DefaultCacheSize = 10000
	// DefaultCacheTTL is Config.CacheTTL's when it is 0.
	DefaultCacheTTL = time.Minute
)

// MaxAnswerBytes bounds the answer read from the service; a longer one
// is an error (malformed).
const MaxAnswerBytes = 64 << 10

// MaxHeaders bounds the headers an answer may ask to add; more is an
// error (malformed).
const MaxHeaders = 32

// OnError says what a request gets when the service cannot decide it.
type OnError uint8

const (
	// Deny refuses it (fail closed).
	Deny OnError = iota
	// Allow lets it through on the access rules' verdict (fail open).
	Allow
)

// Config configures a [Client].
type Config struct {
	// URL is where the documents are POSTed: an http or https URL.
	// Required.
	URL string
	// TLS is the TLS configuration towards an https URL; nil = the
	// system's roots.
	TLS *tls.Config
	// Token is a bearer token sent as "Authorization: Bearer Token"; ""
	// = none. It is never logged.
	Token string
	// Timeout bounds a decision as a whole: the wait for a free call,
	// the connection, the request and the answer; 0 = DefaultTimeout.
	Timeout time.Duration
	// MaxInFlight bounds the calls in flight, and the connections kept
	// to the service; 0 = DefaultMaxInFlight.
	MaxInFlight int
	// CacheSize bounds the decisions cached; 0 = DefaultCacheSize, < 0 =
	// no cache.
	CacheSize int
	// CacheTTL is how long a decision is cached when the answer gives
	// no ttl, and the longest an answer's ttl may keep it; 0 =
	// DefaultCacheTTL.
	CacheTTL time.Duration
	// OnError is what a request gets when the service cannot decide it;
	// the zero value is Deny.
	OnError OnError
	// CheckHeader checks a header an allowing answer asks to add to the
	// request: an error refuses the answer as malformed (its message may
	// name the field, never its value). nil = an answer with headers is
	// malformed.
	CheckHeader func(name, value string) error
	// Metrics counts the calls, the cache's hits and misses, the errors
	// and the latency; nil = none.
	Metrics *metrics.AuthzMetrics
	// Logger receives a warning when the service stops answering and a
	// line when it answers again; nil = discard.
	Logger *slog.Logger
}

// Input is what the document sent about a request holds.
type Input struct {
	// Listener names the listener the request came to.
	Listener string
	// User is the authenticated user; "" = anonymous.
	User string
	// Groups are the user's groups (its identity provider's); shared,
	// never modified.
	Groups []string
	// Client is the client's IP address.
	Client netip.Addr
	// Host is the destination: a name, or an IP address without
	// brackets; "" when it is Addr, or for a SOCKS5 UDP association,
	// which names none.
	Host string
	// Addr is the destination when the client gave an address (SOCKS)
	// rather than Host; the zero Addr otherwise.
	Addr netip.Addr
	// Port is the destination port; 0 for a SOCKS5 UDP association.
	Port uint16
	// Method is the request method ("GET", "CONNECT", "UDP ASSOCIATE").
	Method string
	// Protocol is the protocol as the access rules name it ("http",
	// "connect", "websocket", "socks5", "socks5-udp", "socks4", "udp").
	Protocol string
	// SNI is the server name of the tunnel's TLS ClientHello when the
	// tunnel read it before the decision (see package gate); "" when it
	// was not read or named none.
	SNI string
}

// Header is a field an allowing answer asks to add to the request.
type Header struct {
	Name, Value string
}

// Decision is what the service decided about a request.
type Decision struct {
	// Allow lets the request through; false refuses it.
	Allow bool
	// Headers are the fields an allowing answer asked to add to a
	// forwarded HTTP request, sorted by name; nil = none. Shared with
	// the cache: never modified.
	Headers []Header
	// Err says why the service could not decide (an *Error); Allow is
	// then what Config.OnError says. nil = the service decided.
	Err error
	// Cached says the decision came from the cache.
	Cached bool
}

// Error is why the service could not decide a request.
type Error struct {
	// Kind classifies it, as the metrics count it.
	Kind metrics.AuthzError
	// Err says what went wrong.
	Err error
}

// Error returns the error's message.
func (e *Error) Error() string { return "authz: " + e.Kind.String() + ": " + e.Err.Error() }

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// Client asks the decision service. It is safe for concurrent use.
type Client struct {
	url         string
	http        *http.Client
	auth        string // the Authorization value; "" none
	timeout     time.Duration
	slots       chan struct{}
	onError     OnError
	ttl         time.Duration
	checkHeader func(name, value string) error
	m           *metrics.AuthzMetrics
	log         *slog.Logger
	cache       cache
	down        atomic.Bool // the last call failed; logged once
}

// New returns the client cfg describes. It connects to nothing until
// the first decision.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("authz: url %q: want http(s)://host[:port]/path", cfg.URL)
	}
	c := &Client{
		url:         cfg.URL,
		timeout:     cmpOr(cfg.Timeout, DefaultTimeout),
		onError:     cfg.OnError,
		ttl:         cmpOr(cfg.CacheTTL, DefaultCacheTTL),
		checkHeader: cfg.CheckHeader,
		m:           cfg.Metrics,
		log:         cfg.Logger,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Token != "" {
		c.auth = "Bearer " + cfg.Token
	}
	n := cmpOr(cfg.MaxInFlight, DefaultMaxInFlight)
	c.slots = make(chan struct{}, n)
	c.http = &http.Client{
		Transport: &http.Transport{
			Proxy:               nil, // the service is asked directly, never through a proxy of the environment
			DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     cfg.TLS,
			ForceAttemptHTTP2:   cfg.TLS == nil, // a custom TLS configuration keeps HTTP/1.1, as net/http does
			MaxIdleConns:        n,
			MaxIdleConnsPerHost: n,
			MaxConnsPerHost:     n,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: c.timeout,
		},
		// A redirect is no decision: the answer is the one asked.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	size := cmpOr(cfg.CacheSize, DefaultCacheSize)
	c.cache.init(max(size, 0))
	return c, nil
}

// Close closes the idle connections to the service; decisions still in
// flight end as they would.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// OnError returns what a request gets when the service cannot decide
// it.
func (c *Client) OnError() OnError { return c.onError }

// Decide returns the service's decision about in: from the cache, or from
// a call to the service (or the call in flight for the same document),
// within the configured timeout and ctx (a ctx that ends first ends the
// wait, not a call other decisions wait for). buf is a buffer the
// document is built in, returned for reuse: a decision from the cache
// allocates nothing but buf's growth.
func (c *Client) Decide(ctx context.Context, in *Input, buf []byte) (Decision, []byte) {
	d, buf := c.decide(ctx, in, buf)
	c.m.Decided(d.Allow, d.Err != nil)
	return d, buf
}

// decide is Decide but for the count of its decision.
func (c *Client) decide(ctx context.Context, in *Input, buf []byte) (Decision, []byte) {
	body := in.AppendDocument(buf[:0])
	if c.cache.max > 0 {
		if v, ok := c.cache.get(body, monoNow()); ok {
			c.m.CacheHit()
			return Decision{Allow: v.allow, Headers: v.headers, Cached: true}, body
		}
	}
	c.m.CacheMiss()
	f, leader := c.cache.join(body)
	if !leader {
		return c.wait(ctx, f), body
	}
	v, ttl, err := c.call(ctx, f.key)
	c.cache.land(f, v, ttl, err, monoNow())
	return c.decision(v, err), body
}

// wait waits for the call in flight f for the same document, within the
// timeout and ctx.
func (c *Client) wait(ctx context.Context, f *flight) Decision {
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-f.done:
		return c.decision(f.v, f.err)
	case <-t.C:
		return c.decision(verdict{}, c.fail(metrics.AuthzTimeout, fmt.Errorf("no answer within %s (waiting for the same document's call)", c.timeout)))
	case <-ctx.Done():
		return c.decision(verdict{}, c.fail(metrics.AuthzTimeout, fmt.Errorf("the request ended waiting for its decision: %w", context.Cause(ctx))))
	}
}

// decision returns the Decision of v, or, for err, the one OnError says.
func (c *Client) decision(v verdict, err error) Decision {
	if err != nil {
		return Decision{Allow: c.onError == Allow, Err: err}
	}
	return Decision{Allow: v.allow, Headers: v.headers}
}

// fail counts a decision the service could not make, and returns its
// *Error.
func (c *Client) fail(kind metrics.AuthzError, err error) error {
	c.m.Error(kind)
	return &Error{Kind: kind, Err: err}
}

// call POSTs body to the service within the timeout and returns its
// verdict and how long it may be cached; it is not cut short by ctx's
// cancellation (other decisions may wait for it), only by its deadline.
func (c *Client) call(ctx context.Context, body string) (verdict, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	var waited time.Duration // for a free call
	select {
	case c.slots <- struct{}{}:
	default:
		t0 := time.Now()
		select {
		case c.slots <- struct{}{}:
			waited = time.Since(t0)
		case <-ctx.Done():
			return verdict{}, 0, c.failed(&Error{Kind: metrics.AuthzBusy,
				Err: fmt.Errorf("all %d calls (max_in_flight) stayed busy for %s", cap(c.slots), c.timeout)})
		}
	}
	defer func() { <-c.slots }()
	c.m.Started()
	t0 := time.Now()
	v, ttl, err := c.post(ctx, body)
	c.m.Called(time.Since(t0), err == nil, v.allow)
	if err != nil {
		e := err.(*Error)
		if waited > 0 && e.Kind == metrics.AuthzTimeout {
			// The time went waiting for a free call: the limit, not
			// the service alone, is why.
			e = &Error{Kind: metrics.AuthzBusy, Err: fmt.Errorf("waited %s for a free call (all %d of max_in_flight busy), then %w",
				waited.Round(time.Millisecond), cap(c.slots), e.Err)}
		}
		return verdict{}, 0, c.failed(e)
	}
	if c.down.Load() && c.down.Swap(false) {
		c.log.LogAttrs(context.Background(), slog.LevelInfo, "authz: the decision service answers again", slog.String("url", c.url))
	}
	return v, ttl, nil
}

// failed counts e, a call that could not be made or failed, and logs a
// warning when the calls before it did not fail.
func (c *Client) failed(e *Error) error {
	c.m.Error(e.Kind)
	if !c.down.Swap(true) {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "authz: the decision service failed: on_error decides the requests it cannot",
			slog.String("url", c.url), slog.String("on_error", c.onError.String()), slog.String("error", e.Error()))
	}
	return e
}

// post sends body and reads the answer.
func (c *Client) post(ctx context.Context, body string) (verdict, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return verdict{}, 0, &Error{Kind: metrics.AuthzUnreachable, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return verdict{}, 0, c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes)) // lets the connection be kept
		return verdict{}, 0, &Error{Kind: metrics.AuthzStatus, Err: fmt.Errorf("the service answered %s", resp.Status)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return verdict{}, 0, c.transportError(ctx, err)
	}
	if len(b) > MaxAnswerBytes {
		return verdict{}, 0, &Error{Kind: metrics.AuthzMalformed, Err: fmt.Errorf("the answer is over %d bytes", MaxAnswerBytes)}
	}
	v, ttl, err := c.parse(b)
	if err != nil {
		return verdict{}, 0, &Error{Kind: metrics.AuthzMalformed, Err: err}
	}
	return v, ttl, nil
}

// transportError classifies a failed exchange with the service.
func (c *Client) transportError(ctx context.Context, err error) error {
	var ne net.Error
	if ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout() {
		return &Error{Kind: metrics.AuthzTimeout, Err: fmt.Errorf("no answer within %s: %w", c.timeout, err)}
	}
	return &Error{Kind: metrics.AuthzUnreachable, Err: err}
}

// answer is the service's answer: {"result": ...}.
type answer struct {
	Result json.RawMessage `json:"result"`
}

// resultObject is a result that is an object.
type resultObject struct {
	Allow   *bool             `json:"allow"`
	Headers map[string]string `json:"headers"`
	TTL     *float64          `json:"ttl"`
}

// parse reads an answer: its verdict and how long it may be cached.
func (c *Client) parse(b []byte) (verdict, time.Duration, error) {
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		return verdict{}, 0, fmt.Errorf("the answer is not a JSON object: %w", err)
	}
	r := bytes.TrimSpace(a.Result)
	if len(r) == 0 || string(r) == "null" {
		return verdict{}, 0, errors.New(`the answer has no "result": the policy is undefined for the input, or the URL names no policy`)
	}
	switch r[0] {
	case 't', 'f':
		var allow bool
		if err := json.Unmarshal(r, &allow); err != nil {
			return verdict{}, 0, fmt.Errorf("the result: %w", err)
		}
		return verdict{allow: allow}, c.ttl, nil
	case '{':
	default:
		return verdict{}, 0, errors.New(`the result is neither true, false nor an object with "allow"`)
	}
	var o resultObject
	if err := json.Unmarshal(r, &o); err != nil {
		return verdict{}, 0, fmt.Errorf("the result: %w", err)
	}
	if o.Allow == nil {
		return verdict{}, 0, errors.New(`the result has no boolean "allow"`)
	}
	ttl := c.ttl
	if o.TTL != nil {
		s := *o.TTL
		if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return verdict{}, 0, fmt.Errorf("the result's ttl %v is not a number of seconds, 0 or more", s)
		}
		ttl = min(time.Duration(min(s, c.ttl.Seconds())*float64(time.Second)), c.ttl)
	}
	v := verdict{allow: *o.Allow}
	if !v.allow || len(o.Headers) == 0 {
		return v, ttl, nil // a refusal's headers add to nothing
	}
	if len(o.Headers) > MaxHeaders {
		return verdict{}, 0, fmt.Errorf("the result asks for %d headers, over %d", len(o.Headers), MaxHeaders)
	}
	if c.checkHeader == nil {
		return verdict{}, 0, errors.New("the result asks for headers, and no header may be added")
	}
	for name, value := range o.Headers {
		if err := c.checkHeader(name, value); err != nil {
			return verdict{}, 0, fmt.Errorf("the result's headers: %w", err)
		}
		v.headers = append(v.headers, Header{Name: name, Value: value})
	}
	slices.SortFunc(v.headers, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	return v, ttl, nil
}

// String returns o as authz.on_error spells it.
func (o OnError) String() string {
	if o == Allow {
		return "allow"
	}
	return "deny"
}

// ReadToken returns the bearer token a file holds: its first line,
// trimmed.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("authz: read token_file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", fmt.Errorf("authz: token_file %s: its first line is empty", path)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("authz: token_file %s: the token has a control character", path)
		}
	}
	return tok, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// epoch is the origin of monoNow.
var epoch = time.Now()

// monoNow returns the monotonic time since the process started.
func monoNow() time.Duration { return time.Since(epoch) }
