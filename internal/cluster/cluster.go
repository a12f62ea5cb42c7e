// Package cluster shares per-user state between rustle instances through
// Redis: quota counters, per-user connection counts and revocations.
//
// Nothing on the request path talks to Redis. Each instance counts
// locally and, every sync interval, sends what it counted since the last
// sync and reads back the totals (the model of Envoy's quota service):
//
//   - quotas: each counter's pending bytes and requests are added to a
//     hash per rule, scope and window (HINCRBY), whose totals become the
//     counter's base (see quota.Counter.Take and Settle);
//   - connections: each instance writes its users' open connections to a
//     hash of its own that expires after three intervals, and reads the
//     others', whose sum the Limiter adds to its own counts (see
//     limits.Limiter.SetShared);
//   - revocations: a user revoked on one instance (a reload that removes
//     it, an admin call) is published on a channel every instance
//     subscribes to, which ends the user's sessions and tunnels there.
//
// Every Redis call has a timeout. When Redis cannot be reached, the
// instance logs it once, counts locally (its quota counters keep the last
// totals read and add what it counts; the other instances' connections
// are no longer counted) and says so in Up, until a sync succeeds again,
// which sends what was counted meanwhile. Revocations published while an
// instance is cut off from Redis do not reach it.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rustle-proxy/rustle/internal/quota"
)

// prefix begins every key and channel rustle uses in Redis.
const prefix = "rustle:"

// revokeChannel is the channel revocations are published on.
const revokeChannel = prefix + "revoke"

// instancesKey is the sorted set of instances, scored by the Unix
// milliseconds of their last sync.
const instancesKey = prefix + "instances"

// Config configures a Cluster.
type Config struct {
	// URL is the Redis server's redis:// or rediss:// URL; required.
	URL string
	// SyncInterval is how often counts are sent and totals read back; 0
	// = 1s.
	SyncInterval time.Duration
	// Timeout bounds every Redis call; 0 = 500ms.
	Timeout time.Duration
	// Instance names this instance; "" = the host name and process id.
	Instance string
	// Quota holds the quota counters to share; nil = none.
	Quota *quota.Tracker
	// LocalConns calls its argument with each user holding connections
	// here and their number; nil = connections are not shared.
	LocalConns func(fn func(user string, conns int))
	// Revoke ends, here, the sessions and tunnels of users another
	// instance revoked; nil = revocations are not received.
	Revoke func(users []string)
	// Logger receives the transitions to and from Redis being
	// unreachable, and revocations received; nil = discard.
	Logger *slog.Logger
}

// Cluster is this instance's link to the others. Create it with New,
// then Start; stop it with Close.
type Cluster struct {
	cfg    Config
	log    *slog.Logger
	client *redis.Client

	others atomic.Pointer[map[string]int] // other instances' connections per user
	up     atomic.Bool                    // the last Redis call succeeded
	syncs  atomic.Int64                   // syncs tried
	down   bool                           // a failure was logged; owned by the sync loop

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New returns a Cluster for cfg; it connects to nothing yet.
func New(cfg Config) (*Cluster, error) {
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = host + "-" + strconv.Itoa(os.Getpid())
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // without the URL, which holds the password
		}
		return nil, fmt.Errorf("cluster: redis URL: %w", err)
	}
	opt.DialTimeout = cfg.Timeout
	opt.ReadTimeout = cfg.Timeout
	opt.WriteTimeout = cfg.Timeout
	opt.PoolTimeout = cfg.Timeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1 // a failed sync is retried by the next
	opt.DisableIdentity = true
	opt.PoolSize = 4
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg, log: log, client: redis.NewClient(opt)}
	c.others.Store(&map[string]int{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Instance returns this instance's name.
func (c *Cluster) Instance() string { return c.cfg.Instance }

// Start syncs once (so that a first request sees the totals when Redis
// is there, within one timeout when it is not), subscribes to the other
// instances' revocations (waiting up to one timeout for Redis to confirm
// it: a revocation published before that would be lost) and starts the
// sync loop and the revocation subscriber.
func (c *Cluster) Start() {
	c.sync()
	c.wg.Add(1)
	go c.loop()
	if c.cfg.Revoke != nil {
		ps := c.client.Subscribe(c.ctx, revokeChannel)
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
		if _, err := ps.Receive(ctx); err != nil {
			// Redis is not there yet: the subscription is made again
			// when it comes back.
			c.log.Warn("cluster: revocations not subscribed yet", "err", err)
		}
		cancel()
		c.wg.Add(1)
		go c.subscribe(ps)
	}
}

// Others returns the connections of user that the other instances
// reported at the last sync; 0 while Redis is unreachable. It takes no
// lock and allocates nothing.
func (c *Cluster) Others(user string) int { return (*c.others.Load())[user] }

// Up reports whether the last sync with Redis succeeded.
func (c *Cluster) Up() bool { return c.up.Load() }

// Close stops the sync loop and the subscriber after a last sync (which
// sends what was counted since the one before, and withdraws this
// instance's connections), and closes the connections to Redis. It is
// idempotent.
func (c *Cluster) Close() {
	c.once.Do(func() {
		c.cancel()
		c.wg.Wait()
		c.sync()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
		c.client.Del(ctx, c.connsKey(c.cfg.Instance))
		c.client.ZRem(ctx, instancesKey, c.cfg.Instance)
		cancel()
		c.client.Close()
	})
}

func (c *Cluster) loop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.sync()
		}
	}
}

// connsKey is the hash of an instance's connections per user.
func (c *Cluster) connsKey(instance string) string { return prefix + "conns:" + instance }

// quotaKey is the hash of a quota counter's window: fields bytes and
// requests.
func quotaKey(rule, scope string, start int64) string {
	return prefix + "quota:" + rule + ":" + scope + ":" + strconv.FormatInt(start/int64(time.Second), 10)
}

// taken is what Take handed over of one counter.
type taken struct {
	c                      *quota.Counter
	start, bytes, requests int64
	b, r                   *redis.IntCmd
}

// sync sends this instance's counts and reads back the totals.
func (c *Cluster) sync() {
	defer c.syncs.Add(1)
	err := c.syncOnce()
	if err == nil {
		c.up.Store(true)
		if c.down {
			c.down = false
			c.log.Info("cluster: Redis reachable again; limits are shared", "redis", c.client.Options().Addr)
		}
		return
	}
	c.up.Store(false)
	c.others.Store(&map[string]int{})
	if !c.down {
		c.down = true
		c.log.Warn("cluster: Redis unreachable; limits count locally until it is back",
			"redis", c.client.Options().Addr, "err", err)
	}
}

func (c *Cluster) syncOnce() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	now := time.Now()
	interval := c.cfg.SyncInterval

	var counts []taken
	for _, qc := range c.cfg.Quota.Counters() {
		start, b, r := qc.Take()
		counts = append(counts, taken{c: qc, start: start, bytes: b, requests: r})
	}
	untake := func() {
		for _, t := range counts {
			t.c.Untake(t.start, t.bytes, t.requests)
		}
	}
	pipe := c.client.Pipeline()
	for i := range counts {
		t := &counts[i]
		k := quotaKey(t.c.Rule().Name, t.c.Scope(), t.start)
		t.b = pipe.HIncrBy(ctx, k, "bytes", t.bytes)
		t.r = pipe.HIncrBy(ctx, k, "requests", t.requests)
		_, end := t.c.Window()
		pipe.ExpireAt(ctx, k, end.Add(time.Hour))
	}
	var live *redis.StringSliceCmd
	if c.cfg.LocalConns != nil {
		mine := c.connsKey(c.cfg.Instance)
		pipe.Del(ctx, mine)
		var fields []any
		c.cfg.LocalConns(func(user string, n int) { fields = append(fields, user, n) })
		if len(fields) > 0 {
			pipe.HSet(ctx, mine, fields...)
			pipe.PExpire(ctx, mine, 3*interval)
		}
		pipe.ZAdd(ctx, instancesKey, redis.Z{Score: float64(now.UnixMilli()), Member: c.cfg.Instance})
		old := strconv.FormatInt(now.Add(-3*interval).UnixMilli(), 10)
		pipe.ZRemRangeByScore(ctx, instancesKey, "-inf", "("+old)
		live = pipe.ZRangeByScore(ctx, instancesKey, &redis.ZRangeBy{Min: old, Max: "+inf"})
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		untake()
		return fmt.Errorf("cluster: sync: %w", err)
	}
	for _, t := range counts {
		t.c.Settle(t.start, t.b.Val(), t.r.Val())
	}
	if live == nil {
		return nil
	}
	return c.readOthers(ctx, live.Val())
}

// readOthers sums the connections per user of the other live instances.
func (c *Cluster) readOthers(ctx context.Context, instances []string) error {
	pipe := c.client.Pipeline()
	var cmds []*redis.MapStringStringCmd
	for _, in := range instances {
		if in != c.cfg.Instance {
			cmds = append(cmds, pipe.HGetAll(ctx, c.connsKey(in)))
		}
	}
	others := make(map[string]int)
	if len(cmds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("cluster: read the other instances' connections: %w", err)
		}
		for _, cmd := range cmds {
			for user, v := range cmd.Val() {
				if n, err := strconv.Atoi(v); err == nil {
					others[user] += n
				}
			}
		}
	}
	c.others.Store(&others)
	return nil
}

// revocation is a message on the revocation channel.
type revocation struct {
	From  string   `json:"from"`
	Users []string `json:"users"`
}

// Publish tells the other instances to end the sessions and tunnels of
// users, within one timeout.
func (c *Cluster) Publish(users []string) error {
	if len(users) == 0 {
		return nil
	}
	msg, err := json.Marshal(revocation{From: c.cfg.Instance, Users: users})
	if err != nil {
		return fmt.Errorf("cluster: publish a revocation: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	if err := c.client.Publish(ctx, revokeChannel, msg).Err(); err != nil {
		return fmt.Errorf("cluster: publish a revocation: %w", err)
	}
	return nil
}

// subscribe receives the other instances' revocations on ps until Close;
// the subscription reconnects by itself after Redis comes back.
func (c *Cluster) subscribe(ps *redis.PubSub) {
	defer c.wg.Done()
	defer ps.Close()
	ch := ps.Channel(redis.WithChannelHealthCheckInterval(5 * c.cfg.SyncInterval))
	for {
		select {
		case <-c.ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			var r revocation
			if err := json.Unmarshal([]byte(m.Payload), &r); err != nil {
				c.log.Warn("cluster: malformed revocation ignored", "err", err)
				continue
			}
			if r.From == c.cfg.Instance {
				continue
			}
			c.log.Info("cluster: revocation received", "from", r.From, "users", len(r.Users))
			c.cfg.Revoke(r.Users)
		}
	}
}
