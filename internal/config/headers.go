package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rustle-proxy/rustle/internal/origin"
)

// HeaderEdit is a request_headers or response_headers table: how rustle
// edits the fields of the forwarded requests, or of the responses it
// relays, that a route or a [[header_rules]] entry applies to. Its zero
// value changes nothing. A field name, in any case, appears once at most
// in one table, and is never one rustle makes itself (see
// [origin.CheckRuleField]: the hop-by-hop fields, the framing, the
// proxies' credentials, Host, Via, Max-Forwards).
type HeaderEdit struct {
	// Set maps a field name to the value that replaces the message's own
	// fields of that name; a value "{file:PATH}" is the content of the
	// file PATH without its trailing line break, read at start and on
	// each reload (a relative PATH is resolved against the configuration
	// file's directory). Empty means none.
	Set map[string]string `toml:"set"`
	// Add maps a field name to a value added beside the message's own
	// fields of that name; "{file:PATH}" as for Set. Empty means none.
	Add map[string]string `toml:"add"`
	// Remove lists field names whose fields are left out of the message;
	// empty means none.
	Remove []string `toml:"remove"`
}

// Empty reports whether e changes nothing.
func (e *HeaderEdit) Empty() bool { return len(e.Set) == 0 && len(e.Add) == 0 && len(e.Remove) == 0 }

// HeaderRule is one [[header_rules]] table: header edits for the
// forwarded requests its criteria match (those of [[acl.rules]], with the
// same syntax and meaning; every criterion left empty matches anything).
// Every entry that matches applies, in order, after the request's
// route's own request_headers and response_headers.
type HeaderRule struct {
	// Name names the rule in errors; "" means "header_rules[N]" (N from
	// 0).
	Name string `toml:"name"`
	// Criteria are what the rule matches a request by; IP and CIDR hosts
	// entries match IP literals only (a name is not resolved for it).
	Criteria
	// RequestHeaders edits the requests sent to origins and http
	// parents; its zero value changes nothing.
	RequestHeaders HeaderEdit `toml:"request_headers"`
	// ResponseHeaders edits the responses relayed to the client; its
	// zero value changes nothing.
	ResponseHeaders HeaderEdit `toml:"response_headers"`
}

// FileValue returns the path of a header rule's value "{file:PATH}", and
// whether v is one.
func FileValue(v string) (path string, ok bool) {
	if !strings.HasPrefix(v, "{file:") || !strings.HasSuffix(v, "}") {
		return "", false
	}
	return v[len("{file:") : len(v)-1], true
}

// HeaderEditFields returns e's Set and Add as origin fields, each sorted
// by name, with their values as configured ("{file:PATH}" not read), and
// the key of each field's value ("routes[0].request_headers.set.X-Key"
// for key "routes[0].request_headers"), in the same order.
func HeaderEditFields(e *HeaderEdit, key string) (set, add []origin.HeaderField, setKeys, addKeys []string) {
	fields := func(m map[string]string, table string) ([]origin.HeaderField, []string) {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		slices.Sort(names)
		fs := make([]origin.HeaderField, len(names))
		keys := make([]string, len(names))
		for i, n := range names {
			fs[i] = origin.HeaderField{Name: n, Value: m[n]}
			keys[i] = key + "." + table + "." + n
		}
		return fs, keys
	}
	set, setKeys = fields(e.Set, "set")
	add, addKeys = fields(e.Add, "add")
	return set, add, setKeys, addKeys
}

// headerEdits calls f with each header edit of the configuration and its
// key: the routes' and the [[header_rules]] entries'.
func (c *Config) headerEdits(f func(key string, e *HeaderEdit)) {
	for i := range c.Routes {
		r := &c.Routes[i]
		f(fmt.Sprintf("routes[%d].request_headers", i), &r.RequestHeaders)
		f(fmt.Sprintf("routes[%d].response_headers", i), &r.ResponseHeaders)
	}
	for i := range c.HeaderRules {
		r := &c.HeaderRules[i]
		f(fmt.Sprintf("header_rules[%d].request_headers", i), &r.RequestHeaders)
		f(fmt.Sprintf("header_rules[%d].response_headers", i), &r.ResponseHeaders)
	}
}

// resolveHeaderFiles resolves the relative paths of the header rules'
// "{file:PATH}" values with resolve.
func (c *Config) resolveHeaderFiles(resolve func(*string)) {
	c.headerEdits(func(_ string, e *HeaderEdit) {
		for _, m := range []map[string]string{e.Set, e.Add} {
			for n, v := range m {
				if p, ok := FileValue(v); ok && p != "" {
					resolve(&p)
					m[n] = "{file:" + p + "}"
				}
			}
		}
	})
}

// setHeaderRuleDefaults names the unnamed [[header_rules]] entries.
func (c *Config) setHeaderRuleDefaults() {
	for i := range c.HeaderRules {
		setString(&c.HeaderRules[i].Name, fmt.Sprintf("header_rules[%d]", i))
	}
}

// validateHeaderRules checks the routes' header edits and the
// [[header_rules]] entries: their names, their criteria, each edit's
// field names (see origin.CheckRuleField), inline values (see
// origin.CheckRuleValue; a "{file:PATH}" value is read and checked when
// rustle loads the configuration) and names given twice. No error holds
// a value.
func (c *Config) validateHeaderRules(v *validator) {
	names := make(map[string]int, len(c.HeaderRules))
	for i, r := range c.HeaderRules {
		key := fmt.Sprintf("header_rules[%d]", i)
		if j, dup := names[r.Name]; dup {
			v.add(key+".name", fmt.Errorf("%q is also the name of header_rules[%d]", r.Name, j))
		} else {
			names[r.Name] = i
		}
		c.validateCriteria(v, key, r.Criteria)
		if r.RequestHeaders.Empty() && r.ResponseHeaders.Empty() {
			v.add(key, errors.New("edits nothing: give request_headers or response_headers"))
		}
	}
	c.headerEdits(func(key string, e *HeaderEdit) {
		seen := make(map[string]string)
		named := func(k, name string) bool {
			if err := origin.CheckRuleField(name); err != nil {
				v.add(k, err)
				return false
			}
			l := strings.ToLower(name)
			if prev, dup := seen[l]; dup {
				v.add(k, fmt.Errorf("%q is named twice (also %s)", name, prev))
				return false
			}
			seen[l] = k
			return true
		}
		set, add, setKeys, addKeys := HeaderEditFields(e, key)
		check := func(fs []origin.HeaderField, keys []string) {
			for i, f := range fs {
				if !named(keys[i], f.Name) {
					continue
				}
				if p, ok := FileValue(f.Value); ok {
					v.check(p != "", keys[i], "{file:} names no file")
					continue
				}
				if strings.Contains(f.Value, "{file:") {
					v.add(keys[i], errors.New("a {file:PATH} value must be the whole value: put the whole value in the file"))
					continue
				}
				if err := origin.CheckRuleValue(f.Value); err != nil {
					v.add(keys[i], err)
				}
			}
		}
		check(set, setKeys)
		check(add, addKeys)
		for j, n := range e.Remove {
			named(fmt.Sprintf("%s.remove[%d]", key, j), n)
		}
	})
}
