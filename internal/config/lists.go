package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/lists"
)

// Lists configures the lists that access rules and routes name besides
// their own entries (hosts_file, hosts_url, clients_file, clients_url;
// see [Criteria]). Its zero value means the defaults below.
type Lists struct {
	// Refresh is how often a list from a URL is fetched again (with
	// If-None-Match and If-Modified-Since); zero means 1h.
	Refresh Duration `toml:"refresh"`
	// Timeout bounds one fetch, from the connect to the last byte; zero
	// means 30s.
	Timeout Duration `toml:"timeout"`
	// MaxBytes bounds a list, a file or a URL's body as read (after any
	// decompression): a larger one is refused without reading the rest;
	// 0 means 67108864 (64 MiB, about two million domains).
	MaxBytes int64 `toml:"max_bytes"`
	// AllowPrivate lists private ranges (IP addresses or CIDR prefixes)
	// a list URL may be fetched from besides the top-level
	// allow_private's; empty means none: the private-destination guard
	// refuses a list URL on a private address as it refuses a client's
	// request.
	AllowPrivate []string `toml:"allow_private"`
}

// Defaults of [lists].
const (
	defaultListRefresh  = time.Hour
	defaultListTimeout  = 30 * time.Second
	defaultListMaxBytes = 64 << 20
)

func (l *Lists) setDefaults() {
	setDuration(&l.Refresh, defaultListRefresh)
	setDuration(&l.Timeout, defaultListTimeout)
	if l.MaxBytes == 0 {
		l.MaxBytes = defaultListMaxBytes
	}
}

// ListSource is one list a rule or a route names: a file or a URL.
type ListSource struct {
	// Key is the criterion's key: "hosts_file", "hosts_url",
	// "clients_file" or "clients_url".
	Key string
	// Kind is what the list holds.
	Kind acl.ListKind
	// File is the file; "" for a URL.
	File string
	// URL is the URL, with its pin; "" for a file.
	URL string
}

// ListSources returns the lists c names, in the order of their keys.
func (c Criteria) ListSources() []ListSource {
	var out []ListSource
	add := func(key string, kind acl.ListKind, file, url string) {
		if file != "" || url != "" {
			out = append(out, ListSource{Key: key, Kind: kind, File: file, URL: url})
		}
	}
	add("hosts_file", acl.HostList, c.HostsFile, "")
	add("hosts_url", acl.HostList, "", c.HostsURL)
	add("clients_file", acl.ClientList, c.ClientsFile, "")
	add("clients_url", acl.ClientList, "", c.ClientsURL)
	return out
}

// validateLists checks [lists].
func (c *Config) validateLists(v *validator) {
	l := c.Lists
	v.positive("lists.refresh", l.Refresh)
	v.positive("lists.timeout", l.Timeout)
	v.check(l.MaxBytes > 0, "lists.max_bytes", "%d is not positive", l.MaxBytes)
	for i, s := range l.AllowPrivate {
		if _, err := acl.ParsePrefix(s); err != nil {
			v.add(fmt.Sprintf("lists.allow_private[%d]", i), err)
		}
	}
}

// validateListSources checks the list keys of the criteria at key: a
// file's path, and a URL lists.ParseURL takes.
func validateListSources(v *validator, key string, cr Criteria) {
	for _, s := range cr.ListSources() {
		k := key + "." + s.Key
		if s.File != "" {
			v.check(!strings.ContainsRune(s.File, 0), k, "contains a NUL byte")
			continue
		}
		if _, _, err := lists.ParseURL(s.URL); err != nil {
			v.add(k, err)
		}
	}
}

// ListConfig returns how lists load, but for the guard, which is the
// caller's to make with [Config.ListAllowPrivate].
func (c *Config) ListConfig() lists.Config {
	return lists.Config{Refresh: c.Lists.Refresh.Duration, Timeout: c.Lists.Timeout.Duration, MaxBytes: c.Lists.MaxBytes}
}

// ListAllowPrivate returns the private ranges a list URL may be fetched
// from: allow_private's and lists.allow_private's.
func (c *Config) ListAllowPrivate() []string {
	return append(append([]string(nil), c.AllowPrivate...), c.Lists.AllowPrivate...)
}

// AuditLines says which access rules are in audit mode, one line each,
// for rustle check: a report rule, the whole policy (acl.mode), or a
// listener's (acl_mode); none when every rule is enforced.
func (c *Config) AuditLines() []string {
	var out []string
	if len(c.ACL.Rules) == 0 {
		return nil
	}
	global := c.ACL.Mode == ACLAudit
	if global {
		out = append(out, `acl.mode = "audit": every deny rule and the default let requests through, logged with would_deny`)
	}
	for i, r := range c.ACL.Rules {
		if r.Action == acl.Report {
			out = append(out, fmt.Sprintf(`acl.rules[%d] %q: action = "report": requests it would deny are let through, logged with would_deny`, i, r.Name))
		}
	}
	for i, l := range c.Listen {
		switch {
		case l.ACLMode == ACLAudit && !global:
			out = append(out, fmt.Sprintf(`listen[%d] %q: acl_mode = "audit": every deny rule and the default let its requests through, logged with would_deny`, i, l.Name))
		case l.ACLMode == ACLEnforce && global:
			out = append(out, fmt.Sprintf(`listen[%d] %q: acl_mode = "enforce": its requests are refused by the rules (but report rules)`, i, l.Name))
		}
	}
	return out
}

// ListenerAudits reports whether the access rules are in audit mode on
// the listener l: its acl_mode, else acl.mode.
func (c *Config) ListenerAudits(l Listener) bool {
	if l.ACLMode != "" {
		return l.ACLMode == ACLAudit
	}
	return c.ACL.Mode == ACLAudit
}

// The modes of acl.mode and a listener's acl_mode.
const (
	// ACLEnforce refuses what the rules deny.
	ACLEnforce = "enforce"
	// ACLAudit lets it through, logged with would_deny.
	ACLAudit = "audit"
)
