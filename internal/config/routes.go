package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/resolve"
	"github.com/rustle-proxy/rustle/internal/route"
)

// Parent is one parent proxy, a [[parents]] table: an upstream HTTP,
// HTTPS or SOCKS5 proxy that routes may send requests through.
type Parent struct {
	// Name names the parent in routes, the access log and metrics:
	// letters, digits, '-' and '_'; required, unique, not "direct".
	Name string `toml:"name"`
	// URL is http://, https://, socks5:// or socks5h://
	// [user:pass@]host:port; required. socks5 gets the address rustle
	// resolved and checked, socks5h the host name (the parent resolves).
	URL string `toml:"url"`
	// CAFile is a PEM file of the CAs an https parent's certificate is
	// verified with; "" means the system's roots. [Load] resolves a
	// relative path against the configuration file's directory.
	CAFile string `toml:"ca_file"`
	// ServerName is the name an https parent is sent in SNI and verified
	// as; "" means the URL's host.
	ServerName string `toml:"server_name"`
	// ConnectTimeout bounds the connect to the parent and its handshake
	// together; 0 means timeouts.connect.
	ConnectTimeout Duration `toml:"connect_timeout"`
	// IdleTimeout is how long an idle keep-alive connection to the parent
	// is kept; 0 means upstream.idle_timeout.
	IdleTimeout Duration `toml:"idle_timeout"`
	// MaxFails failed connects within FailWindow put the parent down;
	// 0 means 3.
	MaxFails int `toml:"max_fails"`
	// FailWindow is the span MaxFails failures must fall within; 0 means
	// 10s.
	FailWindow Duration `toml:"fail_window"`
	// Cooldown is how long a parent is down before it is tried again; 0
	// means 30s.
	Cooldown Duration `toml:"cooldown"`
	// ProbeInterval is the time between active probes of the parent; 0
	// means no probes (passive health only).
	ProbeInterval Duration `toml:"probe_interval"`
	// ProbeTarget is the host:port a probe asks the parent to CONNECT to
	// (an IP address for a socks5 parent); "" means a probe only
	// connects to the parent (and makes TLS for https).
	ProbeTarget string `toml:"probe_target"`
}

// Route is one route, a [[routes]] table: requests matching its criteria
// (those of [[acl.rules]], with the same syntax and meaning; every
// criterion left empty matches anything) go through its via. Routes are
// tried in order and the first that matches wins; a request no route
// matches goes direct.
type Route struct {
	// Name names the route in the access log; "" means "routes[N]" (N
	// from 0).
	Name string `toml:"name"`
	// Criteria are what the route matches a request by; IP and CIDR
	// hosts entries match IP literals and SOCKS addresses only (a name is
	// not resolved to choose a route).
	Criteria
	// Via is "direct", a parent's name, or a list of parents' names;
	// required.
	Via Strings `toml:"via"`
	// Select is how a route with parents picks one: "round-robin",
	// "random", "first-available", "hash-host", "hash-user" or
	// "hash-session"; "" means "round-robin" (and nothing for a direct
	// route).
	Select string `toml:"select"`
	// Fallback is "direct" to go direct when every parent is down; ""
	// means such a request is refused with 502.
	Fallback string `toml:"fallback"`
	// SessionSeparator separates a user name from its session for
	// hash-user ("alice-session-42" is user alice); "" means "-session-".
	SessionSeparator string `toml:"session_separator"`
	// Egress is where the route's direct connections come from (bind,
	// interface, freebind, as [egress]); it replaces the listener's and
	// the global egress for requests the route takes direct (a user's
	// [[egress.rules]] entry still wins). Dials through a parent come
	// from the kernel's choice. Its zero value keeps the listener's.
	Egress RouteEgress `toml:"egress"`
	// Resolvers are DNS servers (as dns.resolvers) that resolve the
	// names of the route's direct destinations instead of [dns]'s, with
	// [dns]'s timeout, cache bounds, prefer, only, hosts and ca, and a
	// cache of their own; empty means [dns]'s (or the system's).
	Resolvers []string `toml:"resolvers"`
	// RequestHeaders edits the forwarded requests the route takes (see
	// headers.go), and its set and add fields go on the CONNECT rustle
	// sends the route's http and https parents for a tunnel too; its zero
	// value changes nothing.
	RequestHeaders HeaderEdit `toml:"request_headers"`
	// ResponseHeaders edits the responses to the forwarded requests the
	// route takes; its zero value changes nothing.
	ResponseHeaders HeaderEdit `toml:"response_headers"`
}

// RouteEgress is a route's egress: its keys mean what [Egress]'s do.
type RouteEgress struct {
	// Bind lists source addresses and prefixes; empty means the
	// listener's choice (or, with Interface, a bound interface only).
	Bind []string `toml:"bind"`
	// Interface is the interface to bind to; "" means none.
	Interface string `toml:"interface"`
	// Freebind lets Bind name addresses not configured on the host.
	Freebind bool `toml:"freebind"`
}

// Set reports whether any key of the route's egress is set.
func (e RouteEgress) Set() bool { return len(e.Bind) > 0 || e.Interface != "" || e.Freebind }

// Strings is a list of strings that a configuration may also give as one
// string: via = "squid" is via = ["squid"].
type Strings []string

// Defaults of [[parents]].
const (
	defaultParentMaxFails = 3
	defaultParentWindow   = 10 * time.Second
	defaultParentCooldown = 30 * time.Second
)

// setRouteDefaults fills the parents' and routes' defaults; it runs after
// the timeouts' and the upstream pool's.
func (c *Config) setRouteDefaults() {
	for i := range c.Parents {
		p := &c.Parents[i]
		setDuration(&p.ConnectTimeout, c.Timeouts.Connect.Duration)
		setDuration(&p.IdleTimeout, c.Upstream.IdleTimeout.Duration)
		setInt(&p.MaxFails, defaultParentMaxFails)
		setDuration(&p.FailWindow, defaultParentWindow)
		setDuration(&p.Cooldown, defaultParentCooldown)
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		setString(&r.Name, "routes["+strconv.Itoa(i)+"]")
		if len(r.Via) > 0 && !(len(r.Via) == 1 && r.Via[0] == route.Direct) {
			setString(&r.Select, route.RoundRobin.String())
			setString(&r.SessionSeparator, route.DefaultSessionSeparator)
		}
	}
}

// validateRoutes checks [[parents]] and [[routes]]: names, URLs,
// timeouts, the parents routes name, selections and fallbacks, the
// routes' criteria, and loops (a parent at one of rustle's own listening
// addresses).
func (c *Config) validateRoutes(v *validator) {
	parents := make(map[string]int, len(c.Parents))
	for i, p := range c.Parents {
		key := fmt.Sprintf("parents[%d]", i)
		switch j, dup := parents[p.Name]; {
		case p.Name == "":
			v.add(key, errors.New("name is required"))
		case p.Name == route.Direct:
			v.add(key+".name", errors.New(`"direct" is reserved for routes' via`))
		case !validLabel(p.Name):
			v.add(key+".name", fmt.Errorf("%q: use letters, digits, '-' and '_'", p.Name))
		case dup:
			v.add(key+".name", fmt.Errorf("%q is also the name of parents[%d]", p.Name, j))
		default:
			parents[p.Name] = i
		}
		if p.URL == "" {
			v.add(key, errors.New("url is required"))
		} else if scheme, addr, err := route.ParseURL(p.URL); err != nil {
			v.add(key+".url", err)
		} else {
			if scheme != route.HTTPS {
				v.check(p.CAFile == "", key+".ca_file", "is only for https parents")
				v.check(p.ServerName == "", key+".server_name", "is only for https parents")
			}
			if l, ok := c.listenerAt(addr); ok {
				v.add(key+".url", fmt.Errorf("parent %s is rustle's own listener listen[%d] (%s): a loop", addr, l, c.Listen[l].Address))
			}
			if p.ProbeTarget != "" {
				host, _, err := net.SplitHostPort(p.ProbeTarget)
				_, ipErr := netip.ParseAddr(host)
				switch {
				case err != nil:
					v.add(key+".probe_target", fmt.Errorf("%q is not host:port", p.ProbeTarget))
				case scheme == route.SOCKS5 && ipErr != nil:
					v.add(key+".probe_target", errors.New("a socks5 parent's probe target is an IP address (rustle resolves for it)"))
				}
			}
		}
		v.positive(key+".connect_timeout", p.ConnectTimeout)
		v.positive(key+".idle_timeout", p.IdleTimeout)
		v.check(p.MaxFails > 0, key+".max_fails", "%d is not positive", p.MaxFails)
		v.positive(key+".fail_window", p.FailWindow)
		v.positive(key+".cooldown", p.Cooldown)
		v.check(p.ProbeInterval.Duration >= 0, key+".probe_interval", "%s is negative", p.ProbeInterval.Duration)
		v.check(p.ProbeTarget == "" || p.ProbeInterval.Duration > 0, key+".probe_target", "needs probe_interval")
	}
	names := make(map[string]int, len(c.Routes))
	for i, r := range c.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if j, dup := names[r.Name]; dup {
			v.add(key+".name", fmt.Errorf("%q is also the name of routes[%d]", r.Name, j))
		} else {
			names[r.Name] = i
		}
		c.validateCriteria(v, key, r.Criteria)
		validateBind(v, key+".egress", r.Egress.Bind, r.Egress.Interface)
		for j, u := range r.Resolvers {
			if _, err := resolve.ParseServer(u); err != nil {
				v.add(fmt.Sprintf("%s.resolvers[%d]", key, j), errors.New(strings.TrimPrefix(err.Error(), "resolve: ")))
			}
		}
		direct := len(r.Via) == 1 && r.Via[0] == route.Direct
		switch {
		case len(r.Via) == 0:
			v.add(key, errors.New(`via is required: "direct", a parent's name or a list of them`))
		case direct:
			v.check(r.Select == "", key+".select", "is for routes through parents")
			v.check(r.Fallback == "", key+".fallback", "is for routes through parents")
		default:
			seen := make(map[string]bool, len(r.Via))
			for j, name := range r.Via {
				vk := fmt.Sprintf("%s.via[%d]", key, j)
				_, known := parents[name]
				switch {
				case name == route.Direct:
					v.add(vk, errors.New(`"direct" cannot be one of a list of parents; use fallback = "direct"`))
				case seen[name]:
					v.add(vk, fmt.Errorf("parent %q is named twice", name))
				case !known:
					v.add(vk, fmt.Errorf("parent %q is not defined in [[parents]]", name))
				}
				seen[name] = true
			}
			if _, err := route.ParseSelect(r.Select); err != nil {
				v.add(key+".select", fmt.Errorf("%q is not one of %s", r.Select, strings.Join(route.SelectNames(), ", ")))
			}
			v.check(r.Fallback == "" || r.Fallback == route.Direct, key+".fallback", "%q is neither \"direct\" nor empty", r.Fallback)
		}
	}
}

// listenerAt returns the index of a listener that addr (a parent's
// host:port) reaches: the same port and the same host, or a loopback
// parent host and a listener on every address. Hosts are compared as
// the dialer reads them (dialer.ParseHost: any IPv4 spelling inet_aton
// reads), names without case or a trailing dot ("localhost." is
// localhost). A name other than localhost is not resolved.
func (c *Config) listenerAt(addr string) (int, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	host = canonicalHost(host)
	loop := host == "localhost"
	if ip, err := netip.ParseAddr(host); err == nil {
		loop = ip.IsLoopback()
	}
	for i, l := range c.Listen {
		lh, lp, err := net.SplitHostPort(l.Address)
		if err != nil || lp != port {
			continue
		}
		lh = canonicalHost(lh)
		wildcard := lh == "" || lh == "0.0.0.0" || lh == "::"
		if strings.EqualFold(lh, host) || (loop && (wildcard || isLoopback(lh))) {
			return i, true
		}
	}
	return 0, false
}

// canonicalHost returns host as listenerAt compares it: an IP address
// in any spelling dialer.ParseHost reads as its unmapped text, a name in
// lower case without trailing dots.
func canonicalHost(host string) string {
	if ip, ok, err := dialer.ParseHost(host); err == nil && ok {
		return ip.Unmap().String()
	}
	return strings.ToLower(strings.TrimRight(host, "."))
}

// validLabel reports whether s is letters, digits, '-' and '_'.
func validLabel(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	})
}

// RouteConfig returns the route table's configuration for
// [route.New]: the parents and routes, with the access rules' groups.
func (c *Config) RouteConfig() route.Config {
	rc := route.Config{Groups: c.ACL.Groups, ProviderGroups: c.ProviderGroups()}
	for _, p := range c.Parents {
		rc.Parents = append(rc.Parents, route.ParentConfig{
			Name: p.Name, URL: p.URL, CAFile: p.CAFile, ServerName: p.ServerName,
			ConnectTimeout: p.ConnectTimeout.Duration, IdleTimeout: p.IdleTimeout.Duration,
			Health: route.HealthConfig{MaxFails: p.MaxFails, Window: p.FailWindow.Duration, Cooldown: p.Cooldown.Duration},
			Probe:  route.ProbeConfig{Interval: p.ProbeInterval.Duration, Target: p.ProbeTarget},
		})
	}
	for _, r := range c.Routes {
		rc.Routes = append(rc.Routes, route.RouteConfig{
			Name:  r.Name,
			Match: r.Criteria.Rule(),
			Via:   slices.Clone(r.Via), Select: r.Select, Fallback: r.Fallback, SessionSeparator: r.SessionSeparator,
		})
	}
	return rc
}

// ForwardName is the name of the parent and the route a -F flag adds.
const ForwardName = "F"

// AddForward adds what a gost-style -F URL asks for: a parent named
// ForwardName at the URL and a last route, also ForwardName, that sends
// every request no other route matched through it. Only one -F is taken:
// rustle does not chain parents. The URL is checked as a parent's url is;
// errors never repeat the password.
func (c *Config) AddForward(rawURL string) error {
	if slices.ContainsFunc(c.Parents, func(p Parent) bool { return p.Name == ForwardName }) {
		return errors.New("config: -F given twice: rustle does not chain parents; declare a group of [[parents]] in a route instead")
	}
	if _, _, err := route.ParseURL(rawURL); err != nil {
		return fmt.Errorf("config: -F: %w", err)
	}
	c.Parents = append(c.Parents, Parent{Name: ForwardName, URL: rawURL})
	c.Routes = append(c.Routes, Route{Name: ForwardName, Via: Strings{ForwardName}})
	return nil
}
