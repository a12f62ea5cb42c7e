package route

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
)

// Direct is the via of a route that connects to the destination itself.
const Direct = "direct"

// RouteConfig is one route as configured.
type RouteConfig struct {
	// Name names the route in the access log and errors; "" means
	// "routes[N]", N its index from 0.
	Name string
	// Match holds the route's criteria, with the syntax and meaning of an
	// access rule's (Action and AllowPrivate empty); empty criteria match
	// every request.
	Match acl.Rule
	// Via is Direct, or the names of one or more parents.
	Via []string
	// Select is how the route picks among its parents (see
	// [ParseSelect]); "" = round-robin.
	Select string
	// Fallback is what a request does when every parent is down: Direct,
	// or "" to be refused (502).
	Fallback string
	// SessionSeparator separates a user from its session in a user name
	// for hash-user; "" = DefaultSessionSeparator.
	SessionSeparator string
	// Source is where the route's direct connections come from; nil =
	// the listener's egress.
	Source *dialer.Source
	// Resolver resolves the names of the route's direct destinations;
	// nil = the dialer's.
	Resolver dialer.Resolver
	// ConnectHeader is field lines, each "Name: value\r\n", that the
	// CONNECT rustle sends the route's http and https parents for a
	// tunnel carries (the route's request_headers); "" = none. It may
	// hold secrets: it is never logged.
	ConnectHeader string
}

// Config is a route table as configured.
type Config struct {
	// Parents are the parents routes may name.
	Parents []ParentConfig
	// Routes are tried in order; the first that matches wins.
	Routes []RouteConfig
	// Groups are the user groups of the access rules, which routes'
	// groups criteria name.
	Groups map[string][]string
	// ProviderGroups are the groups identity providers put users in,
	// which routes' groups criteria may name too; nil = none.
	ProviderGroups []string
}

// Route is one compiled route. It is immutable and stays usable after its
// Table is closed.
type Route struct {
	name     string
	group    *Group // nil = direct
	fallback bool   // direct when every parent is down
	source   *dialer.Source
	resolver dialer.Resolver
	connect  string // RouteConfig.ConnectHeader
}

// ConnectHeader returns the field lines the CONNECT to one of the route's
// http parents carries (see RouteConfig.ConnectHeader); "" for none, and
// for a nil Route.
func (r *Route) ConnectHeader() string {
	if r == nil {
		return ""
	}
	return r.connect
}

// Source returns where the route's direct connections come from; nil
// (also for a nil Route) = the listener's egress.
func (r *Route) Source() *dialer.Source {
	if r == nil {
		return nil
	}
	return r.source
}

// Resolver returns what resolves the route's direct destinations; nil
// (also for a nil Route) = the dialer's.
func (r *Route) Resolver() dialer.Resolver {
	if r == nil {
		return nil
	}
	return r.resolver
}

// Name returns the route's name; "" for a nil Route (no route matched).
func (r *Route) Name() string {
	if r == nil {
		return ""
	}
	return r.name
}

// Group returns the route's parents; nil for a direct route.
func (r *Route) Group() *Group { return r.group }

// Direct reports whether the route connects directly.
func (r *Route) Direct() bool { return r == nil || r.group == nil }

// Pick returns the parent a request with key k goes through: nil for a
// direct route, or for one that falls back to direct when every parent
// is down; ErrNoParent when every parent is down and the route has no
// fallback. It allocates nothing.
func (r *Route) Pick(k Key) (*Parent, error) { return r.PickExcept(k, nil) }

// PickExcept is Pick skipping the parent except, for a retry on the next
// parent after except failed.
func (r *Route) PickExcept(k Key, except *Parent) (*Parent, error) {
	if r.Direct() {
		return nil, nil
	}
	if p := r.group.Pick(k, time.Now(), except); p != nil {
		return p, nil
	}
	if r.fallback {
		return nil, nil
	}
	return nil, ErrNoParent
}

// Table is a compiled route table with its parents. It is safe for
// concurrent use.
type Table struct {
	matcher *acl.Matcher
	routes  []Route
	parents []*Parent
	byName  map[string]*Parent

	mu      sync.Mutex
	started bool // Start ran and Close has not; guarded by mu
}

// New compiles cfg. It fails on a bad parent, a duplicate parent name, a
// route naming an unknown parent, a bad criterion or selection; the
// errors name the parent or route and the key.
func New(cfg Config) (*Table, error) { return NewAfter(cfg, nil) }

// NewAfter is New for a reload: a parent of prev (nil = none) with the
// same name and URL is carried over. When its whole configuration is
// unchanged the new table holds the very same *Parent: its health,
// observer and probe loop go on (Start takes the loop over, prev's Close
// leaves it running). Otherwise a new Parent is made with the old one's
// health state (down or up, failures counted). prev is only read.
func NewAfter(cfg Config, prev *Table) (*Table, error) {
	t := &Table{byName: make(map[string]*Parent, len(cfg.Parents))}
	var errs []error
	for _, pc := range cfg.Parents {
		if pc.Name == Direct {
			errs = append(errs, fmt.Errorf("route: parent %q: the name is reserved", pc.Name))
			continue
		}
		if _, dup := t.byName[pc.Name]; dup {
			errs = append(errs, fmt.Errorf("route: parent %s: name given twice", pc.Name))
			continue
		}
		old := prev.Parent(pc.Name)
		if old != nil && old.cfg == pc {
			t.byName[old.name] = old
			t.parents = append(t.parents, old)
			continue
		}
		p, err := NewParent(pc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if old != nil && old.cfg.URL == pc.URL {
			p.health.carry(&old.health)
		}
		t.byName[p.name] = p
		t.parents = append(t.parents, p)
	}
	criteria := make([]acl.Rule, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		name := rc.Name
		if name == "" {
			name = "routes[" + strconv.Itoa(i) + "]"
		}
		criteria[i] = rc.Match
		criteria[i].Name = name
		r := Route{name: name, source: rc.Source, resolver: rc.Resolver, connect: rc.ConnectHeader}
		fail := func(key string, err error) {
			errs = append(errs, fmt.Errorf("route: route %s: %s: %w", name, key, err))
		}
		switch rc.Fallback {
		case "":
		case Direct:
			r.fallback = true
		default:
			fail("fallback", fmt.Errorf("%q is neither %q nor empty", rc.Fallback, Direct))
		}
		sel, err := ParseSelect(rc.Select)
		if err != nil {
			fail("select", err)
		}
		switch {
		case len(rc.Via) == 0:
			fail("via", errors.New("is empty: name parents or \"direct\""))
		case len(rc.Via) == 1 && rc.Via[0] == Direct:
			if rc.Select != "" || rc.Fallback != "" {
				fail("via", errors.New("a direct route has no select or fallback"))
			}
		default:
			ps := make([]*Parent, 0, len(rc.Via))
			seen := make(map[string]bool, len(rc.Via))
			for _, v := range rc.Via {
				p, ok := t.byName[v]
				switch {
				case v == Direct:
					fail("via", errors.New("\"direct\" cannot be one of a group of parents; use fallback = \"direct\""))
				case seen[v]:
					fail("via", fmt.Errorf("parent %q named twice", v))
				case !ok:
					fail("via", fmt.Errorf("parent %q is not defined in [[parents]]", v))
				default:
					ps = append(ps, p)
				}
				seen[v] = true
			}
			r.group = NewGroup(ps, sel, rc.SessionSeparator)
		}
		t.routes = append(t.routes, r)
	}
	m, err := acl.NewMatcher(criteria, cfg.Groups, cfg.ProviderGroups)
	if err != nil {
		errs = append(errs, fmt.Errorf("route: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t.matcher = m
	return t, nil
}

// Match returns the first route that matches r, nil when none does (the
// request goes direct). It allocates nothing.
func (t *Table) Match(r acl.Request) *Route {
	if t == nil {
		return nil
	}
	if i := t.matcher.Match(r); i >= 0 {
		return &t.routes[i]
	}
	return nil
}

// MatchHello is Match for a tunnel whose ClientHello may still be read
// (see [acl.Matcher.MatchHello]): pending reports that a route with
// sni_hosts could match r, so that its route is known only once the
// hello is read and r is matched again with its server name; the route
// returned meanwhile is Match's.
func (t *Table) MatchHello(r acl.Request) (rt *Route, pending bool) {
	if t == nil {
		return nil, false
	}
	i, pending := t.matcher.MatchHello(r)
	if i >= 0 {
		rt = &t.routes[i]
	}
	return rt, pending
}

// Routes returns the compiled routes in order; the slice must not be
// changed.
func (t *Table) Routes() []Route { return t.routes }

// Parents returns the parents in configuration order (none for a nil
// Table); the slice must not be changed.
func (t *Table) Parents() []*Parent {
	if t == nil {
		return nil
	}
	return t.parents
}

// Parent returns the parent named name, nil when there is none (or t is
// nil).
func (t *Table) Parent(name string) *Parent {
	if t == nil {
		return nil
	}
	return t.byName[name]
}

// Observer learns what happens to a parent: *metrics.ParentMetrics
// implements it.
type Observer interface {
	// Dialed is called after every dial through the parent (a request or
	// tunnel, or a probe) with how long it took and whether it succeeded.
	Dialed(d time.Duration, ok bool)
	// Health is called when the parent goes down or comes back up.
	Health(up bool)
}

// Observe gives each parent the Observer f returns for it (nil = none),
// and tells the observer the parent's health; call it before the table
// is used. A parent carried over from the previous table (see NewAfter)
// keeps the observer it has.
func (t *Table) Observe(f func(p *Parent) Observer) {
	for _, p := range t.parents {
		if p.obs != nil {
			continue
		}
		if o := f(p); o != nil {
			p.obs = o
			p.health.onChange = o.Health
			o.Health(p.health.downUntil.Load() == 0)
		}
	}
}

// Healthy reports whether every route through parents has one that is up
// at now, or falls back to direct (for readiness); a nil Table has no
// such route.
func (t *Table) Healthy(now time.Time) bool {
	if t == nil {
		return true
	}
	for i := range t.routes {
		r := &t.routes[i]
		if r.Direct() || r.fallback {
			continue
		}
		if r.group.Pick(Key{}, now, nil) == nil {
			return false
		}
	}
	return true
}

// Start starts one probe loop per parent with a probe interval, dialing
// with d; a parent carried over from a started table keeps its loop,
// which dials with d from then on. A second call does nothing, nor does a
// call on a nil Table. Close stops and joins them.
func (t *Table) Start(d Dialer) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		return
	}
	t.started = true
	for _, p := range t.parents {
		if p.probe.Interval > 0 {
			p.holdProbe(d)
		}
	}
}

// Close stops the probes that no other started table holds and waits for
// them to return. The routes and parents stay usable. A nil Table has
// nothing to close.
func (t *Table) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.routes {
		// The routes' own resolvers' idle connections (DNS over
		// HTTPS); a resolver still held by a dial in flight keeps
		// working.
		if c, ok := r.resolver.(interface{ Close() }); ok {
			c.Close()
		}
	}
	if !t.started {
		return nil
	}
	t.started = false
	for _, p := range t.parents {
		if p.probe.Interval > 0 {
			p.releaseProbe()
		}
	}
	return nil
}

// holdProbe counts one more table holding p's probe loop, starting it for
// the first, and makes the loop dial with d.
func (p *Parent) holdProbe(d Dialer) {
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	p.probeDialer = d
	p.probeRefs++
	if p.probeRefs > 1 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	p.probeStop, p.probeDone = cancel, done
	go func() {
		defer close(done)
		p.probeLoop(ctx)
	}()
}

// releaseProbe counts one table less holding p's probe loop, and stops
// and joins it after the last.
func (p *Parent) releaseProbe() {
	p.probeMu.Lock()
	p.probeRefs--
	if p.probeRefs > 0 {
		p.probeMu.Unlock()
		return
	}
	stop, done := p.probeStop, p.probeDone
	p.probeStop, p.probeDone, p.probeDialer = nil, nil, nil
	p.probeMu.Unlock()
	stop()
	<-done
}

// probeLoop probes p every interval until ctx is done.
func (p *Parent) probeLoop(ctx context.Context) {
	tick := time.NewTicker(p.probe.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.probeMu.Lock()
		d := p.probeDialer
		p.probeMu.Unlock()
		if d != nil {
			p.Probe(ctx, d)
		}
	}
}

// Probe checks p once, as its probe loop does, and notes the outcome in
// its health; it returns the failure, nil when the parent answered.
func (p *Parent) Probe(ctx context.Context, d Dialer) error {
	var c net.Conn
	var err error
	if p.probe.Target == "" {
		c, err = p.DialParent(ctx, d)
	} else {
		host, port, _ := splitTarget(p.probe.Target)
		t := Target{Host: host, Port: port}
		if p.scheme == SOCKS5 {
			// A probe target of a socks5 parent is an address (checked
			// at load).
			t.Addr, _ = parseAddr(host)
		}
		c, err = p.Dial(ctx, d, t)
	}
	if c != nil {
		c.Close()
	}
	return err
}
