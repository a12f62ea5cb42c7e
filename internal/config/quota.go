package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Quota configures per-user and per-group quotas of bytes and requests
// per period (see package quota).
type Quota struct {
	// StateFile is the file the quota counters are saved to, every
	// SaveInterval and at shutdown, and read back from at start, so that
	// a restart does not reset them; "" means counters start afresh at
	// every start. Ignored with a [cluster], where Redis holds them.
	// [Load] resolves a relative path against the configuration file's
	// directory.
	StateFile string `toml:"state_file"`
	// SaveInterval is how often the counters are written to StateFile;
	// zero means 1m.
	SaveInterval Duration `toml:"save_interval"`
	// Rules are the quotas; empty means none. A request counts against
	// every rule that names its user.
	Rules []QuotaRule `toml:"rules"`
}

// QuotaRule is one quota: the bytes (both ways together) and the
// requests its users may use per period.
type QuotaRule struct {
	// Name names the rule in metrics, in `rustle quota` and in the state
	// file; "" means "rules[N]" (N from 0). Renaming a rule starts its
	// counters afresh.
	Name string `toml:"name"`
	// Who is whom the rule counts: its users each alone (["*"] means
	// every authenticated user), the members of each of its groups (of
	// [acl.groups] only) together, one count per group. Both empty
	// means users = ["*"].
	Who
	// Period is "hour", "day" or "month"; "" means "day".
	Period string `toml:"period"`
	// Reset is the time of day "HH:MM" the period starts at in TimeZone
	// (a month starts on its first day at that time; an hour at the
	// minute MM); "" means "00:00".
	Reset string `toml:"reset"`
	// TimeZone is the IANA time zone of Reset ("Europe/Paris"); "" means
	// "UTC".
	TimeZone string `toml:"time_zone"`
	// Bytes is the payload bytes, up and down together, allowed per
	// period; 0 means no byte quota.
	Bytes int64 `toml:"bytes"`
	// Requests is the requests and tunnels allowed per period; 0 means
	// no request quota.
	Requests int64 `toml:"requests"`
}

// Cluster configures the state several rustles share (see package
// cluster) through Redis: one server (Redis), the master a set of
// Sentinels watches (Sentinels and MasterName), or a Redis Cluster
// (Nodes). None of the three means no cluster: every instance counts
// alone.
type Cluster struct {
	// Redis is the redis://, rediss:// or unix:// URL of the one Redis
	// server that instances share quotas, per-user connection counts and
	// revocations through ("redis://[user:password@]host:port/db"); ""
	// means Sentinels, Nodes, or no cluster.
	Redis string `toml:"redis"`
	// Sentinels are the host:port addresses of the Redis Sentinels that
	// watch MasterName, the master instances share their state through
	// (a failover moves it); empty means Redis, Nodes, or no cluster.
	Sentinels []string `toml:"sentinels"`
	// MasterName is the name the Sentinels know the master by; required
	// with Sentinels, "" otherwise.
	MasterName string `toml:"master_name"`
	// Nodes are host:port addresses of nodes of the Redis Cluster
	// instances share their state through (a few are enough: the others
	// are found from them); empty means Redis, Sentinels, or no cluster.
	Nodes []string `toml:"nodes"`
	// Username is the Redis user (ACL) of the Redis servers of Sentinels
	// or Nodes; "" means the default user. With Redis, the URL names it.
	Username string `toml:"username"`
	// PasswordFile is a file holding the password of the Redis servers
	// (a trailing newline is dropped), read at start; "" means none, or
	// the one in the Redis URL. [Load] resolves a relative path against
	// the configuration file's directory.
	PasswordFile string `toml:"password_file"`
	// SentinelPasswordFile is a file holding the Sentinels' own password
	// (their requirepass), read at start; "" means they ask for none.
	// [Load] resolves a relative path.
	SentinelPasswordFile string `toml:"sentinel_password_file"`
	// SyncInterval is how often an instance sends its counts to Redis
	// and reads back the totals; zero means 1s.
	SyncInterval Duration `toml:"sync_interval"`
	// Timeout bounds every Redis call; zero means 500ms.
	Timeout Duration `toml:"timeout"`
	// Instance names this instance in Redis; "" means the host name and
	// the process id.
	Instance string `toml:"instance"`
}

// Enabled reports whether instances share their state through Redis:
// one of Redis, Sentinels and Nodes is set.
func (c *Cluster) Enabled() bool {
	return c.Redis != "" || len(c.Sentinels) > 0 || len(c.Nodes) > 0
}

// Quota and cluster defaults.
const (
	defaultQuotaSave    = time.Minute
	defaultQuotaPeriod  = "day"
	defaultQuotaReset   = "00:00"
	defaultQuotaZone    = "UTC"
	defaultClusterSync  = time.Second
	defaultClusterCalls = 500 * time.Millisecond
)

// QuotaPeriods are the values of a quota rule's period key.
var QuotaPeriods = []string{"hour", "day", "month"}

// setQuotaDefaults fills the [quota] and [cluster] defaults.
func (c *Config) setQuotaDefaults() {
	q := &c.Quota
	setDuration(&q.SaveInterval, defaultQuotaSave)
	for i := range q.Rules {
		r := &q.Rules[i]
		setString(&r.Name, "rules["+strconv.Itoa(i)+"]")
		setString(&r.Period, defaultQuotaPeriod)
		setString(&r.Reset, defaultQuotaReset)
		setString(&r.TimeZone, defaultQuotaZone)
		if len(r.Users) == 0 && len(r.Groups) == 0 {
			r.Users = []string{"*"}
		}
	}
	setDuration(&c.Cluster.SyncInterval, defaultClusterSync)
	setDuration(&c.Cluster.Timeout, defaultClusterCalls)
}

// ParseReset parses a quota rule's reset key, "HH:MM", into the time
// after midnight it names.
func ParseReset(s string) (time.Duration, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || len(h) != 2 || len(m) != 2 || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

// validateQuota checks [quota] and [cluster].
func (c *Config) validateQuota(v *validator) {
	q := c.Quota
	v.positive("quota.save_interval", q.SaveInterval)
	v.check(!strings.ContainsRune(q.StateFile, 0), "quota.state_file", "contains a NUL byte")
	names := make(map[string]bool)
	for i, r := range q.Rules {
		key := fmt.Sprintf("quota.rules[%d]", i)
		if names[r.Name] {
			v.add(key+".name", fmt.Errorf("%q names another rule too", r.Name))
		}
		names[r.Name] = true
		v.check(!strings.ContainsAny(r.Name, ": \t\r\n"), key+".name", "%q has a ':' or a space", r.Name)
		v.oneOf(key+".period", r.Period, QuotaPeriods)
		if _, err := ParseReset(r.Reset); err != nil {
			v.add(key+".reset", err)
		}
		if _, err := time.LoadLocation(r.TimeZone); err != nil {
			v.add(key+".time_zone", fmt.Errorf("unknown time zone %q", r.TimeZone))
		}
		v.check(r.Bytes >= 0, key+".bytes", "%d is negative", r.Bytes)
		v.check(r.Requests >= 0, key+".requests", "%d is negative", r.Requests)
		v.check(r.Bytes > 0 || r.Requests > 0, key, "sets neither bytes nor requests")
		c.validateWho(v, key, r.Who, false)
	}
	c.validateCluster(v)
}

// validateCluster checks [cluster].
func (c *Config) validateCluster(v *validator) {
	cl := c.Cluster
	var set []string
	for _, k := range []struct {
		key string
		on  bool
	}{{"cluster.redis", cl.Redis != ""}, {"cluster.sentinels", len(cl.Sentinels) > 0}, {"cluster.nodes", len(cl.Nodes) > 0}} {
		if k.on {
			set = append(set, k.key)
		}
	}
	if len(set) > 1 {
		v.add(set[1], fmt.Errorf("set with %s: give one of cluster.redis (one server), cluster.sentinels (a master the Sentinels watch) or cluster.nodes (a Redis Cluster)", set[0]))
	}
	urlPassword := false
	if cl.Redis != "" {
		u, err := url.Parse(cl.Redis)
		switch {
		case err != nil:
			// url.Parse's error quotes the URL, and so its password.
			v.add("cluster.redis", errors.New("not a URL (redis://[user:password@]host:port/db)"))
		case !slices.Contains([]string{"redis", "rediss", "unix"}, u.Scheme):
			v.add("cluster.redis", fmt.Errorf("scheme %q: want redis://, rediss:// or unix://", u.Scheme))
		default:
			_, urlPassword = u.User.Password()
			v.check(!urlPassword || cl.PasswordFile == "", "cluster.password_file", "the cluster.redis URL has a password already: give it there or here, not both")
			v.check(u.User.Username() == "" || cl.Username == "", "cluster.username", "the cluster.redis URL names a user already: name it there or here, not both")
		}
	}
	validateRedisAddrs(v, "cluster.sentinels", cl.Sentinels)
	validateRedisAddrs(v, "cluster.nodes", cl.Nodes)
	if len(cl.Sentinels) > 0 {
		v.check(cl.MasterName != "", "cluster.master_name", "required with cluster.sentinels: the name the Sentinels know the master by")
	} else {
		v.check(cl.MasterName == "", "cluster.master_name", "is only for cluster.sentinels")
		v.check(cl.SentinelPasswordFile == "", "cluster.sentinel_password_file", "is only for cluster.sentinels")
	}
	v.check(!strings.ContainsAny(cl.MasterName, " \t\r\n"), "cluster.master_name", "%q has a space", cl.MasterName)
	v.check(cl.Username == "" || cl.PasswordFile != "" || urlPassword, "cluster.username", "needs cluster.password_file (Redis authenticates a user with a password)")
	v.check(!strings.ContainsRune(cl.PasswordFile, 0), "cluster.password_file", "contains a NUL byte")
	v.check(!strings.ContainsRune(cl.SentinelPasswordFile, 0), "cluster.sentinel_password_file", "contains a NUL byte")
	v.check(cl.Enabled() || (cl.Username == "" && cl.PasswordFile == ""), "cluster",
		"username and password_file need cluster.redis, cluster.sentinels or cluster.nodes")
	v.positive("cluster.sync_interval", cl.SyncInterval)
	v.positive("cluster.timeout", cl.Timeout)
}

// validateRedisAddrs checks a list of host:port addresses of Redis
// servers or Sentinels under key.
func validateRedisAddrs(v *validator, key string, addrs []string) {
	seen := make(map[string]bool)
	for i, a := range addrs {
		k := fmt.Sprintf("%s[%d]", key, i)
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil || host == "":
			v.add(k, fmt.Errorf("%q is not host:port", a))
		case perr != nil || n < 1 || n > 65535:
			v.add(k, fmt.Errorf("%q: port %q is not a number from 1 to 65535", a, port))
		case seen[a]:
			v.add(k, fmt.Errorf("%q is listed twice", a))
		}
		seen[a] = true
	}
}

// quotaChange says how next changes [quota] or [cluster] from cur, which
// only a restart applies; "" when neither changes.
func quotaChange(cur, next *Config) string {
	switch {
	case !reflect.DeepEqual(cur.Quota, next.Quota):
		return "[quota] changed"
	case !reflect.DeepEqual(cur.Cluster, next.Cluster):
		return "[cluster] changed"
	}
	return ""
}
