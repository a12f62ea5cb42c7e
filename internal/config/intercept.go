package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/origin"
)

// Intercept is TLS interception (see package intercept): the CA that
// signs the certificates rustle mints for the tunnels its rules name,
// how it speaks TLS to their origins (offering them h2 and http/1.1 and
// speaking what each chooses), and which hosts are never intercepted.
// Its zero value intercepts nothing.
type Intercept struct {
	// CACert is the PEM file of the CA certificate (the one clients are
	// given to trust; `rustle ca DIR` makes one), read at start and on
	// every reload; "" means no interception, and then there may be no
	// rules. [Load] resolves a relative path against the configuration
	// file's directory.
	CACert string `toml:"ca_cert"`
	// CAKey is the PEM file of the CA's private key, which neither its
	// group nor others may have any permission on (on Unix); required
	// with CACert.
	CAKey string `toml:"ca_key"`
	// UpstreamCA is a PEM file of the CA certificates that verify the
	// origins of intercepted tunnels, in place of the system's roots; ""
	// means the system's roots.
	UpstreamCA string `toml:"upstream_ca"`
	// Bypass are hosts entries ("bank.example", "*.bank.example",
	// ".bank.example", IP addresses and CIDR prefixes) whose tunnels are
	// spliced whatever the rules say: matched against a tunnel's host and
	// its ClientHello's server name. Empty means none.
	Bypass []string `toml:"bypass"`
	// CacheSize bounds the leaf certificates kept, the least recently
	// used going first; 0 means 4096.
	CacheSize int `toml:"cache_size"`
	// UpstreamIdle closes the connection to the origin that an
	// intercepted HTTP/1.1 connection keeps for its next request once
	// the client has sent nothing this long (the client's connection
	// stays, for timeouts.idle_client); 0 means 5s.
	UpstreamIdle Duration `toml:"upstream_idle"`
	// Rules name the tunnels to intercept, the first that matches
	// deciding; empty means none (every tunnel is spliced).
	Rules []InterceptRule `toml:"rules"`
}

// Enabled reports whether interception is configured.
func (i *Intercept) Enabled() bool { return i.CACert != "" }

// InterceptRule is one [[intercept.rules]] table: the tunnels it names
// (the criteria of [[acl.rules]], with their syntax and meaning; every
// criterion left empty matches anything, but methods and paths, which a
// tunnel has none of, are refused) and how the requests inside them are
// edited.
type InterceptRule struct {
	// Name names the rule in logs; "" means "intercept.rules[N]".
	Name string `toml:"name"`
	// Criteria are what the rule matches a tunnel by; IP and CIDR hosts
	// entries match IP literals only.
	Criteria
	// RequestHeaders edits the requests inside, as they go to the
	// origin; its zero value changes nothing.
	RequestHeaders InterceptHeaders `toml:"request_headers"`
	// ResponseHeaders edits their responses, as they go to the client;
	// its zero value changes nothing.
	ResponseHeaders InterceptHeaders `toml:"response_headers"`
}

// InterceptHeaders is a request_headers or response_headers table of an
// interception rule. It differs from a header rule's [HeaderEdit] in
// that a "{file:PATH}" may be part of a value, and it has no add.
type InterceptHeaders struct {
	// Set maps a field name to the value that replaces the message's own
	// fields of that name. A "{file:PATH}" in a value is replaced by the
	// content of the file PATH without its trailing line break, read at
	// start and on every reload ("Bearer {file:/run/secrets/token}"); a
	// relative PATH is resolved against the configuration file's
	// directory. Values are never logged. Empty means none.
	Set map[string]string `toml:"set"`
	// Remove lists field names whose fields are left out; empty means
	// none.
	Remove []string `toml:"remove"`
}

// defaultInterceptCache is Intercept.CacheSize's default.
const defaultInterceptCache = 4096

// defaultInterceptUpstreamIdle is Intercept.UpstreamIdle's default.
const defaultInterceptUpstreamIdle = 5 * time.Second

// setInterceptDefaults names the unnamed rules, sizes the cache and
// sets how long an idle client's upstream stays.
func (c *Config) setInterceptDefaults() {
	setInt(&c.Intercept.CacheSize, defaultInterceptCache)
	setDuration(&c.Intercept.UpstreamIdle, defaultInterceptUpstreamIdle)
	for i := range c.Intercept.Rules {
		setString(&c.Intercept.Rules[i].Name, fmt.Sprintf("intercept.rules[%d]", i))
	}
}

// resolveInterceptPaths resolves the relative paths of [intercept] and
// of its rules' {file:} values with resolve.
func (c *Config) resolveInterceptPaths(resolve func(*string)) {
	ic := &c.Intercept
	resolve(&ic.CACert)
	resolve(&ic.CAKey)
	resolve(&ic.UpstreamCA)
	for i := range ic.Rules {
		r := &ic.Rules[i]
		for _, m := range []map[string]string{r.RequestHeaders.Set, r.ResponseHeaders.Set} {
			for n, v := range m {
				m[n] = mapFileRefs(v, func(p string) string {
					if p != "" {
						resolve(&p)
					}
					return "{file:" + p + "}"
				})
			}
		}
	}
}

// FileRefs returns the paths of the "{file:PATH}" references in v, in
// order.
func FileRefs(v string) []string {
	var paths []string
	mapFileRefs(v, func(p string) string { paths = append(paths, p); return "" })
	return paths
}

// ExpandFileRefs returns v with each "{file:PATH}" replaced by read(PATH).
func ExpandFileRefs(v string, read func(path string) (string, error)) (string, error) {
	var errs []error
	out := mapFileRefs(v, func(p string) string {
		s, err := read(p)
		if err != nil {
			errs = append(errs, err)
		}
		return s
	})
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return out, nil
}

// mapFileRefs returns v with each "{file:PATH}" reference replaced by
// f(PATH). A "{file:" without its "}" is left as it is (Validate refuses
// it).
func mapFileRefs(v string, f func(path string) string) string {
	const open = "{file:"
	if !strings.Contains(v, open) {
		return v
	}
	var b strings.Builder
	rest := v
	for {
		i := strings.Index(rest, open)
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			break
		}
		b.WriteString(rest[:i])
		b.WriteString(f(rest[i+len(open) : i+j]))
		rest = rest[i+j+1:]
	}
	b.WriteString(rest)
	return b.String()
}

// validateIntercept checks [intercept]: the CA's two files together, no
// rules or bypass without a CA, the cache size, the bypass entries, each
// rule's name, criteria (no methods, no paths, only the protocols of
// tunnels that can be intercepted) and header edits (field
// names, inline values, {file:} references); no error holds a value.
func (c *Config) validateIntercept(v *validator) {
	ic := &c.Intercept
	v.check((ic.CACert == "") == (ic.CAKey == ""), "intercept", "ca_cert and ca_key go together")
	if !ic.Enabled() {
		v.check(len(ic.Rules) == 0, "intercept.rules", "need intercept.ca_cert and intercept.ca_key")
		v.check(ic.UpstreamCA == "", "intercept.upstream_ca", "is only for interception: set intercept.ca_cert and intercept.ca_key")
	}
	v.check(ic.CacheSize > 0, "intercept.cache_size", "%d is not positive", ic.CacheSize)
	v.positive("intercept.upstream_idle", ic.UpstreamIdle)
	for j, h := range ic.Bypass {
		if err := acl.ParseHost(h); err != nil {
			v.add(fmt.Sprintf("intercept.bypass[%d]", j), err)
		}
	}
	names := make(map[string]int)
	for i, r := range ic.Rules {
		key := fmt.Sprintf("intercept.rules[%d]", i)
		if j, dup := names[r.Name]; dup {
			v.add(key+".name", fmt.Errorf("%q is also the name of intercept.rules[%d]", r.Name, j))
		} else {
			names[r.Name] = i
		}
		c.validateCriteria(v, key, r.Criteria)
		v.check(len(r.Methods) == 0, key+".methods", "a tunnel has no method: the access rules decide the requests inside")
		v.check(len(r.Paths) == 0, key+".paths", "a tunnel has no path: the access rules decide the requests inside")
		for j, name := range r.Protocols {
			p, err := acl.ParseProtocol(name)
			if err != nil || p&acl.HelloProtocols != 0 {
				continue // a bad name is validateCriteria's
			}
			why := "only connect, socks5 and socks4 tunnels are intercepted"
			if p == acl.Transparent {
				why += ": a transparent listener's tunnels are always spliced"
			}
			v.add(fmt.Sprintf("%s.protocols[%d]", key, j), fmt.Errorf("%q: %s", name, why))
		}
		validateInterceptHeaders(v, key+".request_headers", &r.RequestHeaders)
		validateInterceptHeaders(v, key+".response_headers", &r.ResponseHeaders)
	}
}

// validateInterceptHeaders checks one header edit of a rule.
func validateInterceptHeaders(v *validator, key string, h *InterceptHeaders) {
	seen := make(map[string]string)
	named := func(k, name string) {
		if err := origin.CheckRuleField(name); err != nil {
			v.add(k, err)
			return
		}
		l := strings.ToLower(name)
		if prev, dup := seen[l]; dup {
			v.add(k, fmt.Errorf("%q is named twice (also %s)", name, prev))
			return
		}
		seen[l] = k
	}
	for _, n := range slices.Sorted(maps.Keys(h.Set)) {
		k := key + ".set." + n
		named(k, n)
		val := h.Set[n]
		refs := FileRefs(val)
		for _, p := range refs {
			v.check(p != "", k, "{file:} names no file")
		}
		if strings.Count(val, "{file:") != len(refs) {
			v.add(k, errors.New("a {file:PATH} reference without its closing '}'"))
			continue
		}
		if len(refs) == 0 {
			if err := origin.CheckRuleValue(val); err != nil {
				v.add(k, err)
			}
		}
	}
	for j, n := range h.Remove {
		named(fmt.Sprintf("%s.remove[%d]", key, j), n)
	}
}
