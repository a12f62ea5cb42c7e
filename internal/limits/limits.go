// Package limits enforces rustle's resource limits: client connections
// open in total, per client address and per user; new connections per
// second per client address; failed authentications per client address
// and user name tried, after which that name cools down at that address,
// and per client address whatever the names, after which the whole
// address cools down; and bytes per second per user, by default or, for
// the users a [Schedule] selects, by time of day.
//
// A [Limiter] is shared by every listener. Every accept path asks
// [Limiter.Admit] for each accepted connection, through
// gate.Policy.Admit, and [Limiter.Release] is called when it ends;
// the proxies report users ([Limiter.UserConn], [Limiter.UserDone]) and
// failed authentications ([Limiter.AuthFailed]), ask before they check
// credentials whether their address and name are cooling down
// ([Limiter.CoolingDownAs]) and pace users' bytes through
// [Limiter.Throttle]. Per-address state is dropped once it no longer
// holds anything, so memory follows the clients active recently; the user
// names tried, which clients choose, are tracked in a table of bounded
// size.
package limits

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Config configures a Limiter. A zero limit is off; the settings of a
// limit that is on are required (config.SetDefaults fills them).
type Config struct {
	// MaxConns bounds client connections open at once, and with them
	// the further upstream connections a client connection holds at once
	// (see [Limiter.Extra]), each counted as one; 0 = no limit.
	MaxConns int
	// MaxConnsPerClient bounds the connections of one client address;
	// 0 = no limit.
	MaxConnsPerClient int
	// MaxConnsPerUser bounds the connections authenticated as one user;
	// 0 = no limit.
	MaxConnsPerUser int
	// ConnRate is the new connections per second one client address may
	// open, from a bucket of ConnBurst; 0 = no limit.
	ConnRate float64
	// ConnBurst is the size of that bucket; at least 1 with a ConnRate.
	ConnBurst int
	// AuthFailures is the failed authentications from one address with
	// one user name within AuthWindow that start a cool-down of
	// AuthCooldown for that name at that address (other names from the
	// address go on); 0 = off.
	AuthFailures int
	// AuthFailuresPerAddress is the failed authentications from one
	// address, whatever the names tried, within AuthWindow that start a
	// cool-down of AuthCooldown for the whole address; 0 = off.
	AuthFailuresPerAddress int
	// AuthWindow is the window failures are counted in; required with
	// AuthFailures or AuthFailuresPerAddress.
	AuthWindow time.Duration
	// AuthCooldown is how long an address, or a name at an address, is
	// refused; required with AuthFailures or AuthFailuresPerAddress.
	AuthCooldown time.Duration
	// AuthNames bounds the (address, user name) pairs whose failures are
	// tracked at once; 0 = DefaultAuthNames.
	AuthNames int
	// AuthNamesPerClient bounds the user names tracked for one address;
	// 0 = DefaultAuthNamesPerClient.
	AuthNamesPerClient int
	// UserBytesPerSecond paces each user's bytes; 0 = no limit.
	UserBytesPerSecond int64
	// UserBytesBurst is the size of each user's byte bucket; required
	// with UserBytesPerSecond.
	UserBytesBurst int64
	// Schedules set the byte rate of the users they select while their
	// windows hold, in place of UserBytesPerSecond: for a user, the first
	// schedule selecting it whose window holds decides, and none that
	// holds leaves UserBytesPerSecond. A user a schedule selects has a
	// byte bucket even when UserBytesPerSecond is 0, which does not limit
	// it outside the windows. The rate in effect is chosen again at each
	// minute of the clock, for the user's open connections too (see
	// [Bucket.Take]). nil = none.
	Schedules []Schedule
	// Logger receives the cool-down and refusal warnings; nil = discard.
	Logger *slog.Logger
}

// Verdict is Admit's answer.
type Verdict uint8

// Admit's verdicts.
const (
	// OK admits the connection; Release must follow.
	OK Verdict = iota
	// TooMany refuses a connection past MaxConns (HTTP: 503).
	TooMany
	// TooManyFromClient refuses a connection past MaxConnsPerClient
	// (HTTP: 429).
	TooManyFromClient
	// TooFast refuses a connection past ConnRate (HTTP: 429).
	TooFast
	// CoolingDown refuses an address that failed to authenticate too
	// often (HTTP: 429 with Retry-After).
	CoolingDown
	// TooManyForUser refuses a further upstream of a user past
	// MaxConnsPerUser (see [Limiter.Extra]; HTTP: 429).
	TooManyForUser
)

var verdictNames = [...]string{"ok", "too many connections", "too many connections from the client",
	"too many new connections from the client", "client cooling down after failed authentications",
	"too many connections for the user"}

// String describes v.
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "unknown"
}

// sweepEvery is how often Admit drops per-address state that holds
// nothing.
const sweepEvery = 30 * time.Second

// The bounds of the table of user names tried, by default. A name takes
// an entry at its first failure, about 100 bytes: 6.5 MB at most.
const (
	// DefaultAuthNames is the (address, user name) pairs tracked at once.
	DefaultAuthNames = 1 << 16
	// DefaultAuthNamesPerClient is the user names tracked for one address.
	DefaultAuthNamesPerClient = 256
)

// nameSweepEvery bounds how often a full table of names is swept for
// room.
const nameSweepEvery = time.Second

// warnEvery bounds the refusal warnings to one per kind per interval.
const warnEvery = 10 * time.Second

// Limiter enforces the limits of its Config. It is safe for concurrent
// use.
type Limiter struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	seed maphash.Seed // keys the user names tried

	mu            sync.Mutex
	total         int                          // connections admitted and not released; guarded by mu
	clients       map[netip.Addr]*client       // guarded by mu
	users         map[string]*user             // guarded by mu
	names         int                          // entries in every client's names; guarded by mu
	lastSweep     time.Time                    // guarded by mu
	lastNameSweep time.Time                    // guarded by mu
	refused       [len(verdictNames)]int       // refusals since the last warning, by verdict; guarded by mu
	lastWarn      [len(verdictNames)]time.Time // guarded by mu
	// others returns the connections of a user that other instances
	// hold (see SetShared); nil = none. Guarded by mu.
	others func(user string) int
}

// client is the state of one client address.
type client struct {
	conns    int
	tokens   float64   // connection-rate bucket
	refilled time.Time // when tokens was last brought up to date
	// The address's failed authentications, every name together, and
	// its cool-down.
	fails failures
	// names holds the failures of each user name tried from the address,
	// by the name's keyed hash; nil until the first.
	names map[uint64]failures
}

// failures counts failed authentications within a window, and the
// cool-down they started.
type failures struct {
	n           int
	windowStart time.Time
	bannedUntil time.Time
}

// live reports whether f still holds anything at now: failures within
// the window, or a cool-down.
func (f *failures) live(now time.Time, window time.Duration) bool {
	return now.Before(f.bannedUntil) || f.n > 0 && now.Sub(f.windowStart) < window
}

// add counts a failure at now and reports whether it reaches limit, in
// which case f cools down from now for cooldown and counts afresh.
func (f *failures) add(now time.Time, limit int, window, cooldown time.Duration) (int, bool) {
	if f.n == 0 || now.Sub(f.windowStart) >= window {
		f.n, f.windowStart = 0, now
	}
	f.n++
	if f.n < limit {
		return f.n, false
	}
	n := f.n
	f.n, f.bannedUntil = 0, now.Add(cooldown)
	return n, true
}

// user is the state of one user.
type user struct {
	conns  int
	bucket *Bucket
}

// New returns a Limiter for cfg. It refuses a limit that lacks a
// setting it needs (config.SetDefaults gives each one): a connection
// rate without a burst, failed-authentication limits without a window or
// a cool-down, a byte rate without a burst; and a negative value.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.AuthNames <= 0 {
		cfg.AuthNames = DefaultAuthNames
	}
	if cfg.AuthNamesPerClient <= 0 {
		cfg.AuthNamesPerClient = DefaultAuthNamesPerClient
	}
	cfg.Schedules = slices.Clone(cfg.Schedules)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{
		cfg:     cfg,
		log:     log,
		now:     time.Now,
		seed:    maphash.MakeSeed(),
		clients: make(map[netip.Addr]*client),
		users:   make(map[string]*user),
	}, nil
}

// check returns what is wrong with c: a negative value, or a limit
// without the setting it needs.
func (c *Config) check() error {
	switch {
	case c.MaxConns < 0 || c.MaxConnsPerClient < 0 || c.MaxConnsPerUser < 0 || c.ConnRate < 0 || c.ConnBurst < 0 ||
		c.AuthFailures < 0 || c.AuthFailuresPerAddress < 0 || c.AuthWindow < 0 || c.AuthCooldown < 0 ||
		c.UserBytesPerSecond < 0 || c.UserBytesBurst < 0:
		return errors.New("limits: a negative limit")
	case c.ConnRate > 0 && c.ConnBurst < 1:
		return fmt.Errorf("limits: a connection rate of %g per second needs a burst of at least 1", c.ConnRate)
	case (c.AuthFailures > 0 || c.AuthFailuresPerAddress > 0) && c.AuthWindow == 0:
		return errors.New("limits: failed-authentication limits need a window")
	case (c.AuthFailures > 0 || c.AuthFailuresPerAddress > 0) && c.AuthCooldown == 0:
		return errors.New("limits: failed-authentication limits need a cool-down")
	case c.UserBytesPerSecond > 0 && c.UserBytesBurst == 0:
		return fmt.Errorf("limits: a rate of %d bytes per second needs a burst", c.UserBytesPerSecond)
	}
	return nil
}

// Admit decides whether a new connection from addr may be served. On OK
// the connection is counted until Release(addr); otherwise nothing is
// counted, and for CoolingDown retry is the time left.
func (l *Limiter) Admit(addr netip.Addr) (v Verdict, retry time.Duration) {
	addr = addr.Unmap()
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= sweepEvery {
		l.sweepLocked(now)
	}
	c := l.clients[addr]
	switch {
	case c != nil && now.Before(c.fails.bannedUntil):
		v, retry = CoolingDown, c.fails.bannedUntil.Sub(now)
	case l.cfg.MaxConns > 0 && l.total >= l.cfg.MaxConns:
		v = TooMany
	case l.cfg.MaxConnsPerClient > 0 && c != nil && c.conns >= l.cfg.MaxConnsPerClient:
		v = TooManyFromClient
	}
	if v == OK && l.cfg.ConnRate > 0 {
		if c == nil {
			c = l.newClientLocked(addr, now)
		}
		l.refillLocked(c, now)
		if c.tokens < 1 {
			v = TooFast
		} else {
			c.tokens--
		}
	}
	if v != OK {
		l.refusedLocked(v, now)
		return v, retry
	}
	if c == nil {
		c = l.newClientLocked(addr, now)
	}
	c.conns++
	l.total++
	return OK, 0
}

func (l *Limiter) newClientLocked(addr netip.Addr, now time.Time) *client {
	c := &client{tokens: float64(l.cfg.ConnBurst), refilled: now}
	l.clients[addr] = c
	return c
}

// refillLocked brings c's connection-rate bucket up to date.
func (l *Limiter) refillLocked(c *client, now time.Time) {
	if el := now.Sub(c.refilled); el > 0 {
		c.tokens = min(float64(l.cfg.ConnBurst), c.tokens+el.Seconds()*l.cfg.ConnRate)
		c.refilled = now
	}
}

// refusedLocked counts a refusal and logs a warning at most every
// warnEvery per verdict.
func (l *Limiter) refusedLocked(v Verdict, now time.Time) {
	l.refused[v]++
	if now.Sub(l.lastWarn[v]) < warnEvery {
		return
	}
	l.log.Warn("connections refused", "reason", v.String(), "refused", l.refused[v], "open", l.total)
	l.refused[v] = 0
	l.lastWarn[v] = now
}

// Release ends the count of a connection Admit admitted.
func (l *Limiter) Release(addr netip.Addr) {
	addr = addr.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if c := l.clients[addr]; c != nil {
		c.conns--
	}
}

// Extra counts an upstream connection that a client connection holds
// beyond the one its admission covers (a further HTTP/2 stream's): as
// one connection against MaxConns and, when name (a user) is not "", as one of
// name's connections against MaxConnsPerUser, so that multiplexed
// streams cannot hold more descriptors than as many connections would.
// It returns OK, TooMany or TooManyForUser; nothing is counted unless
// OK, which is to be matched by one ExtraDone(name).
func (l *Limiter) Extra(name string) Verdict {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.MaxConns > 0 && l.total >= l.cfg.MaxConns {
		l.refusedLocked(TooMany, now)
		return TooMany
	}
	var u *user
	if name != "" && l.cfg.MaxConnsPerUser > 0 {
		if u = l.users[name]; u == nil {
			u = &user{}
			l.users[name] = u
		}
		if l.userConnsLocked(name, u) >= l.cfg.MaxConnsPerUser {
			l.refusedLocked(TooManyForUser, now)
			return TooManyForUser
		}
		u.conns++
	}
	l.total++
	return OK
}

// ExtraDone ends the count of an upstream Extra admitted for name.
func (l *Limiter) ExtraDone(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if name != "" && l.cfg.MaxConnsPerUser > 0 {
		if u := l.users[name]; u != nil && u.conns > 0 {
			u.conns--
		}
	}
}

// Conns returns the number of connections admitted and not released,
// the further upstreams Extra counts included.
func (l *Limiter) Conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// sweepLocked drops the state of addresses that hold no connection, no
// failure, no cool-down, no user name's and a full rate bucket.
func (l *Limiter) sweepLocked(now time.Time) {
	l.lastSweep = now
	l.sweepNamesLocked(now)
	for a, c := range l.clients {
		if c.conns > 0 || c.fails.live(now, l.cfg.AuthWindow) || len(c.names) > 0 {
			continue
		}
		if l.cfg.ConnRate > 0 {
			l.refillLocked(c, now)
			if c.tokens < float64(l.cfg.ConnBurst) {
				continue
			}
		}
		delete(l.clients, a)
	}
	for name, u := range l.users {
		if u.conns == 0 && u.bucket == nil {
			delete(l.users, name)
		}
	}
}

// sweepNamesLocked drops the user names that hold no failure within the
// window and no cool-down.
func (l *Limiter) sweepNamesLocked(now time.Time) {
	l.lastNameSweep = now
	for _, c := range l.clients {
		for h, f := range c.names {
			if !f.live(now, l.cfg.AuthWindow) {
				delete(c.names, h)
				l.names--
			}
		}
		if len(c.names) == 0 {
			c.names = nil
		}
	}
}

// authOn reports whether failed authentications are counted at all.
func (l *Limiter) authOn() bool { return l.cfg.AuthFailures > 0 || l.cfg.AuthFailuresPerAddress > 0 }

// nameKey returns the key of a user name tried: its hash under the
// Limiter's seed, so that the table holds no name and a client cannot
// aim two names at one entry.
func (l *Limiter) nameKey(name []byte) uint64 { return maphash.Bytes(l.seed, name) }

// AuthFailed records a failed authentication from addr that tried the
// user name name ("" when the credentials named none). It returns the
// cool-down left when addr, or name at addr, is (now) cooling down, in
// which case the request is to be refused; 0 otherwise; and started,
// true when this very failure started the cool-down (false when it found
// one running). A failure while cooling down is not counted. The failure that reaches
// AuthFailuresPerAddress cools the whole address down and logs one
// warning, which a fail2ban filter may act on:
//
//	msg="auth failures" client=ADDR failures=N window=W cooldown=C
//
// The failure that reaches AuthFailures for one name cools that name
// down at addr alone, and logs a warning of its own, to leave the address
// alone (behind it may be a NAT or many clients):
//
//	msg="auth failures of one user name" client=ADDR user=NAME failures=N window=W cooldown=C
//
// Names are tracked within bounds (AuthNames, AuthNamesPerClient): past
// them the oldest name of the address that is not cooling down is
// forgotten, and a failure that finds no room counts towards the address
// alone.
func (l *Limiter) AuthFailed(addr netip.Addr, name []byte) (wait time.Duration, started bool) {
	if !l.authOn() {
		return 0, false
	}
	addr = addr.Unmap()
	key := l.nameKey(name)
	now := l.now()
	l.mu.Lock()
	c := l.clients[addr]
	if c == nil {
		c = l.newClientLocked(addr, now)
	}
	if left := l.coolingLocked(c, key, now); left > 0 {
		l.mu.Unlock()
		return left, false
	}
	var nAddr, nName int
	var addrBan, nameBan bool
	if l.cfg.AuthFailuresPerAddress > 0 {
		nAddr, addrBan = c.fails.add(now, l.cfg.AuthFailuresPerAddress, l.cfg.AuthWindow, l.cfg.AuthCooldown)
	}
	if l.cfg.AuthFailures > 0 && !addrBan {
		if f, ok := l.nameLocked(c, key, now); ok {
			nName, nameBan = f.add(now, l.cfg.AuthFailures, l.cfg.AuthWindow, l.cfg.AuthCooldown)
			c.names[key] = f
		}
	}
	l.mu.Unlock()
	switch {
	case addrBan:
		l.log.LogAttrs(context.Background(), slog.LevelWarn, "auth failures",
			slog.String("client", addr.String()), slog.Int("failures", nAddr),
			slog.Duration("window", l.cfg.AuthWindow), slog.Duration("cooldown", l.cfg.AuthCooldown))
	case nameBan:
		l.log.LogAttrs(context.Background(), slog.LevelWarn, "auth failures of one user name",
			slog.String("client", addr.String()), slog.String("user", string(name)), slog.Int("failures", nName),
			slog.Duration("window", l.cfg.AuthWindow), slog.Duration("cooldown", l.cfg.AuthCooldown))
	default:
		return 0, false
	}
	return l.cfg.AuthCooldown, true
}

// nameLocked returns the failures of the name keyed key at c, making room
// for a new name within the table's bounds; false when there is none.
func (l *Limiter) nameLocked(c *client, key uint64, now time.Time) (failures, bool) {
	if f, ok := c.names[key]; ok {
		return f, true
	}
	if len(c.names) >= l.cfg.AuthNamesPerClient && !l.forgetOldestLocked(c, now) {
		return failures{}, false
	}
	if l.names >= l.cfg.AuthNames {
		if now.Sub(l.lastNameSweep) >= nameSweepEvery {
			l.sweepNamesLocked(now)
		}
		if l.names >= l.cfg.AuthNames {
			return failures{}, false
		}
	}
	if c.names == nil {
		c.names = make(map[uint64]failures)
	}
	l.names++
	return failures{}, true
}

// forgetOldestLocked drops the name of c whose window started first among
// those not cooling down, and reports whether there was one.
func (l *Limiter) forgetOldestLocked(c *client, now time.Time) bool {
	var oldest uint64
	var at time.Time
	found := false
	for h, f := range c.names {
		if now.Before(f.bannedUntil) {
			continue
		}
		if !found || f.windowStart.Before(at) {
			oldest, at, found = h, f.windowStart, true
		}
	}
	if found {
		delete(c.names, oldest)
		l.names--
	}
	return found
}

// coolingLocked returns the cool-down left for c's address, or for the
// name keyed key at it; 0 when neither cools down.
func (l *Limiter) coolingLocked(c *client, key uint64, now time.Time) time.Duration {
	until := c.fails.bannedUntil
	if f, ok := c.names[key]; ok && f.bannedUntil.After(until) {
		until = f.bannedUntil
	}
	if now.Before(until) {
		return until.Sub(now)
	}
	return 0
}

// CoolingDown returns the cool-down left for addr as a whole, or 0.
func (l *Limiter) CoolingDown(addr netip.Addr) time.Duration {
	if !l.authOn() {
		return 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.clients[addr.Unmap()]; c != nil && now.Before(c.fails.bannedUntil) {
		return c.fails.bannedUntil.Sub(now)
	}
	return 0
}

// CoolingDownAs returns the cool-down left for addr, or for the user name
// name tried from addr, or 0: credentials naming name from addr are then
// to be refused without being checked.
func (l *Limiter) CoolingDownAs(addr netip.Addr, name []byte) time.Duration {
	if !l.authOn() {
		return 0
	}
	addr = addr.Unmap()
	key := l.nameKey(name)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[addr]
	if c == nil {
		return 0
	}
	return l.coolingLocked(c, key, now)
}

// SetShared makes MaxConnsPerUser count, beside a user's connections
// here, others(user): the connections other instances of a cluster hold,
// as of their last report. others is called with the Limiter locked: it
// must not block (no network call) and must not call the Limiter. nil
// counts the connections here alone.
func (l *Limiter) SetShared(others func(user string) int) {
	l.mu.Lock()
	l.others = others
	l.mu.Unlock()
}

// UserConns calls fn with each user that holds connections here and
// their number (MaxConnsPerUser set), for a cluster's report. fn is
// called with the Limiter locked: it must not call it.
func (l *Limiter) UserConns(fn func(user string, conns int)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, u := range l.users {
		if u.conns > 0 {
			fn(name, u.conns)
		}
	}
}

// userConnsLocked returns the connections of user u named name that
// count against MaxConnsPerUser: its own here and other instances'.
func (l *Limiter) userConnsLocked(name string, u *user) int {
	if l.others == nil {
		return u.conns
	}
	return u.conns + l.others(name)
}

// UserConn counts a connection as name's and reports whether it is within
// MaxConnsPerUser; every true is to be matched by one UserDone(name).
func (l *Limiter) UserConn(name string) bool {
	if l.cfg.MaxConnsPerUser <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.users[name]
	if u == nil {
		u = &user{}
		l.users[name] = u
	}
	if l.userConnsLocked(name, u) >= l.cfg.MaxConnsPerUser {
		l.refusedLocked(TooManyFromClient, l.now())
		return false
	}
	u.conns++
	return true
}

// UserDone ends the count of a connection UserConn admitted.
func (l *Limiter) UserDone(name string) {
	if l.cfg.MaxConnsPerUser <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if u := l.users[name]; u != nil && u.conns > 0 {
		u.conns--
	}
}

// Throttle returns the byte bucket of user name, shared by all the user's
// connections, or nil when bytes are not limited (or name is ""). The
// bucket of a user a schedule selects follows the schedules (see
// Config.Schedules); any other's paces at UserBytesPerSecond.
func (l *Limiter) Throttle(name string) *Bucket {
	if name == "" || l.cfg.UserBytesPerSecond <= 0 && len(l.cfg.Schedules) == 0 {
		return nil
	}
	p := l.planFor(name)
	if p == nil && l.cfg.UserBytesPerSecond <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.users[name]
	if u == nil {
		u = &user{}
		l.users[name] = u
	}
	if u.bucket == nil {
		if p != nil {
			u.bucket = newPlannedBucket(p, l.now)
		} else {
			u.bucket = newBucket(float64(l.cfg.UserBytesPerSecond), float64(l.cfg.UserBytesBurst), l.now)
		}
	}
	return u.bucket
}

// unbounded is what Burst reports while a bucket does not limit: no
// bound on the chunks its bytes are moved in.
const unbounded = 1 << 30

// Bucket is a token bucket of bytes. It is safe for concurrent use.
type Bucket struct {
	now  func() time.Time
	plan *plan // the user's schedules; nil = rate and burst are fixed

	mu       sync.Mutex
	rate     float64   // tokens per second; 0 = not limited (a plan outside its windows); guarded by mu
	burst    float64   // guarded by mu
	tokens   float64   // may go negative: a debt paid by waiting; guarded by mu
	refilled time.Time // guarded by mu
	replan   time.Time // when the plan's rate is chosen again; guarded by mu
}

// NewBucket returns a full bucket filling at rate tokens per second up to
// burst.
func NewBucket(rate, burst float64) *Bucket { return newBucket(rate, burst, time.Now) }

// newBucket is NewBucket reading the time from now.
func newBucket(rate, burst float64, now func() time.Time) *Bucket {
	return &Bucket{rate: rate, burst: burst, now: now, tokens: burst, refilled: now()}
}

// newPlannedBucket returns a full bucket whose rate and burst p chooses
// at the time now returns.
func newPlannedBucket(p *plan, now func() time.Time) *Bucket {
	b := &Bucket{plan: p, now: now, refilled: now()}
	b.choose(b.refilled)
	b.tokens = b.burst
	return b
}

// choose sets the rate and burst the plan has at now, keeping a debt and
// at most the new burst of the tokens, and filling the bucket when a
// limit starts; they are chosen again at the next minute of the clock,
// the finest a window is given in. b.mu is held (or b is new).
func (b *Bucket) choose(now time.Time) {
	rate, burst := b.plan.at(now)
	switch {
	case rate <= 0:
		burst = 0
	case b.rate <= 0:
		b.tokens = burst
	default:
		b.tokens = min(b.tokens, burst)
	}
	b.rate, b.burst = rate, burst
	b.replan = now.Truncate(time.Minute).Add(time.Minute)
}

// update refills the bucket up to now and, for a user with schedules,
// chooses its rate again when a minute of the clock began since it last
// did. b.mu is held.
func (b *Bucket) update(now time.Time) {
	if el := now.Sub(b.refilled); el > 0 {
		if b.rate > 0 {
			b.tokens = min(b.burst, b.tokens+el.Seconds()*b.rate)
		}
		b.refilled = now
	}
	if b.plan != nil && !now.Before(b.replan) {
		b.choose(now)
	}
}

// Burst returns the bucket's size now: the most bytes worth moving in
// one chunk. While the bucket does not limit (its user's schedules hold
// no window and there is no default rate) it is 1 GiB, which bounds
// nothing.
func (b *Bucket) Burst() int {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update(now)
	if b.rate <= 0 {
		return unbounded
	}
	return int(b.burst)
}

// Take takes n tokens, going into debt when there are not enough, and
// returns how long the caller must wait for the debt to be paid: 0 when
// the tokens were there. The bucket of a user with schedules first
// chooses its rate again when a minute of the clock began since it last
// did, so that a window's start or end applies to every connection of
// the user from its first Take at or after it (a wait returned before is
// waited out). Outside every window, without a default rate, it takes
// nothing and returns 0; a debt left when a window ends is forgiven, and
// the next window starts with a full bucket.
func (b *Bucket) Take(n int) time.Duration {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update(now)
	if b.rate <= 0 {
		return 0
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// Wait takes n tokens and sleeps until they are paid for, or ctx is done.
func (b *Bucket) Wait(ctx context.Context, n int) error {
	d := b.Take(n)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
