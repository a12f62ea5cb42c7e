package auth_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/auth"
	"golang.org/x/crypto/bcrypt"
)

// Test users: alice and carol have bcrypt hashes (cost bcrypt.MinCost), bob
// and dave plain passwords.
const (
	alicePW = "alice-pw"
	bobPW   = "bob-pw"
	carolPW = "pa:ss:word" // colons after the first belong to the password
	davePW  = "dävé ☃"
)

// long72 is a 72-byte password, the most bcrypt hashes in full.
var long72 = strings.Repeat("x", auth.MaxBcryptPassword)

// hashes holds one MinCost bcrypt hash per password, computed once.
var (
	hashMu sync.Mutex
	hashes = map[string]string{}
)

// hashOf returns a bcrypt hash of pw at bcrypt.MinCost.
func hashOf(t testing.TB, pw string) string {
	t.Helper()
	return hashAt(t, pw, bcrypt.MinCost)
}

func hashAt(t testing.TB, pw string, cost int) string {
	t.Helper()
	hashMu.Lock()
	defer hashMu.Unlock()
	k := fmt.Sprintf("%d/%s", cost, pw)
	if h, ok := hashes[k]; ok {
		return h
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
	if err != nil {
		t.Fatalf("bcrypt.GenerateFromPassword: %v", err)
	}
	hashes[k] = string(h)
	return string(h)
}

func testUsers(t testing.TB) []auth.User {
	t.Helper()
	return []auth.User{
		{Name: "alice", Bcrypt: hashOf(t, alicePW)},
		{Name: "bob", Password: bobPW},
		{Name: "carol", Bcrypt: hashOf(t, carolPW)},
		{Name: "dave", Password: davePW},
		{Name: "long", Bcrypt: hashOf(t, long72)},
	}
}

// newAuth returns an Authenticator for cfg, with testUsers when cfg has no users.
func newAuth(t testing.TB, cfg auth.Config) *auth.Authenticator {
	t.Helper()
	if cfg.Users == nil && cfg.Files == nil {
		cfg.Users = testUsers(t)
	}
	a, err := auth.New(cfg)
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	return a
}

// basic returns the Proxy-Authorization value for user and password.
func basic(user, pass string) []byte {
	return []byte("Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// skipBcrypt makes a's bcrypt comparisons fail at once, for tests that
// only need many verdicts for unknown or plain-password users.
func skipBcrypt(a *auth.Authenticator) {
	auth.WrapCompare(a, func(_ func(h, p []byte) error, _, _ []byte) error {
		return bcrypt.ErrMismatchedHashAndPassword
	})
}

// fakeClock is a settable clock for cache expiry tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(a *auth.Authenticator) *fakeClock {
	c := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	auth.SetClock(a, c.Now)
	return c
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestCheck(t *testing.T) {
	tooLong := append([]byte("Basic "), []byte(strings.Repeat(" ", auth.MaxValueLen))...)
	tooLong = append(tooLong, b64("alice:"+alicePW)...)
	tests := []struct {
		name     string
		value    []byte
		wantUser string
		wantOK   bool
		compares int64 // bcrypt comparisons expected
	}{
		{"bcrypt user", basic("alice", alicePW), "alice", true, 1},
		{"plain user", basic("bob", bobPW), "bob", true, 1},
		{"colons in password", basic("carol", carolPW), "carol", true, 1},
		{"utf-8 plain password", basic("dave", davePW), "dave", true, 1},
		{"72-byte password", basic("long", long72), "long", true, 1},
		{"lower-case scheme", []byte("basic " + b64("alice:"+alicePW)), "alice", true, 1},
		{"upper-case scheme", []byte("BASIC " + b64("bob:"+bobPW)), "bob", true, 1},
		{"spaces around", []byte(" \tBasic   " + b64("alice:"+alicePW) + " \t"), "alice", true, 1},

		{"bcrypt user wrong password", basic("alice", "alice-pW"), "", false, 1},
		{"bcrypt user empty password", basic("alice", ""), "", false, 1},
		{"bcrypt user password prefix", basic("alice", "alice"), "", false, 1},
		{"bcrypt user other's password", basic("alice", bobPW), "", false, 1},
		{"plain user wrong password", basic("bob", "bob-pwx"), "", false, 1},
		{"plain user empty password", basic("bob", ""), "", false, 1},
		{"plain user password prefix", basic("bob", "bob-p"), "", false, 1},
		{"password cut at first colon", basic("carol", "pa"), "", false, 1},
		{"user name is case-sensitive", basic("Alice", alicePW), "", false, 1},
		{"unknown user", basic("mallory", alicePW), "", false, 1},
		{"unknown user empty password", basic("mallory", ""), "", false, 1},
		{"password over 72 bytes", basic("long", long72+"y"), "", false, 1},
		{"user name with trailing space", basic("alice ", alicePW), "", false, 1},

		{"empty", []byte(""), "", false, 0},
		{"no scheme", []byte(b64("alice:" + alicePW)), "", false, 0},
		{"scheme only", []byte("Basic"), "", false, 0},
		{"scheme and space", []byte("Basic "), "", false, 0},
		{"tab after scheme", []byte("Basic\t" + b64("alice:"+alicePW)), "", false, 0},
		{"scheme glued to token", []byte("Basic" + b64("alice:"+alicePW)), "", false, 0},
		{"longer scheme", []byte("Basicx " + b64("alice:"+alicePW)), "", false, 0},
		{"bearer scheme", []byte("Bearer " + b64("alice:"+alicePW)), "", false, 0},
		{"digest scheme", []byte(`Digest username="alice", realm="rustle"`), "", false, 0},
		{"bad base64 characters", []byte("Basic !!!!"), "", false, 0},
		{"bad base64 length", []byte("Basic " + b64("alice:" + alicePW)[1:]), "", false, 0},
		{"missing padding", []byte("Basic " + strings.TrimRight(b64("bob:"+bobPW+"x"), "=")), "", false, 0},
		{"non-zero trailing bits", []byte("Basic YWxpY2U6YWxpY2UtcHd="), "", false, 0},
		{"newline in token", []byte("Basic " + b64("alice:" + alicePW)[:4] + "\n" + b64("alice:" + alicePW)[4:]), "", false, 0},
		{"two tokens", []byte("Basic " + b64("alice:"+alicePW) + " " + b64("x")), "", false, 0},
		{"no colon", []byte("Basic " + b64("alice"+alicePW)), "", false, 0},
		{"empty user", basic("", alicePW), "", false, 0},
		{"empty credentials", []byte("Basic " + b64("")), "", false, 0},
		{"over MaxValueLen", tooLong, "", false, 0},
	}
	a := newAuth(t, auth.Config{})
	compares := auth.CountCompares(a)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 2 { // the second call is served from the cache
				before := compares.Load()
				user, ok := a.Check(tt.value)
				if user != tt.wantUser || ok != tt.wantOK {
					t.Errorf("call %d: Check(%q) = %q, %v; want %q, %v", i+1, tt.value, user, ok, tt.wantUser, tt.wantOK)
				}
				want := tt.compares
				if i > 0 {
					want = 0
				}
				if got := compares.Load() - before; got != want {
					t.Errorf("call %d: Check(%q) ran bcrypt %d times, want %d", i+1, tt.value, got, want)
				}
			}
		})
	}
}

func TestCheckNoUsers(t *testing.T) {
	a, err := auth.New(auth.Config{})
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	if a.Len() != 0 {
		t.Errorf("Len() = %d, want 0", a.Len())
	}
	if user, ok := a.Check(basic("alice", alicePW)); ok || user != "" {
		t.Errorf("Check with no users = %q, %v; want \"\", false", user, ok)
	}
}

func TestCacheHitAllocs(t *testing.T) {
	a := newAuth(t, auth.Config{})
	compares := auth.CountCompares(a)
	for _, tt := range []struct {
		name   string
		value  []byte
		wantOK bool
	}{
		{"valid bcrypt", basic("alice", alicePW), true},
		{"valid plain", basic("bob", bobPW), true},
		{"wrong password", basic("alice", "nope"), false},
		{"unknown user", basic("mallory", "nope"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := a.Check(tt.value); ok != tt.wantOK {
				t.Fatalf("Check(%q) ok = %v, want %v", tt.value, ok, tt.wantOK)
			}
			before := compares.Load()
			allocs := testing.AllocsPerRun(100, func() {
				if _, ok := a.Check(tt.value); ok != tt.wantOK {
					t.Fatalf("Check(%q) ok = %v on a hit, want %v", tt.value, ok, tt.wantOK)
				}
			})
			if allocs != 0 {
				t.Errorf("Check on a cache hit: %v allocations, want 0", allocs)
			}
			if n := compares.Load() - before; n != 0 {
				t.Errorf("Check on a cache hit ran bcrypt %d times, want 0", n)
			}
		})
	}
}

func TestWrongNeverRight(t *testing.T) {
	const ttl = time.Minute
	a := newAuth(t, auth.Config{CacheTTL: ttl})
	clock := newFakeClock(a)
	compares := auth.CountCompares(a)
	right := basic("alice", alicePW)
	wrongs := [][]byte{
		basic("alice", "wrong"),
		basic("alice", alicePW+"x"),
		basic("bob", "wrong"),
		basic("mallory", alicePW),
		[]byte("basic " + b64("alice:wrong")), // same credentials, different value
	}
	for round := range 3 {
		for i := range 50 {
			for _, w := range wrongs {
				if user, ok := a.Check(w); ok || user != "" {
					t.Fatalf("round %d try %d: Check(%q) = %q, %v; want \"\", false", round, i, w, user, ok)
				}
			}
			if user, ok := a.Check(right); !ok || user != "alice" {
				t.Fatalf("round %d try %d: Check(right) = %q, %v; want alice, true", round, i, user, ok)
			}
		}
		clock.Advance(ttl) // every verdict expires
	}
	// One bcrypt comparison per distinct value per TTL period.
	if got, want := compares.Load(), int64(3*(len(wrongs)+1)); got != want {
		t.Errorf("bcrypt ran %d times, want %d", got, want)
	}
}

func TestTTLExpiry(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration
		want time.Duration // effective TTL
	}{
		{"explicit", 2 * time.Second, 2 * time.Second},
		{"default", 0, auth.DefaultCacheTTL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAuth(t, auth.Config{CacheTTL: tt.ttl})
			clock := newFakeClock(a)
			compares := auth.CountCompares(a)
			for _, v := range [][]byte{basic("alice", alicePW), basic("alice", "wrong")} {
				before := compares.Load()
				wantOK := strings.Contains(string(v), b64("alice:"+alicePW))
				check := func(step string, wantCompares int64) {
					t.Helper()
					if _, ok := a.Check(v); ok != wantOK {
						t.Fatalf("%s: Check(%q) ok = %v, want %v", step, v, ok, wantOK)
					}
					if got := compares.Load() - before; got != wantCompares {
						t.Fatalf("%s: bcrypt ran %d times, want %d", step, got, wantCompares)
					}
				}
				check("first", 1)
				clock.Advance(tt.want - time.Nanosecond)
				check("just before expiry", 1)
				clock.Advance(time.Nanosecond)
				check("at expiry", 2)
				check("after refresh", 2)
			}
		})
	}
}

func TestCacheBounded(t *testing.T) {
	for _, size := range []int{1, 2, 3, 10, 17, 64} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a := newAuth(t, auth.Config{CacheSize: size})
			newFakeClock(a) // nothing expires
			skipBcrypt(a)
			for i := range 3*size + 10 {
				if _, ok := a.Check(basic("mallory", fmt.Sprint(i))); ok {
					t.Fatalf("Check(mallory:%d) ok", i)
				}
				if n := auth.CacheLen(a); n > size || n < 1 {
					t.Fatalf("after %d values: %d cached verdicts, want 1 to %d", i+1, n, size)
				}
			}
		})
	}
}

func TestCacheKeepsValidUnderFlood(t *testing.T) {
	// 32 entries: 16 shards of 2, so each shard can hold one valid and one
	// wrong verdict, and wrong ones are evicted first.
	a := newAuth(t, auth.Config{CacheSize: 32})
	newFakeClock(a)
	skipBcrypt(a) // bob's verdict does not depend on bcrypt
	compares := auth.CountCompares(a)
	right := basic("bob", bobPW)
	if _, ok := a.Check(right); !ok {
		t.Fatal("Check(right) not ok")
	}
	for i := range 300 {
		a.Check(basic("bob", fmt.Sprint(i)))
	}
	before := compares.Load()
	if _, ok := a.Check(right); !ok {
		t.Fatal("Check(right) not ok after flood")
	}
	if n := compares.Load() - before; n != 0 {
		t.Errorf("valid verdict was evicted by wrong ones: bcrypt ran %d times, want 0", n)
	}
	if n := auth.CacheLen(a); n > 32 {
		t.Errorf("%d cached verdicts, want at most 32", n)
	}
}

func TestConcurrentSameValueOneBcrypt(t *testing.T) {
	a := newAuth(t, auth.Config{})
	entered := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	auth.WrapCompare(a, func(compare func(h, p []byte) error, h, p []byte) error {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		return compare(h, p)
	})
	const n = 16
	for _, tt := range []struct {
		value []byte
		ok    bool
	}{{basic("alice", alicePW), true}, {basic("alice", "wrong"), false}} {
		calls.Store(0)
		entered = make(chan struct{})
		release = make(chan struct{})
		var wg sync.WaitGroup
		results := make(chan bool, n)
		for range n {
			wg.Go(func() {
				_, ok := a.Check(tt.value)
				results <- ok
			})
		}
		<-entered
		time.Sleep(10 * time.Millisecond) // let the others reach the wait; the count holds either way
		close(release)
		wg.Wait()
		close(results)
		for ok := range results {
			if ok != tt.ok {
				t.Errorf("Check(%q) ok = %v, want %v", tt.value, ok, tt.ok)
			}
		}
		if c := calls.Load(); c != 1 {
			t.Errorf("%d concurrent Checks of one value ran bcrypt %d times, want 1", n, c)
		}
	}
}

func TestConcurrent(t *testing.T) {
	a := newAuth(t, auth.Config{CacheSize: 8}) // small: evictions and misses interleave with hits
	type cred struct {
		value []byte
		user  string
		ok    bool
	}
	creds := []cred{
		{basic("alice", alicePW), "alice", true},
		{basic("bob", bobPW), "bob", true},
		{basic("carol", carolPW), "carol", true},
		{basic("alice", "wrong"), "", false},
		{basic("bob", "wrong"), "", false},
		{basic("mallory", "x"), "", false},
		{[]byte("Bearer x"), "", false},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				c := creds[(g+i)%len(creds)]
				if user, ok := a.Check(c.value); user != c.user || ok != c.ok {
					errs <- fmt.Errorf("goroutine %d: Check(%q) = %q, %v; want %q, %v", g, c.value, user, ok, c.user, c.ok)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one := write("one", "# users\nalice:"+hashOf(t, alicePW)+"\n\ncarol:"+hashOf(t, carolPW)+"\n")
	two := write("two", "erin:"+hashOf(t, "erin-pw")+"\r\n")
	dupAlice := write("dup", "\n\nalice:"+hashOf(t, "other")+"\n")
	bad := write("bad", "alice:"+hashOf(t, alicePW)+"\nbob:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n")
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name    string
		cfg     auth.Config
		wantLen int
		wantErr []string // substrings of the error; nil = no error
	}{
		{"files and inline", auth.Config{Files: []string{one, two}, Users: []auth.User{{Name: "bob", Password: bobPW}}}, 4, nil},
		{"empty", auth.Config{}, 0, nil},
		{"duplicate across files", auth.Config{Files: []string{one, dupAlice}},
			0, []string{"auth: htpasswd " + dupAlice + ":3:", `"alice"`, one + ":2"}},
		{"inline duplicates file", auth.Config{Files: []string{one}, Users: []auth.User{{Name: "carol", Password: "x"}}},
			0, []string{`inline user "carol"`, one + ":4"}},
		{"inline duplicate", auth.Config{Users: []auth.User{{Name: "bob", Password: "x"}, {Name: "bob", Password: "y"}}},
			0, []string{`"bob" defined twice`}},
		{"bad file", auth.Config{Files: []string{one, bad}}, 0, []string{bad + ":2:", "{SHA}", "only bcrypt"}},
		{"missing file", auth.Config{Files: []string{missing}}, 0, []string{"auth: open htpasswd " + missing}},
		{"both password and bcrypt", auth.Config{Users: []auth.User{{Name: "x", Password: "p", Bcrypt: hashOf(t, "p")}}}, 0, []string{"both"}},
		{"neither password nor bcrypt", auth.Config{Users: []auth.User{{Name: "x"}}}, 0, []string{"neither"}},
		{"inline non-bcrypt hash", auth.Config{Users: []auth.User{{Name: "x", Bcrypt: "$apr1$abc$def"}}}, 0, []string{"$apr1$", "only bcrypt"}},
		{"inline malformed bcrypt", auth.Config{Users: []auth.User{{Name: "x", Bcrypt: hashOf(t, "p")[:59]}}}, 0, []string{"malformed bcrypt"}},
		{"empty name", auth.Config{Users: []auth.User{{Password: "p"}}}, 0, []string{"empty user name"}},
		{"colon in name", auth.Config{Users: []auth.User{{Name: "a:b", Password: "p"}}}, 0, []string{"contains ':'"}},
		{"control in name", auth.Config{Users: []auth.User{{Name: "a\nb", Password: "p"}}}, 0, []string{"control character"}},
		{"control in realm", auth.Config{Realm: "a\r\nX-Evil: 1"}, 0, []string{"realm"}},
		{"negative TTL", auth.Config{CacheTTL: -time.Second}, 0, []string{"negative cache TTL"}},
		{"negative size", auth.Config{CacheSize: -1}, 0, []string{"negative cache size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := auth.New(tt.cfg)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if a.Len() != tt.wantLen {
					t.Errorf("Len() = %d, want %d", a.Len(), tt.wantLen)
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want error containing %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("New error %q does not contain %q", err, s)
				}
			}
		})
	}

	t.Run("missing file is ErrNotExist", func(t *testing.T) {
		_, err := auth.New(auth.Config{Files: []string{missing}})
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("New error %v is not os.ErrNotExist", err)
		}
	})
	t.Run("bad file is ParseError", func(t *testing.T) {
		_, err := auth.New(auth.Config{Files: []string{bad}})
		var pe *auth.ParseError
		if !errors.As(err, &pe) || pe.File != bad || pe.Line != 2 || !errors.Is(err, auth.ErrUnsupportedHash) {
			t.Errorf("New error %v: want *ParseError at %s:2 wrapping ErrUnsupportedHash", err, bad)
		}
	})
	t.Run("file users authenticate", func(t *testing.T) {
		a := newAuth(t, auth.Config{Files: []string{one, two}, Users: []auth.User{{Name: "bob", Password: bobPW}}})
		for _, c := range []struct{ user, pass string }{{"alice", alicePW}, {"carol", carolPW}, {"erin", "erin-pw"}, {"bob", bobPW}} {
			if user, ok := a.Check(basic(c.user, c.pass)); !ok || user != c.user {
				t.Errorf("Check(%s) = %q, %v; want %q, true", c.user, user, ok, c.user)
			}
		}
	})
}

func TestChallenge(t *testing.T) {
	tests := []struct{ realm, want string }{
		{"", `Basic realm="rustle"`},
		{"corp proxy", `Basic realm="corp proxy"`},
		{`say "hi" \o/`, `Basic realm="say \"hi\" \\o/"`},
	}
	for _, tt := range tests {
		a := newAuth(t, auth.Config{Realm: tt.realm})
		if got := a.Challenge(); got != tt.want {
			t.Errorf("realm %q: Challenge() = %s, want %s", tt.realm, got, tt.want)
		}
	}
}

func TestDummyCost(t *testing.T) {
	tests := []struct {
		name  string
		costs []int // bcrypt users' costs
		want  int
	}{
		{"no bcrypt users", nil, bcrypt.MinCost},
		{"one", []int{5}, 5},
		{"most common", []int{4, 5, 5, 6}, 5},
		{"tie takes higher", []int{4, 6, 4, 6}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			users := []auth.User{{Name: "plain", Password: "p"}}
			for i, c := range tt.costs {
				users = append(users, auth.User{Name: fmt.Sprint("u", i), Bcrypt: hashAt(t, "pw", c)})
			}
			a := newAuth(t, auth.Config{Users: users})
			if got := auth.DummyCost(a); got != tt.want {
				t.Errorf("dummy hash cost = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestHashPassword(t *testing.T) {
	h, err := auth.HashPassword("s3cret")
	if err != nil {
		t.Fatalf("HashPassword: %v", err)
	}
	if cost, err := bcrypt.Cost([]byte(h)); err != nil || cost != bcrypt.DefaultCost {
		t.Errorf("bcrypt.Cost(%q) = %d, %v; want %d", h, cost, err, bcrypt.DefaultCost)
	}
	users, err := auth.ParseHtpasswd(strings.NewReader("zed:"+h+"\n"), "generated")
	if err != nil {
		t.Fatalf("ParseHtpasswd of a HashPassword line: %v", err)
	}
	if len(users) != 1 || users[0].Bcrypt != h {
		t.Errorf("ParseHtpasswd of a HashPassword line = %+v, want zed with the hash", users)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(h), []byte("s3cret")); err != nil {
		t.Errorf("HashPassword result does not verify: %v", err)
	}

	if _, err := auth.HashPassword(""); err == nil {
		t.Error("HashPassword(\"\") succeeded, want error")
	}
	if _, err := auth.HashPassword(long72 + "x"); !errors.Is(err, bcrypt.ErrPasswordTooLong) {
		t.Errorf("HashPassword(73 bytes) error = %v, want bcrypt.ErrPasswordTooLong", err)
	}
}

func TestCheckUserPassword(t *testing.T) {
	long255 := strings.Repeat("u", 255)
	tests := []struct {
		name     string
		user     string
		pass     string
		wantUser string
		compares int64 // bcrypt comparisons expected on the first call
	}{
		{"bcrypt user", "alice", alicePW, "alice", 1},
		{"plain user", "bob", bobPW, "bob", 1},
		{"colons in password", "carol", carolPW, "carol", 1},
		{"utf-8 plain password", "dave", davePW, "dave", 1},
		{"72-byte password", "long", long72, "long", 1},

		{"bcrypt user wrong password", "alice", "alice-pW", "", 1},
		{"plain user wrong password", "bob", "bob-pwx", "", 1},
		{"empty password", "bob", "", "", 1},
		{"password over 72 bytes", "long", long72 + "y", "", 1},
		{"unknown user", "mallory", alicePW, "", 1},
		{"user name is case-sensitive", "Alice", alicePW, "", 1},
		{"longest RFC 1929 pair", long255, long255, "", 1},

		{"empty user", "", alicePW, "", 0},
		{"colon in user", "alice:alice", "pw", "", 0},
		{"colon moved from password", "carol:pa", "ss:word", "", 0},
		{"too long to encode", long255, strings.Repeat("p", 600), "", 0},
	}
	a := newAuth(t, auth.Config{})
	compares := auth.CountCompares(a)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 2 { // the second call is served from the cache
				before := compares.Load()
				user, ok := a.CheckUserPassword([]byte(tt.user), []byte(tt.pass))
				if user != tt.wantUser || ok != (tt.wantUser != "") {
					t.Errorf("call %d: CheckUserPassword(%q, %q) = %q, %v; want %q, %v",
						i+1, tt.user, tt.pass, user, ok, tt.wantUser, tt.wantUser != "")
				}
				want := tt.compares
				if i > 0 {
					want = 0
				}
				if got := compares.Load() - before; got != want {
					t.Errorf("call %d: ran bcrypt %d times, want %d", i+1, got, want)
				}
			}
		})
	}
}

// TestCheckUserPasswordSharesCache checks that a verdict reached through
// Check serves CheckUserPassword and the other way round, and that hits
// allocate nothing.
func TestCheckUserPasswordSharesCache(t *testing.T) {
	a := newAuth(t, auth.Config{})
	compares := auth.CountCompares(a)
	if _, ok := a.Check(basic("alice", alicePW)); !ok {
		t.Fatal("Check(alice) not ok")
	}
	if user, ok := a.CheckUserPassword([]byte("alice"), []byte(alicePW)); !ok || user != "alice" {
		t.Fatalf("CheckUserPassword(alice) = %q, %v; want alice, true", user, ok)
	}
	if _, ok := a.CheckUserPassword([]byte("bob"), []byte("wrong")); ok {
		t.Fatal("CheckUserPassword(bob, wrong) ok")
	}
	if _, ok := a.Check(basic("bob", "wrong")); ok {
		t.Fatal("Check(bob, wrong) ok")
	}
	if n := compares.Load(); n != 2 {
		t.Errorf("bcrypt ran %d times for two distinct credentials checked both ways, want 2", n)
	}
	user, pass := []byte("alice"), []byte(alicePW)
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := a.CheckUserPassword(user, pass); !ok {
			t.Fatal("CheckUserPassword not ok on a hit")
		}
	})
	if allocs != 0 {
		t.Errorf("CheckUserPassword on a cache hit: %v allocations, want 0", allocs)
	}
}

func BenchmarkCheckHit(b *testing.B) {
	a := newAuth(b, auth.Config{})
	v := basic("alice", alicePW)
	if _, ok := a.Check(v); !ok {
		b.Fatal("Check not ok")
	}
	b.ReportAllocs()
	for b.Loop() {
		a.Check(v)
	}
}

func BenchmarkCheckHitParallel(b *testing.B) {
	a := newAuth(b, auth.Config{})
	values := [][]byte{basic("alice", alicePW), basic("bob", bobPW), basic("carol", carolPW), basic("alice", "wrong")}
	for _, v := range values {
		a.Check(v)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			a.Check(values[i%len(values)])
			i++
		}
	})
}

// TestOnly checks a view restricted to some users: it refuses the others'
// right credentials (Basic and SOCKS5 alike) as an unknown user's, shares
// the verdict cache with the Authenticator it came from without either
// changing the other's verdicts, allocates nothing on a hit, and allows
// only its users' names to other means of authentication.
func TestOnly(t *testing.T) {
	a := newAuth(t, auth.Config{})
	compares := auth.CountCompares(a) // before Only: the view compares through it too
	v := a.Only([]string{"alice", "bob", "mallory"})

	tests := []struct {
		name       string
		user, pass string
		onView     string // the user the view accepts; "" = refused
		onAll      string // the user a accepts
	}{
		{"listed bcrypt user", "alice", alicePW, "alice", "alice"},
		{"listed plain user", "bob", bobPW, "bob", "bob"},
		{"unlisted bcrypt user", "carol", carolPW, "", "carol"},
		{"unlisted plain user", "dave", davePW, "", "dave"},
		{"listed user, wrong password", "alice", "wrong", "", ""},
		{"listed but unknown", "mallory", "x", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The view asks first: its refusal must not stick to a's verdict.
			before := compares.Load()
			if user, ok := v.Check(basic(tt.user, tt.pass)); user != tt.onView || ok != (tt.onView != "") {
				t.Errorf("view: Check = %q, %v; want %q", user, ok, tt.onView)
			}
			if user, ok := v.CheckUserPassword([]byte(tt.user), []byte(tt.pass)); user != tt.onView || ok != (tt.onView != "") {
				t.Errorf("view: CheckUserPassword = %q, %v; want %q", user, ok, tt.onView)
			}
			if user, ok := a.Check(basic(tt.user, tt.pass)); user != tt.onAll || ok != (tt.onAll != "") {
				t.Errorf("all users: Check = %q, %v; want %q", user, ok, tt.onAll)
			}
			if n := compares.Load() - before; n != 1 {
				t.Errorf("bcrypt ran %d times for one credential asked of both, want 1 (one shared cache)", n)
			}
			if got, want := v.Has(tt.user), tt.onView != "" || tt.user == "alice"; got != want {
				t.Errorf("view: Has(%q) = %v, want %v", tt.user, got, want)
			}
		})
	}
	if n := v.Len(); n != 2 {
		t.Errorf("view: Len = %d, want 2 (alice and bob; mallory is no user)", n)
	}
	if v.Challenge() != a.Challenge() {
		t.Errorf("view: Challenge %q, want %q", v.Challenge(), a.Challenge())
	}

	for _, tt := range []struct {
		a    *auth.Authenticator
		name string
		want bool
	}{
		{a, "erin", true}, // every name: a certificate's user need not be configured
		{v, "alice", true},
		{v, "carol", false},
		{v, "erin", false},
		{nil, "erin", true},
		{a.Only(nil), "alice", false},
	} {
		if got := tt.a.Allows(tt.name); got != tt.want {
			t.Errorf("Allows(%q) = %v, want %v (view of %d users)", tt.name, got, tt.want, tt.a.Len())
		}
	}
	if _, ok := a.Only(nil).Check(basic("alice", alicePW)); ok {
		t.Error("a view of no users accepted alice")
	}

	carol := basic("carol", carolPW)
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := v.Check(carol); ok {
			t.Fatal("view accepted carol on a hit")
		}
	})
	if allocs != 0 {
		t.Errorf("a view's refusal on a cache hit: %v allocations, want 0", allocs)
	}
}

// TestAppendBasicUser checks that the user name a value tries is the one
// Check reads, that nothing of the password is returned, and that a
// value which is no Basic credential names nobody.
func TestAppendBasicUser(t *testing.T) {
	basic := func(cred string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(cred)) }
	tests := []struct {
		name, value, want string
	}{
		{"basic", basic("alice:secret"), "alice"},
		{"scheme in any case, spaces around", "  bAsIc   " + base64.StdEncoding.EncodeToString([]byte("bob:pw")) + "\t", "bob"},
		{"colons in the password", basic("carol:pa:ss:word"), "carol"},
		{"empty password", basic("dave:"), "dave"},
		{"bytes beyond ASCII", basic("zoë \x01:pw"), "zoë \x01"},
		{"no colon", basic("alice"), ""},
		{"empty user", basic(":pw"), ""},
		{"another scheme", "Bearer " + base64.StdEncoding.EncodeToString([]byte("alice:pw")), ""},
		{"not base64", "Basic al!ce", ""},
		{"unpadded", "Basic " + base64.RawStdEncoding.EncodeToString([]byte("alice:p")), ""},
		{"empty", "", ""},
		{"too long", basic("alice:" + strings.Repeat("x", auth.MaxValueLen)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := auth.AppendBasicUser([]byte("pre:"), []byte(tt.value))
			if string(got) != "pre:"+tt.want {
				t.Errorf("AppendBasicUser(%q) = %q, want %q", tt.value, got, "pre:"+tt.want)
			}
		})
	}
	value, dst := []byte(basic("alice:secret")), make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { dst = auth.AppendBasicUser(dst[:0], value) }); n != 0 {
		t.Errorf("AppendBasicUser allocates %v times", n)
	}
}
