// Package quota counts each user's payload bytes and requests per period
// against the configured quotas.
//
// A [Rule] names its users (each counted alone) or groups (whose members
// count together), a [Period] with its reset time and time zone, and the
// bytes (up and down together) and requests allowed per period. A
// [Tracker] holds one [Counter] per rule and scope (a user, or a group)
// and resolves a user to the counters that apply to it, a [User]: the
// request path asks [User.Begin] before each request (which counts it),
// adds the bytes a request moved at its end with [User.AddBytes], and
// meters a running tunnel's bytes as they move ([User.Meter]), which ends
// the tunnel once a byte quota is spent. None of it allocates, nor waits
// but for the first requests of a counter just made, with a cluster
// (below).
//
// A counter's use is what it knew at its last synchronisation (its base)
// plus what this process counted since (its pending count). Without a
// cluster the pending counts fold into the base and are saved to a state
// file ([Tracker.Save], [Tracker.Load]); with one, package cluster sends
// them to Redis every sync interval and sets the base to the total every
// instance reached ([Counter.Take], [Counter.Settle]); counts sent but
// not confirmed still count here. A counter made on an instance (a
// user's first request there) starts from the totals the others reached:
// package cluster fetches them ([Tracker.SetLoader], [Counter.Loaded]),
// and its first requests wait for them, a bounded time.
package quota

import (
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// Rule is one quota.
type Rule struct {
	// Name names the rule's counters (in metrics, the state file, Redis).
	Name string
	// Users are the users counted, each alone; "*" is every user. They
	// and each of Groups are matched by an [acl.Selector], as every
	// table that selects users matches them.
	Users []string
	// Groups are the groups whose members count together, one count
	// per group; a group Config.Groups does not define has no members.
	Groups []string
	// Period, Reset (the time after midnight it starts at) and Loc (the
	// zone of Reset; nil = UTC) give the windows.
	Period Period
	Reset  time.Duration
	Loc    *time.Location
	// Bytes and Requests are the payload bytes and the requests allowed
	// per window; 0 = not limited.
	Bytes, Requests int64
}

// Window returns the rule's window that holds now.
func (r *Rule) Window(now time.Time) (start, end time.Time) {
	loc := r.Loc
	if loc == nil {
		loc = time.UTC
	}
	return r.Period.Window(now, r.Reset, loc)
}

// Config configures a Tracker.
type Config struct {
	// Rules are the quotas; none = a Tracker that tracks nobody.
	Rules []Rule
	// Groups maps a group to its members' user names.
	Groups map[string][]string
	// Now returns the time; nil = time.Now.
	Now func() time.Time
}

// The kinds a counter counts: indexes of its counts.
const (
	kindBytes = iota
	kindRequests
)

// Counter counts one scope of one rule (a user, or a group) within the
// rule's current window. It is safe for concurrent use.
type Counter struct {
	rule  *Rule
	scope string // the user, or "group:" and the group's name
	now   func() time.Time

	end  atomic.Int64    // the window's end, Unix nanoseconds
	base [2]atomic.Int64 // bytes, requests as of the last sync or fold
	sent [2]atomic.Int64 // bytes, requests Take handed over that no Settle confirmed yet
	pend [2]atomic.Int64 // bytes, requests counted here since the last Take

	// ready is closed once the counter's totals are known to this
	// instance or no longer waited for (Loaded, Release); nil when the
	// Tracker has no loader. wait bounds a Begin's wait for it.
	ready    chan struct{}
	wait     time.Duration
	released sync.Once

	mu      sync.Mutex
	start   int64 // the window's start, Unix nanoseconds; guarded by mu (written with end)
	settled bool  // a Settle confirmed a sync of this window; guarded by mu
}

// Rule returns the counter's rule.
func (c *Counter) Rule() *Rule { return c.rule }

// Scope returns what the counter counts: a user's name, or "group:NAME".
func (c *Counter) Scope() string { return c.scope }

// roll starts the window that holds now if the counter's has ended.
func (c *Counter) roll(now time.Time) {
	if now.UnixNano() < c.end.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.UnixNano() < c.end.Load() {
		return
	}
	start, end := c.rule.Window(now)
	for k := range c.base {
		c.base[k].Store(0)
		c.sent[k].Store(0)
		c.pend[k].Store(0)
	}
	c.start = start.UnixNano()
	c.settled = false
	c.end.Store(end.UnixNano())
}

// used returns the counter's use of kind k. Counts move from pend to
// sent (Take) and from sent to base (Settle, fold), each added to its
// new place before it leaves its old one; reading them in that order
// (pend, sent, base) never misses a count on the move: at worst a
// reader sees one twice, and refuses early rather than late.
func (c *Counter) used(k int) int64 {
	p := c.pend[k].Load()
	s := c.sent[k].Load()
	return p + s + c.base[k].Load()
}

// over reports whether the counter's quota of kind k is spent.
func (c *Counter) over(k int) bool {
	limit := c.rule.Bytes
	if k == kindRequests {
		limit = c.rule.Requests
	}
	return limit > 0 && c.used(k) >= limit
}

// Window returns the counter's current window, started as of the time.
func (c *Counter) Window() (start, end time.Time) {
	c.roll(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Unix(0, c.start), time.Unix(0, c.end.Load())
}

// Take hands over, for a sync, the counts made here that no Settle
// confirmed yet: the window they belong to (its start, Unix nanoseconds)
// and the bytes and requests, those counted since the last Take and
// those of earlier Takes whose sync failed. They stay counted here until
// Settle confirms them: a sync that waits or fails hides nothing from
// the local check, and the next Take hands them over again. One sync at
// a time: a Take is followed by its Settle, or by the next Take.
func (c *Counter) Take() (start, bytes, requests int64) {
	c.roll(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [2]int64
	for k := range c.pend {
		p := c.pend[k].Load()
		c.sent[k].Add(p) // before it leaves pend: see used
		c.pend[k].Add(-p)
		out[k] = c.sent[k].Load()
	}
	return c.start, out[kindBytes], out[kindRequests]
}

// Settle confirms a sync of the counts Take handed over, bytes and
// requests of the window that starts at start (Unix nanoseconds): the
// counter's base becomes the totals, which include them. It is ignored
// when the counter has moved to another window.
func (c *Counter) Settle(start, sentBytes, sentRequests, bytes, requests int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start != start {
		return
	}
	c.base[kindBytes].Store(bytes) // before the counts leave sent: see used
	c.base[kindRequests].Store(requests)
	c.sent[kindBytes].Add(-sentBytes)
	c.sent[kindRequests].Add(-sentRequests)
	c.settled = true
}

// Loaded sets the totals of the window that starts at start (Unix
// nanoseconds) that every instance reached before this one made the
// counter, bytes and requests, as its loader fetched them (see
// [Tracker.SetLoader]), and lets the requests waiting for them go on
// (see [User.Begin]). The totals are ignored when the counter has moved
// to another window, or when a Settle came first (its totals are
// later).
func (c *Counter) Loaded(start, bytes, requests int64) {
	c.mu.Lock()
	if c.start == start && !c.settled {
		c.base[kindBytes].Store(bytes)
		c.base[kindRequests].Store(requests)
	}
	c.mu.Unlock()
	c.Release()
}

// Release lets the requests waiting for the counter's totals go on
// without them (a loader that could not fetch them): they are checked
// against what this instance knows. A later Loaded still sets them. It
// is idempotent.
func (c *Counter) Release() {
	if c.ready != nil {
		c.released.Do(func() { close(c.ready) })
	}
}

// await waits until the counter's totals are known (Loaded) or not
// waited for (Release), at most the Tracker's loader wait, after which
// it releases the counter itself. It returns at once after that, without
// allocating.
func (c *Counter) await() {
	if c.ready == nil {
		return
	}
	select {
	case <-c.ready:
		return
	default:
	}
	t := time.NewTimer(c.wait)
	defer t.Stop()
	select {
	case <-c.ready:
	case <-t.C:
		c.Release()
	}
}

// fold adds the pending counts to the base: the sync of a lone instance.
func (c *Counter) fold() {
	start, b, r := c.Take()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == start {
		c.base[kindBytes].Add(b) // before the counts leave sent: see used
		c.base[kindRequests].Add(r)
		c.sent[kindBytes].Add(-b)
		c.sent[kindRequests].Add(-r)
	}
}

// User is the counters that apply to one user. Its methods are safe for
// concurrent use, and do nothing (granting everything) on a nil User.
type User struct {
	counters []*Counter
	bytes    bool // a counter limits bytes
}

// Begin counts a request of the user and reports whether the user may
// make it: false, counting nothing, when one of its quotas is spent.
// The first requests of a counter the Tracker just made wait for its
// totals, when it has a loader (see [Tracker.SetLoader]), at most the
// loader's wait; after that Begin does not wait.
func (u *User) Begin() bool {
	if u == nil {
		return true
	}
	for _, c := range u.counters {
		c.await()
	}
	now := u.counters[0].now()
	for _, c := range u.counters {
		c.roll(now)
		if c.over(kindBytes) || c.over(kindRequests) {
			return false
		}
	}
	for _, c := range u.counters {
		c.pend[kindRequests].Add(1)
	}
	return true
}

// AddBytes counts n payload bytes of the user and reports whether its
// byte quotas still allow more: false once one is spent. A negative n
// takes back bytes counted ahead (a meter told of bytes that were then
// not written).
func (u *User) AddBytes(n int64) bool {
	if u == nil {
		return true
	}
	now := u.counters[0].now()
	ok := true
	for _, c := range u.counters {
		c.roll(now)
		if n != 0 {
			c.pend[kindBytes].Add(n)
		}
		if c.over(kindBytes) {
			ok = false
		}
	}
	return ok
}

// LimitsBytes reports whether a byte quota applies to the user: its
// tunnels are then metered as they run.
func (u *User) LimitsBytes() bool { return u != nil && u.bytes }

// Meter returns a meter of one tunnel of the user: it counts the bytes
// the tunnel moves as they move (see [Meter.Moved]).
func (u *User) Meter() *Meter { return &Meter{u: u} }

// Meter counts a running tunnel's bytes against its user's quotas. It is
// safe for concurrent use.
type Meter struct {
	u       *User
	charged atomic.Int64
	held    atomic.Int64 // bytes Datagram counted and has not charged yet
	takes   atomic.Int64 // Takes whose Done has not come yet
	stopped atomic.Bool
}

// DatagramBatch is how many bytes a flow's datagrams add up to before
// [Meter.Datagram] charges them to the user's counters: a flow is
// charged a batch at a time, as a tunnel is charged a write (a 32 KiB
// buffer) at a time.
const DatagramBatch = 32 << 10

// Datagram counts n bytes of a datagram a flow (CONNECT-UDP, a SOCKS5 UDP
// association) is about to send, and reports whether it may be sent:
// false once a byte quota of the user is spent (then, and from then on,
// the datagram is not to be sent and the flow is to end); the datagram
// whose batch crosses the quota is sent, so that the flow moves at least
// its quota before it ends. The bytes are
// held in the meter and charged to the user's counters once they add up
// to DatagramBatch: per datagram it costs an atomic add, and the quota
// is asked once a batch. Held bytes not charged yet are the caller's to
// count at the flow's end (the difference between what it moved and
// Charged). A flow thus goes past the quota by less than a batch and
// the datagrams in flight on its other goroutines. It does not block or
// allocate.
func (m *Meter) Datagram(n int64) bool {
	if m.stopped.Load() {
		return false
	}
	if m.held.Add(n) < DatagramBatch {
		return true
	}
	b := m.held.Swap(0)
	if b == 0 {
		return !m.stopped.Load() // another goroutine charged the batch
	}
	if m.u.spent() {
		// Spent before this datagram: it is not sent, and not charged
		// (the rest of the batch was sent).
		m.charged.Add(b - n)
		m.u.AddBytes(b - n)
		m.stopped.Store(true)
		return false
	}
	// The datagram that crosses the quota is sent: were it refused, what
	// the flow moved could stay under the quota (the flow's end counts
	// the bytes it sent, not this datagram's), and its user admitted
	// again.
	m.charged.Add(b)
	if !m.u.AddBytes(b) {
		m.stopped.Store(true)
	}
	return true
}

// Take counts up to n bytes a tunnel is about to send and returns how
// many of them may be sent: n while the user's byte quotas allow them
// all; what is left of the quota when that is less, or when it is just
// n (the meter then stops: those are sent and the tunnel ends); 0 once
// the meter stopped or a quota is spent. A tunnel thus moves exactly its
// quota (but for the user's other requests moving bytes at the same
// time, which may each have been allowed a write past it).
//
// Each Take is followed by one Done, once its bytes were sent or given
// up: the tunnel is ended by the Done that reports so, not by the
// direction that finds the meter stopped, so that the bytes another
// direction was allowed are delivered, not cut (and then not counted).
// It does not block or allocate.
func (m *Meter) Take(n int64) int64 {
	m.takes.Add(1)
	if n <= 0 || m.stopped.Load() {
		return 0
	}
	left := m.u.bytesLeft()
	if left <= n {
		m.stopped.Store(true)
		n = max(left, 0)
	}
	if n > 0 {
		m.charged.Add(n)
		m.u.AddBytes(n)
	}
	return n
}

// Done ends a Take whose bytes were sent or given up, and reports
// whether the tunnel is to end now: the meter stopped and no other
// Take's bytes are on their way (their Done then reports it).
func (m *Meter) Done() bool {
	return m.takes.Add(-1) == 0 && m.stopped.Load()
}

// bytesLeft returns the bytes the user's byte quotas allow before the
// first of them is spent, 0 when one is; math.MaxInt64 when none limits.
func (u *User) bytesLeft() int64 {
	now := u.counters[0].now()
	left := int64(math.MaxInt64)
	for _, c := range u.counters {
		c.roll(now)
		if b := c.rule.Bytes; b > 0 {
			left = min(left, b-c.used(kindBytes))
		}
	}
	return max(left, 0)
}

// Moved counts n bytes the tunnel delivered (either way: d is ignored)
// and reports whether it may go on: false once a byte quota of the user
// is spent. It does not block or allocate.
func (m *Meter) Moved(d int, n int64) bool {
	m.charged.Add(n)
	if m.u.AddBytes(n) {
		return true
	}
	m.stopped.Store(true)
	return false
}

// Ahead counts n bytes about to be sent and reports true, unless a byte
// quota of the user is spent already: then it counts nothing and reports
// false (the bytes are not to be sent). The bytes that cross the quota
// are thus sent, as Moved lets the delivery that crosses it through.
func (m *Meter) Ahead(n int64) bool {
	if m.u.spent() {
		m.stopped.Store(true)
		return false
	}
	m.charged.Add(n)
	m.u.AddBytes(n)
	return true
}

// spent reports whether a byte quota of the user is spent.
func (u *User) spent() bool {
	now := u.counters[0].now()
	for _, c := range u.counters {
		c.roll(now)
		if c.over(kindBytes) {
			return true
		}
	}
	return false
}

// Reset makes m a fresh meter of u, for a caller that reuses one meter
// request after request (it must not be in use meanwhile).
func (m *Meter) Reset(u *User) {
	m.u = u
	m.charged.Store(0)
	m.held.Store(0)
	m.takes.Store(0)
	m.stopped.Store(false)
}

// Carry notes n bytes counted before m took over (by the meter of the
// request that became m's tunnel), so that Charged covers them.
func (m *Meter) Carry(n int64) { m.charged.Add(n) }

// Stopped reports whether Moved, Ahead, Datagram or Take said to stop.
func (m *Meter) Stopped() bool { return m != nil && m.stopped.Load() }

// Charged returns the bytes Moved counted.
func (m *Meter) Charged() int64 {
	if m == nil {
		return 0
	}
	return m.charged.Load()
}

// Tracker holds the counters of every rule and resolves users to them.
// It is safe for concurrent use.
type Tracker struct {
	rules []*Rule
	now   func() time.Time

	mu       sync.RWMutex
	who      []ruleWho           // whom each rule counts, by the rules' index; guarded by mu
	users    map[string]*User    // guarded by mu; nil entries: no rule applies
	counters map[string]*Counter // by rule name and scope (key); guarded by mu
	load     func(*Counter)      // told of each counter made; nil = none; guarded by mu
	loadWait time.Duration       // guarded by mu
}

// New returns a Tracker of cfg's rules.
func New(cfg Config) *Tracker {
	t := &Tracker{now: cfg.Now, users: make(map[string]*User), counters: make(map[string]*Counter)}
	if t.now == nil {
		t.now = time.Now
	}
	for i := range cfg.Rules {
		r := cfg.Rules[i]
		t.rules = append(t.rules, &r)
	}
	t.who = whoOf(t.rules, cfg.Groups)
	return t
}

// ruleWho is whom a rule counts: users each alone, and the members of
// each group together.
type ruleWho struct {
	users  *acl.Selector // the rule's users; nil when it names none
	groups []groupWho    // in the rule's order
}

// groupWho is a group of a rule and the scope of its counter.
type groupWho struct {
	scope string // "group:" and the group's name
	who   acl.Selector
}

// whoOf compiles whom each of rules counts, with groups' members.
func whoOf(rules []*Rule, groups map[string][]string) []ruleWho {
	out := make([]ruleWho, len(rules))
	for i, r := range rules {
		if len(r.Users) > 0 {
			s := acl.NewSelector(acl.Who{Users: r.Users}, nil, nil)
			out[i].users = &s
		}
		for _, g := range r.Groups {
			out[i].groups = append(out[i].groups,
				groupWho{scope: "group:" + g, who: acl.NewSelector(acl.Who{Groups: []string{g}}, groups, nil)})
		}
	}
	return out
}

// SetGroups replaces the groups' members (a reload's [acl.groups]): users
// resolved from now on count in the groups they are members of now; a
// User resolved before keeps its counters. The counters themselves, and
// their use, stay.
func (t *Tracker) SetGroups(groups map[string][]string) {
	if t == nil {
		return
	}
	who := whoOf(t.rules, groups)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.who = who
	clear(t.users)
}

// SetLoader makes the Tracker tell load of each counter it makes from
// then on, so that load fetches the totals other instances reached
// (package cluster), and hands them to the counter with
// [Counter.Loaded], or gives up with [Counter.Release]. Until then the
// counter's requests wait in Begin, each at most wait. load is called
// with the Tracker locked: it must not block nor call the Tracker.
func (t *Tracker) SetLoader(load func(c *Counter), wait time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.load, t.loadWait = load, wait
}

// Rules returns the number of rules.
func (t *Tracker) Rules() int {
	if t == nil {
		return 0
	}
	return len(t.rules)
}

// key returns the key of a rule's counter of scope.
func key(rule, scope string) string { return rule + "\x00" + scope }

// User returns the counters of user name, nil when no rule applies (or t
// is nil, or name is ""). After the first call for a name it takes a
// read lock and allocates nothing.
func (t *Tracker) User(name string) *User {
	if t == nil || len(t.rules) == 0 || name == "" {
		return nil
	}
	t.mu.RLock()
	u, ok := t.users[name]
	t.mu.RUnlock()
	if ok {
		return u
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if u, ok := t.users[name]; ok {
		return u
	}
	name = strings.Clone(name)
	u = &User{}
	for i, r := range t.rules {
		for _, scope := range t.scopes(i, name) {
			c := t.counterLocked(r, scope)
			u.counters = append(u.counters, c)
			u.bytes = u.bytes || r.Bytes > 0
		}
	}
	if len(u.counters) == 0 {
		u = nil
	}
	t.users[name] = u
	return u
}

// scopes returns the scopes of rule i that user counts in; t.mu is
// held.
func (t *Tracker) scopes(i int, user string) []string {
	var out []string
	w := &t.who[i]
	if w.users != nil && w.users.Match(user, nil) {
		out = append(out, user)
	}
	for j := range w.groups {
		if g := &w.groups[j]; g.who.Match(user, nil) {
			out = append(out, g.scope)
		}
	}
	return out
}

// counterLocked returns r's counter of scope, making it.
func (t *Tracker) counterLocked(r *Rule, scope string) *Counter {
	k := key(r.Name, scope)
	c := t.counters[k]
	if c == nil {
		c = &Counter{rule: r, scope: scope, now: t.now}
		c.roll(t.now())
		t.counters[k] = c
		if t.load != nil {
			c.ready, c.wait = make(chan struct{}), t.loadWait
			t.load(c)
		}
	}
	return c
}

// Counters returns every counter made so far.
func (t *Tracker) Counters() []*Counter {
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*Counter, 0, len(t.counters))
	for _, c := range t.counters {
		out = append(out, c)
	}
	return out
}

// Fold adds every counter's pending counts to its base, for an instance
// that counts alone.
func (t *Tracker) Fold() {
	for _, c := range t.Counters() {
		c.fold()
	}
}

// Status is one quota of a user as `rustle quota` shows it.
type Status struct {
	Rule   string `json:"rule"`
	Scope  string `json:"scope"`
	Period string `json:"period"`
	// Start and Reset bound the current window.
	Start time.Time `json:"start"`
	Reset time.Time `json:"reset"`
	// Used and limit of each kind; a limit of 0 is none.
	BytesUsed     int64 `json:"bytes_used"`
	BytesLimit    int64 `json:"bytes_limit"`
	RequestsUsed  int64 `json:"requests_used"`
	RequestsLimit int64 `json:"requests_limit"`
}

// Status returns the state of counter c.
func (c *Counter) Status() Status {
	start, end := c.Window()
	loc := c.rule.Loc
	if loc == nil {
		loc = time.UTC
	}
	return Status{Rule: c.rule.Name, Scope: c.scope, Period: c.rule.Period.String(),
		Start: start.In(loc), Reset: end.In(loc),
		BytesUsed: c.used(kindBytes), BytesLimit: c.rule.Bytes,
		RequestsUsed: c.used(kindRequests), RequestsLimit: c.rule.Requests}
}

// Status returns the quotas of user, in rule order; none when no rule
// applies (or t is nil, or user is ""). It is a lookup: it makes no
// counter and remembers no name, so that asking about any number of
// names costs nothing after the answer. A quota the user has not used
// yet is shown unused in its current window.
func (t *Tracker) Status(user string) []Status {
	if t == nil || len(t.rules) == 0 || user == "" {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []Status
	for i, r := range t.rules {
		for _, scope := range t.scopes(i, user) {
			c := t.counters[key(r.Name, scope)]
			if c == nil {
				c = &Counter{rule: r, scope: scope, now: t.now} // not kept
			}
			out = append(out, c.Status())
		}
	}
	return out
}

// All returns the state of every counter, sorted by rule and scope.
func (t *Tracker) All() []Status {
	cs := t.Counters()
	out := make([]Status, len(cs))
	for i, c := range cs {
		out[i] = c.Status()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return out[i].Scope < out[j].Scope
	})
	return out
}

// Reset sets the counts of the counter of rule name and scope to zero in
// its current window, so that the scope may use its quota again until
// the window ends; it reports whether there was such a counter (one
// that counted something). Reset counts for this Tracker alone: with
// totals shared between instances (a loader and Settle), the next sync
// brings back the shared totals.
func (t *Tracker) Reset(rule, scope string) bool {
	if t == nil {
		return false
	}
	t.mu.RLock()
	c := t.counters[key(rule, scope)]
	t.mu.RUnlock()
	if c == nil {
		return false
	}
	c.roll(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.base {
		c.pend[k].Store(0)
		c.sent[k].Store(0)
		c.base[k].Store(0)
	}
	return true
}

// counterFor returns the counter of rule name and scope, making it when
// the rule exists; nil otherwise.
func (t *Tracker) counterFor(rule, scope string) *Counter {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.rules {
		if r.Name == rule {
			return t.counterLocked(r, scope)
		}
	}
	return nil
}
