package lists

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, 5*time.Second, "rustle/internal/lists."))
}

// loopback is a configuration whose guard lets the tests' servers on
// 127.0.0.1 through, as allow_private would.
func loopback() Config {
	return Config{Guard: dialer.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}), Timeout: 5 * time.Second}
}

// listServer serves a list whose body, ETag and Last-Modified a test
// changes, answering conditional requests with 304 as a web server
// does, and counts its requests.
type listServer struct {
	*httptest.Server
	mu       sync.Mutex
	body     string
	etag     string // "" = none
	modified string // "" = none
	requests []http.Header
}

func newListServer(t *testing.T, body string) *listServer {
	t.Helper()
	ls := &listServer{body: body}
	ls.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		ls.requests = append(ls.requests, r.Header.Clone())
		if ls.etag != "" {
			w.Header().Set("ETag", ls.etag)
			if r.Header.Get("If-None-Match") == ls.etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		if ls.modified != "" {
			w.Header().Set("Last-Modified", ls.modified)
			if r.Header.Get("If-Modified-Since") == ls.modified {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		fmt.Fprint(w, ls.body)
	}))
	t.Cleanup(ls.Close)
	return ls
}

func (ls *listServer) set(body, etag, modified string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.body, ls.etag, ls.modified = body, etag, modified
}

// request returns the headers of the nth request (from 0).
func (ls *listServer) request(n int) http.Header {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if n >= len(ls.requests) {
		return nil
	}
	return ls.requests[n]
}

func (ls *listServer) count() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.requests)
}

// fetchOnce fetches l (from r's URL sources) once under cfg.
func fetchOnce(t *testing.T, r *Registry, cfg Config, l *acl.List) error {
	t.Helper()
	srcs := r.urlSources([]*acl.List{l})
	if len(srcs) != 1 {
		t.Fatalf("%d sources for the list", len(srcs))
	}
	return r.fetch(context.Background(), cfg, newClient(cfg), srcs[0])
}

// denies reports whether a deny rule with hosts list l refuses host.
func denies(t *testing.T, l *acl.List, host string) bool {
	t.Helper()
	p, err := acl.New(acl.Config{Default: acl.Allow, Rules: []acl.Rule{{Name: "list", Action: acl.Deny, HostLists: []*acl.List{l}}}})
	if err != nil {
		t.Fatal(err)
	}
	allow, _ := p.Check(acl.Request{Host: host, Port: 443})
	return !allow
}

// TestConditionalRefresh checks the validators: a list fetched with an
// ETag is asked for again with If-None-Match, and a 304 keeps it (the
// same set, counted current); one with Last-Modified with
// If-Modified-Since; a changed list is swapped in whole, at once for
// the rules that match by it.
func TestConditionalRefresh(t *testing.T) {
	for _, tt := range []struct {
		name, etag, modified, header string
	}{
		{"etag", `"v1"`, "", "If-None-Match"},
		{"last-modified", "", "Mon, 01 Jun 2026 12:00:00 GMT", "If-Modified-Since"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newListServer(t, ".ads.example\n")
			srv.set(".ads.example\n", tt.etag, tt.modified)
			r := NewRegistry(nil)
			cfg := loopback()
			l, err := r.URL(srv.URL+"/ads.txt", acl.HostList)
			if err != nil {
				t.Fatal(err)
			}
			r.Load(context.Background(), cfg, []*acl.List{l})
			first := l.Set()
			if first == nil || !denies(t, l, "www.ads.example") {
				t.Fatal("the list did not load")
			}
			if h := srv.request(0); h.Get("If-None-Match") != "" || h.Get("If-Modified-Since") != "" {
				t.Errorf("the first fetch was conditional: %v", h)
			}
			if err := fetchOnce(t, r, cfg, l); err != nil {
				t.Fatalf("second fetch: %v", err)
			}
			if got := srv.request(1).Get(tt.header); got == "" || got != tt.etag+tt.modified {
				t.Errorf("second fetch sent %s %q, want %q", tt.header, got, tt.etag+tt.modified)
			}
			if l.Set() != first {
				t.Error("a 304 replaced the list")
			}
			srv.set(".tracker.example\n", tt.etag+"2", tt.modified+"2")
			if err := fetchOnce(t, r, cfg, l); err != nil {
				t.Fatalf("third fetch: %v", err)
			}
			if denies(t, l, "www.ads.example") || !denies(t, l, "a.tracker.example") {
				t.Error("the changed list was not swapped in")
			}
		})
	}
}

// TestRefreshFailuresKeepTheList checks every way a fetch can fail after
// a list loaded: each keeps the list in use, counts a failure, and says
// why; and that a list that never loaded stays unloaded on a failure.
func TestRefreshFailuresKeepTheList(t *testing.T) {
	garbage := strings.Repeat("<a>!\n", 1_000_000)
	good := ".ads.example\n"
	pinned := fmt.Sprintf("#sha256=%x", sha256.Sum256([]byte(good)))
	var mode atomic.Value
	mode.Store("good")
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "good":
			fmt.Fprint(w, good)
		case "404":
			http.NotFound(w, r)
		case "empty":
		case "garbage":
			fmt.Fprint(w, garbage)
		case "changed":
			fmt.Fprint(w, ".ads.example\n.more.example\n")
		case "redirect loop":
			http.Redirect(w, r, r.URL.Path, http.StatusFound)
		case "2 GB, chunked", "2 GB, with its length":
			if mode.Load() == "2 GB, with its length" {
				w.Header().Set("Content-Length", "2147483648")
			}
			chunk := bytes.Repeat([]byte("a.example\n"), 6554) // 64 KiB
			for written.Load() < 2<<30 {
				n, err := w.Write(chunk)
				written.Add(int64(n))
				if err != nil {
					return // the client went away: the rest is never made
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	var logs proxytest.LogBuffer
	r := NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)))
	cfg := loopback()
	cfg.MaxBytes = 8 << 20    // room for the million lines of garbage
	cfg.Timeout = time.Minute // a bound, not a measure: a million lines take a while under -race
	l, err := r.URL(srv.URL+"/list.txt", acl.HostList)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := r.URL(srv.URL+"/pinned.txt"+pinned, acl.HostList)
	if err != nil {
		t.Fatal(err)
	}
	r.Load(context.Background(), cfg, []*acl.List{l, pl})
	if l.Set() == nil || pl.Set() == nil {
		t.Fatalf("the lists did not load: %s", logs.String())
	}
	kept := l.Set()
	for i, tt := range []struct{ mode, want string }{
		{"404", "answered 404 Not Found"},
		{"empty", "no entries"},
		{"garbage", "malformed: 1000000 of 1000000 lines are not entries (line 1: "},
		{"redirect loop", "stopped after 5 redirects"},
		{"2 GB, with its length", "2147483648 bytes, over lists.max_bytes (8388608)"},
		{"2 GB, chunked", "over lists.max_bytes (8388608): the rest was not read"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			mode.Store(tt.mode)
			written.Store(0)
			err := fetchOnce(t, r, cfg, l)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("fetch = %v, want an error with %q", err, tt.want)
			}
			if l.Set() != kept {
				t.Error("the list in use was replaced")
			}
			if st := r.statsOf(l); st.failures != uint64(i+1) {
				t.Errorf("%d failures counted, want %d", st.failures, i+1)
			}
		})
	}
	srv.CloseClientConnections()
	if n := written.Load(); n > 64<<20 {
		t.Errorf("the server wrote %d MB of the 2 GB: the body was read past the bound", n>>20)
	}
	// The pin: the list it names loads, another does not.
	mode.Store("changed")
	if err := fetchOnce(t, r, cfg, pl); err == nil || !strings.Contains(err.Error(), "not the "+pinned[8:]) {
		t.Errorf("a list the pin does not match: %v", err)
	}
	if !denies(t, pl, "ads.example") || denies(t, pl, "more.example") {
		t.Error("the pinned list changed")
	}
	// A list that never loaded stays so.
	nl, _ := r.URL(srv.URL+"/never.txt", acl.HostList)
	mode.Store("404")
	r.Load(context.Background(), cfg, []*acl.List{nl})
	if nl.Set() != nil || !strings.Contains(logs.String(), "list not loaded") {
		t.Errorf("a list answered 404 loaded, or was not logged: %s", logs.String())
	}
}

// TestPrivateURL checks that a list URL is fetched through the
// private-destination guard: one on a loopback address is refused
// unless an allowed range holds it.
func TestPrivateURL(t *testing.T) {
	srv := newListServer(t, ".ads.example\n")
	r := NewRegistry(nil)
	l, err := r.URL(srv.URL+"/ads.txt", acl.HostList)
	if err != nil {
		t.Fatal(err)
	}
	err = fetchOnce(t, r, Config{Guard: dialer.NewGuard(nil)}, l)
	if err == nil || !strings.Contains(err.Error(), "private or local address") || l.Set() != nil {
		t.Fatalf("fetch from loopback without allow_private = %v", err)
	}
	if srv.count() != 0 {
		t.Error("the server was asked")
	}
	if err := fetchOnce(t, r, loopback(), l); err != nil || l.Set() == nil {
		t.Fatalf("fetch with loopback allowed = %v", err)
	}
}

// TestUse checks the refreshers: Use fetches a list in use every
// refresh period, swapping each new version in; a failed refresh is
// logged with why and the age of the list kept; a list a later Use
// leaves out is forgotten (URL makes a new one) and no longer fetched;
// Close stops them all.
func TestUse(t *testing.T) {
	srv := newListServer(t, ".v0.example\n")
	var logs proxytest.LogBuffer
	r := NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(r.Close)
	cfg := loopback()
	cfg.Refresh = 20 * time.Millisecond
	l, _ := r.URL(srv.URL+"/l.txt", acl.HostList)
	r.Use(cfg, []*acl.List{l})
	proxytest.WaitFor(t, "the first load", func() bool { return l.Set() != nil && denies(t, l, "v0.example") })
	srv.set(".v1.example\n", "", "")
	proxytest.WaitFor(t, "a refresh to the new version", func() bool { return denies(t, l, "v1.example") })
	srv.set("garbage line\n", "", "")
	proxytest.WaitFor(t, "a failed refresh logged", func() bool {
		return strings.Contains(logs.String(), "refresh failed; the list in use is kept") && strings.Contains(logs.String(), "kept_list_age")
	})
	if !denies(t, l, "v1.example") {
		t.Error("the failed refresh dropped the list")
	}
	st := r.Stats()
	if len(st) != 1 || !st[0].Loaded || st[0].Failures == 0 || st[0].Entries != 1 || st[0].Name != srv.URL+"/l.txt" {
		t.Errorf("Stats = %+v", st)
	}
	r.Use(cfg, nil)
	n := srv.count()
	time.Sleep(100 * time.Millisecond) // five refresh periods: no fetch may come
	if srv.count() != n {
		t.Errorf("a list no longer in use was fetched %d more times", srv.count()-n)
	}
	if l2, _ := r.URL(srv.URL+"/l.txt", acl.HostList); l2 == l {
		t.Error("a list left out by Use was kept")
	}
	if len(r.Stats()) != 0 {
		t.Error("Stats reports lists not in use")
	}
}

// TestFile checks files: a list read whole, a new list on every read
// (a reload's), and the errors of a file missing, too large or mostly
// not a list, which name the file and the lines.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r := NewRegistry(nil)
	cfg := Config{MaxBytes: 1024}
	good := write("good.txt", "# office\n10.0.0.0/8\n192.0.2.1\n")
	l, err := r.File(cfg, good, acl.ClientList)
	if err != nil || l.Set().Len() != 2 {
		t.Fatalf("File = %v", err)
	}
	l2, err := r.File(cfg, good, acl.ClientList)
	if err != nil || l2 == l {
		t.Errorf("a second read returned the same list (%v)", err)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"missing.txt", "", "no such file"},
		{"large.txt", strings.Repeat("10.0.0.1\n", 200), "over lists.max_bytes (1024)"},
		{"bad.txt", "10.0.0.1\nexample.com\n", "bad.txt: 1 of 2 lines are not entries (line 2: \"example.com\" is not an IP address or CIDR prefix)"},
	} {
		p := filepath.Join(dir, tt.name)
		if tt.body != "" {
			p = write(tt.name, tt.body)
		}
		if _, err := r.File(cfg, p, acl.ClientList); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: File = %v, want %q", tt.name, err, tt.want)
		}
	}
	r.Use(cfg, []*acl.List{l2})
	if st := r.Stats(); len(st) != 1 || st[0].Name != good || st[0].Entries != 2 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestParseURL(t *testing.T) {
	sum := hex.EncodeToString(make([]byte, 32))
	for _, tt := range []struct{ in, want string }{
		{"https://lists.example/ads.txt", ""},
		{"http://lists.example:8080/a?token=x#sha256=" + sum, ""},
		{"ftp://lists.example/a", "is not an http:// or https:// URL"},
		{"https:///a", "is not an http:// or https:// URL"},
		{"https://user:secret@lists.example/a", "takes no user and password"},
		{"https://lists.example/a#md5=00", "#sha256="},
		{"https://lists.example/a#sha256=abc", "#sha256="},
		{"://", "is not a URL"},
	} {
		_, _, err := ParseURL(tt.in)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("ParseURL(%q) = %v, want %q", tt.in, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q) repeats the password: %v", tt.in, err)
		}
	}
	u, pin, _ := ParseURL("https://lists.example/a?token=x#sha256=" + sum)
	if DisplayURL(u) != "https://lists.example/a" || len(pin) != 32 || u.RawQuery != "token=x" {
		t.Errorf("ParseURL = %s %x", u, pin)
	}
}

// sourceStats is what a test reads of a source.
type sourceStats struct{ failures uint64 }

// statsOf returns the stats of l's source.
func (r *Registry) statsOf(l *acl.List) sourceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.urls {
		if s.list == l {
			return sourceStats{s.failures}
		}
	}
	return sourceStats{}
}
