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
//     it, an admin call) is appended to a stream (XADD) that every
//     instance follows (XREAD BLOCK from the last entry it read), which
//     ends the user's sessions and tunnels there.
//
// Every Redis call has a timeout. When Redis cannot be reached, the
// instance logs it once, counts locally (its quota counters keep the last
// totals read and add what it counts; the other instances' connections
// are no longer counted) and says so in Up, until a sync succeeds again,
// which sends what was counted meanwhile. Nothing is lost to an outage:
// a revocation Redis did not take is sent again at each sync until it
// does, and an instance that was cut off reads the stream on from the
// last entry it read.
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

// revokeStream is the stream revocations are appended to.
const revokeStream = prefix + "revocations"

// revokeStreamLen is about how many revocations the stream keeps
// (XADD MAXLEN ~): far more than an instance cut off for a few minutes
// misses.
const revokeStreamLen = 10000

// instancesKey is the sorted set of instances, scored by the Unix
// milliseconds of their last sync.
const instancesKey = prefix + "instances"

// Config configures a Cluster.
type Config struct {
	// URL is the Redis server's redis:// or rediss:// URL; required.
	URL string
	// SyncInterval is how often counts are sent and totals read back;
	// required.
	SyncInterval time.Duration
	// Timeout bounds every Redis call; required.
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
	follow *redis.Client // the revocation follower's own, for XREAD BLOCK; nil without Revoke

	unsentMu sync.Mutex
	unsent   [][]string // revocations Redis did not take yet; guarded by unsentMu

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
	if cfg.SyncInterval <= 0 || cfg.Timeout <= 0 {
		return nil, fmt.Errorf("cluster: sync interval %v and timeout %v must be positive", cfg.SyncInterval, cfg.Timeout)
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
	if cfg.Revoke != nil {
		fo := *opt
		fo.PoolSize = 1
		c.follow = redis.NewClient(&fo)
	}
	c.others.Store(&map[string]int{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Instance returns this instance's name.
func (c *Cluster) Instance() string { return c.cfg.Instance }

// Start syncs once (so that a first request sees the totals when Redis
// is there, within one timeout when it is not), finds the last entry of
// the revocation stream (what comes after it is for this instance; when
// Redis is not there, the entries added since this instance's clock's
// now), and starts the sync loop and the revocation follower.
func (c *Cluster) Start() {
	c.sync()
	c.wg.Add(1)
	go c.loop()
	if c.cfg.Revoke != nil {
		c.wg.Add(1)
		go c.followRevocations(c.lastRevocation())
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
		if c.follow != nil {
			c.follow.Close() // ends a blocked XREAD
		}
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
		return c.sendUnsent(ctx)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// The counts stay counted here, and go with the next sync.
		return fmt.Errorf("cluster: sync: %w", err)
	}
	for _, t := range counts {
		t.c.Settle(t.start, t.bytes, t.requests, t.b.Val(), t.r.Val())
	}
	if err := c.sendUnsent(ctx); err != nil {
		return err
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

// revocation is the payload of an entry of the revocation stream, in its
// field "r".
type revocation struct {
	From  string   `json:"from"`
	Users []string `json:"users"`
}

// Publish tells the other instances to end the sessions and tunnels of
// users, within one timeout. When Redis does not take it, it returns the
// error and the revocation is sent again at each sync until Redis does.
func (c *Cluster) Publish(users []string) error {
	if len(users) == 0 {
		return nil
	}
	users = append([]string(nil), users...)
	c.unsentMu.Lock()
	defer c.unsentMu.Unlock()
	c.unsent = append(c.unsent, users)
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	if err := c.sendUnsentLocked(ctx); err != nil {
		return fmt.Errorf("cluster: publish a revocation (sent again at each sync until Redis takes it): %w", err)
	}
	return nil
}

// sendUnsent appends to the stream, in order, the revocations Redis did
// not take yet.
func (c *Cluster) sendUnsent(ctx context.Context) error {
	c.unsentMu.Lock()
	defer c.unsentMu.Unlock()
	return c.sendUnsentLocked(ctx)
}

func (c *Cluster) sendUnsentLocked(ctx context.Context) error {
	for len(c.unsent) > 0 {
		msg, err := json.Marshal(revocation{From: c.cfg.Instance, Users: c.unsent[0]})
		if err != nil {
			return fmt.Errorf("cluster: encode a revocation: %w", err)
		}
		err = c.client.XAdd(ctx, &redis.XAddArgs{Stream: revokeStream, MaxLen: revokeStreamLen, Approx: true,
			Values: []string{"r", string(msg)}}).Err()
		if err != nil {
			return fmt.Errorf("cluster: append a revocation to %s: %w", revokeStream, err)
		}
		c.unsent[0] = nil
		c.unsent = c.unsent[1:]
	}
	c.unsent = nil
	return nil
}

// lastRevocation returns the ID of the revocation stream's last entry,
// "0-0" when the stream is empty, or, when Redis cannot be reached, an
// ID of this instance's clock's now (Redis's IDs begin with its clock's
// Unix milliseconds).
func (c *Cluster) lastRevocation() string {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
	defer cancel()
	last, err := c.follow.XRevRangeN(ctx, revokeStream, "+", "-", 1).Result()
	switch {
	case err != nil:
		c.log.Warn("cluster: revocation stream not read yet; revocations from now on are followed when Redis is back", "err", err)
		return strconv.FormatInt(time.Now().UnixMilli(), 10) + "-0"
	case len(last) == 0:
		return "0-0"
	default:
		return last[0].ID
	}
}

// followRevocations reads the revocation stream after the entry last
// until Close, ending here the users other instances revoked. While
// Redis cannot be reached it tries again at each sync interval, from the
// last entry it read.
func (c *Cluster) followRevocations(last string) {
	defer c.wg.Done()
	block := max(5*c.cfg.SyncInterval, time.Second)
	for c.ctx.Err() == nil {
		streams, err := c.follow.XRead(c.ctx, &redis.XReadArgs{Streams: []string{revokeStream, last}, Count: 100, Block: block}).Result()
		if errors.Is(err, redis.Nil) {
			continue // nothing new within block
		}
		if err != nil {
			select {
			case <-c.ctx.Done():
			case <-time.After(c.cfg.SyncInterval):
			}
			continue
		}
		for _, st := range streams {
			for _, m := range st.Messages {
				last = m.ID
				c.received(m.Values["r"])
			}
		}
	}
}

// received ends here the users of a revocation another instance wrote.
func (c *Cluster) received(payload any) {
	s, _ := payload.(string)
	var r revocation
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		c.log.Warn("cluster: malformed revocation ignored", "err", err)
		return
	}
	if r.From == c.cfg.Instance {
		return
	}
	c.log.Info("cluster: revocation received", "from", r.From, "users", len(r.Users))
	c.cfg.Revoke(r.Users)
}
