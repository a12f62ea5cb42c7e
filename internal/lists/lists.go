// Package lists loads the lists of hosts and of client addresses that
// access rules and routes name beside their own entries (hosts_file,
// hosts_url, clients_file, clients_url), and keeps those from URLs
// current.
//
// A file is read whole when the configuration is built, at start and on
// every reload: a file that does not load fails the start, or the reload,
// which then keeps the configuration and the lists in use. A URL's list
// is one for every configuration that names it (it lives across
// reloads), fetched when a configuration that names it first comes into
// use ([Registry.Load]) and then every refresh period
// ([Registry.Use]), with If-None-Match and If-Modified-Since: a 304
// keeps the list and counts as current.
//
// A list is replaced whole (acl.List.Store) and only by one that loaded
// completely: a fetch that fails (unreachable, an error status, a body
// over the size bound, too many redirects, a sha256 pin it does not
// match, no entries, or too many lines that are no entry) keeps the list
// in use, logs why and counts the failure; rustle_list_age_seconds says
// how long ago the list in use was last found current. A list that never
// loaded matches nothing in an allow rule and everything in a deny rule
// (see acl.List).
//
// Fetching is net/http's client with rustle's own bounds, not the
// proxy's dialer: no proxy from the environment, at most 5 redirects and
// none from https to http, a timeout per fetch, a size bound on the body
// as read (after any decompression), and the private-destination guard
// on every address it connects to (with allow_private's ranges and those
// of lists.allow_private), so that a list URL cannot reach what a client
// of the proxy could not.
package lists

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/metrics"
)

// Config is how lists load. Its zero fields mean the defaults below.
type Config struct {
	// Refresh is the period between a URL's fetches; 0 means 1h.
	Refresh time.Duration
	// Timeout bounds one fetch, from the connect to the last byte; 0
	// means 30s.
	Timeout time.Duration
	// MaxBytes bounds a list as read, a file or a URL's body after any
	// decompression; 0 means 64 MiB.
	MaxBytes int64
	// Mark is the firewall mark (SO_MARK) of a fetch's sockets
	// (egress.mark); 0 = none.
	Mark uint32
	// Guard checks every address a fetch connects to; nil lets every
	// address through (tests).
	Guard *dialer.Guard
}

// The defaults of a Config's zero fields.
const (
	DefaultRefresh  = time.Hour
	DefaultTimeout  = 30 * time.Second
	DefaultMaxBytes = 64 << 20
)

// maxRedirects bounds the redirects a fetch follows.
const maxRedirects = 5

func (c Config) refresh() time.Duration {
	if c.Refresh <= 0 {
		return DefaultRefresh
	}
	return c.Refresh
}

func (c Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

func (c Config) maxBytes() int64 {
	if c.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return c.MaxBytes
}

// Registry holds the lists of a process: the URLs' lists, which every
// configuration shares, and the files' lists of the configuration in use.
// It is safe for concurrent use.
type Registry struct {
	log *slog.Logger

	mu      sync.Mutex
	urls    map[urlKey]*source    // every URL list made and not dropped by Use
	files   map[*acl.List]*source // files loaded since the last Use, and those in use
	inUse   []*source             // the lists of the configuration in use, in Use's order
	running map[*source]func()    // the refreshers: their cancels
	done    sync.WaitGroup        // the refreshers
	closed  bool
	fails   map[string]uint64 // failures of files, by name, across configurations
}

type urlKey struct {
	kind acl.ListKind
	raw  string
}

// source is one list and what its loads found.
type source struct {
	list *acl.List
	name string   // the file, or the URL without query and fragment
	url  *url.URL // without the fragment; nil for a file
	pin  []byte   // the sha256 the content must have; nil = none

	// Guarded by Registry.mu.
	stats    acl.ListStats
	checked  time.Time // last found current; zero = never loaded
	failures uint64
	etag     string
	modified string
}

// NewRegistry returns an empty registry that logs to log (nil =
// discard).
func NewRegistry(log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{log: log, urls: make(map[urlKey]*source), files: make(map[*acl.List]*source),
		running: make(map[*source]func()), fails: make(map[string]uint64)}
}

// File reads the list of kind at path, now, as cfg bounds it, and returns
// it as a new list (a reload reads the file again into another): the
// error, which leaves nothing behind, says what is wrong, with the line
// of a list whose lines are mostly no entry. It names the file but not
// this package, for the error of the configuration key that names the
// file (config.Config.KeyError).
func (r *Registry) File(cfg Config, path string, kind acl.ListKind) (*acl.List, error) {
	set, st, err := readFile(path, kind, cfg.maxBytes())
	if err != nil {
		r.mu.Lock()
		r.fails[path]++
		r.mu.Unlock()
		return nil, err
	}
	l := acl.NewList(path, kind)
	l.Store(set)
	s := &source{list: l, name: path, stats: st, checked: time.Now()}
	r.mu.Lock()
	s.failures = r.fails[path]
	r.files[l] = s
	r.mu.Unlock()
	return l, nil
}

// readFile reads and parses the list at path.
func readFile(path string, kind acl.ListKind, max int64) (*acl.ListSet, acl.ListStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, acl.ListStats{}, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > max {
		return nil, acl.ListStats{}, fmt.Errorf("%s: %d bytes, over lists.max_bytes (%d)", path, fi.Size(), max)
	}
	lr := &limitReader{r: f, n: max}
	set, st, err := acl.ParseList(lr, kind)
	switch {
	case lr.over:
		return nil, st, fmt.Errorf("%s: over lists.max_bytes (%d)", path, max)
	case err != nil:
		return nil, st, fmt.Errorf("read %s: %w", path, err)
	}
	if err := st.Err(); err != nil {
		return nil, st, fmt.Errorf("%s: %w", path, err)
	}
	return set, st, nil
}

// URL returns the list of kind at rawURL (http or https, with an
// optional "#sha256=HEX" pin), the same for every call with the same
// URL and kind until Use drops it: its entries as last fetched, none
// before its first fetch (see Load). It fetches nothing. Its error is
// ParseURL's.
func (r *Registry) URL(rawURL string, kind acl.ListKind) (*acl.List, error) {
	u, pin, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	k := urlKey{kind, rawURL}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.urls[k]; ok {
		return s.list, nil
	}
	name := DisplayURL(u)
	s := &source{list: acl.NewList(name, kind), name: name, url: u, pin: pin}
	r.urls[k] = s
	return s.list, nil
}

// ParseURL checks a list's URL: http or https, a host, no user
// information, and no fragment but an optional "sha256=" and 64
// hexadecimal digits, the SHA-256 of the content the list must have. It
// returns the URL without its fragment, and the pin (nil = none). Its
// error names the URL without a password, for a configuration key's.
func ParseURL(rawURL string) (*url.URL, []byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%q is not a URL", rawURL)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "" {
		return nil, nil, fmt.Errorf("%q is not an http:// or https:// URL with a host", DisplayURL(u))
	}
	if u.User != nil {
		return nil, nil, fmt.Errorf("%s: a list URL takes no user and password", DisplayURL(u))
	}
	var pin []byte
	if u.Fragment != "" {
		h, ok := strings.CutPrefix(u.Fragment, "sha256=")
		if pin, err = hex.DecodeString(h); !ok || err != nil || len(pin) != sha256.Size {
			return nil, nil, fmt.Errorf("%s: the fragment is not #sha256= and 64 hexadecimal digits", DisplayURL(u))
		}
	}
	u.Fragment, u.RawFragment = "", ""
	return u, pin, nil
}

// DisplayURL returns u as logs and metrics name it: without user
// information, query or fragment, which may hold secrets.
func DisplayURL(u *url.URL) string {
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return v.String()
}

// Load fetches, as cfg says and in parallel, the lists among ls from
// URLs that never loaded, for at most cfg's timeout; a list that could
// not be fetched is left unloaded (its refresher tries it again) and
// the error logged. It returns when every fetch ended.
func (r *Registry) Load(ctx context.Context, cfg Config, ls []*acl.List) {
	client := newClient(cfg)
	var wg sync.WaitGroup
	for _, s := range r.urlSources(ls) {
		r.mu.Lock()
		loaded := !s.checked.IsZero()
		r.mu.Unlock()
		if loaded {
			continue
		}
		wg.Go(func() {
			if err := r.fetch(ctx, cfg, client, s); err != nil {
				r.log.Warn("lists: list not loaded: rules match by it as if it held nothing (allow rules) or everything (deny and report rules) until it loads",
					"list", s.name, "err", err)
			}
		})
	}
	wg.Wait()
}

// urlSources returns the URL sources of ls.
func (r *Registry) urlSources(ls []*acl.List) []*source {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*source
	for _, s := range r.urls {
		for _, l := range ls {
			if s.list == l {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// Use makes ls the lists of the configuration in use, under cfg: the
// URLs' lists among them are refreshed every cfg.Refresh from now on
// (each first when its list is older than that), the others' refreshers
// stop and the registry forgets them and the files' lists not in ls.
func (r *Registry) Use(cfg Config, ls []*acl.List) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	client := newClient(cfg)
	want := make(map[*acl.List]bool, len(ls))
	for _, l := range ls {
		want[l] = true
	}
	r.inUse = r.inUse[:0]
	for k, s := range r.urls {
		if !want[s.list] {
			delete(r.urls, k)
			continue
		}
		r.inUse = append(r.inUse, s)
	}
	for l, s := range r.files {
		if !want[l] {
			delete(r.files, l)
			continue
		}
		r.inUse = append(r.inUse, s)
	}
	for s, cancel := range r.running {
		cancel() // restarted below when in use, with the new settings
		delete(r.running, s)
	}
	for _, s := range r.inUse {
		if s.url == nil {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.running[s] = cancel
		r.done.Go(func() { r.refresh(ctx, cfg, client, s) })
	}
}

// Close stops every refresher and waits for them.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	for s, cancel := range r.running {
		cancel()
		delete(r.running, s)
	}
	r.mu.Unlock()
	r.done.Wait()
}

// Stats returns what the metrics report of the lists in use.
func (r *Registry) Stats() []metrics.ListStat {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]metrics.ListStat, 0, len(r.inUse))
	for _, s := range r.inUse {
		st := metrics.ListStat{Name: s.name, Loaded: !s.checked.IsZero(), Checked: s.checked, Failures: s.failures,
			BadLines: s.stats.Bad}
		if set := s.list.Set(); set != nil {
			st.Entries = set.Len()
		}
		out = append(out, st)
	}
	return out
}

// refresh fetches s every refresh period until ctx is done, sooner
// after a failure (a minute, doubling up to the period), each wait
// spread by up to a tenth either way so that a fleet does not fetch at
// once.
func (r *Registry) refresh(ctx context.Context, cfg Config, client *http.Client, s *source) {
	period := cfg.refresh()
	retry := min(time.Minute, period)
	r.mu.Lock()
	checked := s.checked
	r.mu.Unlock()
	wait := time.Duration(0)
	if !checked.IsZero() {
		wait = max(period-time.Since(checked), 0)
	}
	backoff := retry
	for {
		t := time.NewTimer(spread(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := r.fetch(ctx, cfg, client, s)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.mu.Lock()
			age := time.Since(s.checked)
			loaded := !s.checked.IsZero()
			r.mu.Unlock()
			attrs := []any{"list", s.name, "err", err, "retry_in", backoff.String()}
			if loaded {
				attrs = append(attrs, "kept_list_age", age.Round(time.Second).String())
			}
			r.log.Warn("lists: refresh failed; the list in use is kept", attrs...)
			wait, backoff = backoff, min(2*backoff, period)
		default:
			wait, backoff = period, retry
		}
	}
}

// spread returns d changed by up to a tenth either way.
func spread(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + time.Duration((rand.Float64()-0.5)*0.2*float64(d))
}

// newClient returns the HTTP client fetches use under cfg.
func newClient(cfg Config) *http.Client {
	guard := cfg.Guard
	mark := cfg.Mark
	d := &net.Dialer{Timeout: cfg.timeout(), Control: func(_, address string, rc syscall.RawConn) error {
		if err := dialer.SetMark(rc, mark); err != nil {
			return err
		}
		if guard == nil {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("lists: connect to %s: %w", address, err)
		}
		return guard.Check(ap, false)
	}}
	tr := &http.Transport{
		Proxy:                 nil, // never the environment's: rustle may be that proxy
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   cfg.timeout(),
		ResponseHeaderTimeout: cfg.timeout(),
		DisableKeepAlives:     true, // a fetch an hour: nothing to keep between them
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   cfg.timeout(),
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
				return fmt.Errorf("refused a redirect from https to %s", DisplayURL(req.URL))
			}
			return nil
		},
	}
}

// errNotModified is fetch's word for a 304.
var errNotModified = errors.New("not modified")

// fetch fetches s once and stores its list when it loaded: nil, or why
// the list in use was kept.
func (r *Registry) fetch(ctx context.Context, cfg Config, client *http.Client, s *source) error {
	set, st, err := r.get(ctx, cfg, client, s)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, errNotModified):
		s.checked = time.Now()
		r.log.Debug("lists: list not modified", "list", s.name, "entries", s.list.Set().Len())
		return nil
	case err != nil:
		if ctx.Err() == nil { // a refresher stopped is no failure
			s.failures++
		}
		return err
	}
	first := s.checked.IsZero()
	s.list.Store(set)
	s.stats, s.checked = st, time.Now()
	msg := "lists: list refreshed"
	if first {
		msg = "lists: list loaded"
	}
	attrs := []any{"list", s.name, "entries", st.Entries}
	if st.Bad > 0 {
		attrs = append(attrs, "bad_lines", st.Bad, "first_bad", strings.Join(st.FirstBad, "; "))
	}
	r.log.Info(msg, attrs...)
	return nil
}

// get fetches s's URL and parses its body; errNotModified for a 304.
// It sets s's validators (under r.mu) when the list loaded.
func (r *Registry) get(ctx context.Context, cfg Config, client *http.Client, s *source) (*acl.ListSet, acl.ListStats, error) {
	var st acl.ListStats
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url.String(), nil)
	if err != nil {
		return nil, st, fmt.Errorf("lists: %s: %w", s.name, err)
	}
	req.Header.Set("User-Agent", "rustle")
	r.mu.Lock()
	if s.list.Set() != nil {
		if s.etag != "" {
			req.Header.Set("If-None-Match", s.etag)
		}
		if s.modified != "" {
			req.Header.Set("If-Modified-Since", s.modified)
		}
	}
	r.mu.Unlock()
	resp, err := client.Do(req)
	if err != nil {
		return nil, st, fmt.Errorf("lists: fetch %s: %w", s.name, unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return nil, st, errNotModified
	case resp.StatusCode != http.StatusOK:
		return nil, st, fmt.Errorf("lists: fetch %s: answered %s", s.name, resp.Status)
	}
	max := cfg.maxBytes()
	if resp.ContentLength > max {
		return nil, st, fmt.Errorf("lists: fetch %s: %d bytes, over lists.max_bytes (%d)", s.name, resp.ContentLength, max)
	}
	sum := sha256.New()
	lr := &limitReader{r: io.TeeReader(resp.Body, sum), n: max}
	set, st, err := acl.ParseList(lr, s.list.Kind())
	switch {
	case lr.over:
		return nil, st, fmt.Errorf("lists: fetch %s: over lists.max_bytes (%d): the rest was not read", s.name, max)
	case err != nil:
		return nil, st, fmt.Errorf("lists: fetch %s: %w", s.name, err)
	case s.pin != nil && !bytes.Equal(sum.Sum(nil), s.pin):
		return nil, st, fmt.Errorf("lists: fetch %s: its SHA-256 is %x, not the %x the URL pins", s.name, sum.Sum(nil), s.pin)
	}
	if err := st.Err(); err != nil {
		return nil, st, fmt.Errorf("lists: fetch %s: malformed: %w", s.name, err)
	}
	if st.Entries == 0 {
		return nil, st, fmt.Errorf("lists: fetch %s: no entries (an empty answer is taken for a failure)", s.name)
	}
	r.mu.Lock()
	s.etag, s.modified = resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	r.mu.Unlock()
	return set, st, nil
}

// unwrapURLError drops the *url.Error around err, whose message repeats
// the whole URL (its query too).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// limitReader reads at most n bytes of r, and notes when r had more.
type limitReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		l.over = true
		return n, io.EOF
	}
	return n, err
}
