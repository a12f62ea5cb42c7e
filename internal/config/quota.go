package config

import (
	"errors"
	"fmt"
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
	// every start. Ignored with [cluster] redis, where Redis holds them.
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
// cluster).
type Cluster struct {
	// Redis is the redis:// or rediss:// URL of the Redis server that
	// instances share quotas, per-user connection counts and
	// revocations through; "" means no cluster: every instance counts
	// alone.
	Redis string `toml:"redis"`
	// SyncInterval is how often an instance sends its counts to Redis
	// and reads back the totals; zero means 1s.
	SyncInterval Duration `toml:"sync_interval"`
	// Timeout bounds every Redis call; zero means 500ms.
	Timeout Duration `toml:"timeout"`
	// Instance names this instance in Redis; "" means the host name and
	// the process id.
	Instance string `toml:"instance"`
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
	cl := c.Cluster
	if cl.Redis != "" {
		u, err := url.Parse(cl.Redis)
		switch {
		case err != nil:
			// url.Parse's error quotes the URL, and so its password.
			v.add("cluster.redis", errors.New("not a URL (redis://[user:password@]host:port/db)"))
		case !slices.Contains([]string{"redis", "rediss", "unix"}, u.Scheme):
			v.add("cluster.redis", fmt.Errorf("scheme %q: want redis://, rediss:// or unix://", u.Scheme))
		}
	}
	v.positive("cluster.sync_interval", cl.SyncInterval)
	v.positive("cluster.timeout", cl.Timeout)
}

// quotaChange says how next changes [quota] or [cluster] from cur, which
// only a restart applies; "" when neither changes.
func quotaChange(cur, next *Config) string {
	switch {
	case !reflect.DeepEqual(cur.Quota, next.Quota):
		return "[quota] changed"
	case cur.Cluster != next.Cluster:
		return "[cluster] changed"
	}
	return ""
}
