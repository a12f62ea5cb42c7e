// Package cluster shares per-user state between rustle instances through
// Redis: quota counters, per-user connection counts and revocations.
//
// Nothing on the request path talks to Redis (a user's first request on
// an instance waits, at most one timeout, for totals another goroutine
// reads; see below). Each instance counts
// locally and, every sync interval, sends what it counted since the last
// sync and reads back the totals (the model of Envoy's quota service):
//
//   - quotas: each counter's pending bytes and requests are added to a
//     hash per rule, scope and window (HINCRBY), whose totals become the
//     counter's base (see quota.Counter.Take and Settle); a counter made
//     here (a user's first request on this instance) first reads the
//     totals (HMGET), which its first requests wait for, at most one
//     timeout (see quota.Tracker.SetLoader);
//   - connections: each instance writes its users' open connections to a
//     hash of its own that expires after three intervals, and reads the
//     others', whose sum the Limiter adds to its own counts (see
//     limits.Limiter.SetShared);
//   - revocations: a user revoked on one instance (a reload that removes
//     it, an admin call) is appended to a stream (XADD) that every
//     instance follows (XREAD BLOCK from the last entry it read), which
//     ends the user's sessions and tunnels there.
//
// Redis is one server, the master a set of Sentinels watches (a
// failover moves it: each new connection asks the Sentinels where it
// is), or a Redis Cluster. Every command touches one key, and no two
// keys need to be on one node: a pipeline may span the nodes of a Redis
// Cluster, and keys have no hash tags. A sync whose commands fail in
// part (one node of a Redis Cluster down) confirms the counts whose
// commands succeeded.
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
	"strings"
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

// redisLog is the Logger go-redis's own lines go to (a dial that
// failed, the master the Sentinels switched to), at level Debug: the
// last Cluster's (go-redis has one logger per process).
var (
	redisLog     atomic.Pointer[slog.Logger]
	redisLogOnce sync.Once
)

// redisLogger hands go-redis's lines to redisLog.
type redisLogger struct{}

// Printf logs one line of go-redis's at level Debug.
func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, "cluster: go-redis: "+fmt.Sprintf(format, v...))
	}
}

// Config configures a Cluster. Redis is one of: one server (URL), the
// master a set of Sentinels watches (Sentinels, MasterName), or a Redis
// Cluster (Nodes).
type Config struct {
	// URL is the redis://, rediss:// or unix:// URL of one Redis server
	// (it may carry a user name and a password); "" means Sentinels or
	// Nodes.
	URL string
	// Sentinels are the host:port addresses of Redis Sentinels watching
	// the master MasterName: Redis is that master, wherever they say it
	// is (a failover moves it); none means URL or Nodes.
	Sentinels []string
	// MasterName is the name the Sentinels know the master by; required
	// with Sentinels.
	MasterName string
	// Nodes are host:port addresses of nodes of a Redis Cluster (some are
	// enough: the others are found from them); none means URL or
	// Sentinels.
	Nodes []string
	// Username and Password authenticate to the Redis servers (AUTH); ""
	// means none (a user name "" with a password: the default user).
	// With URL they replace what it carries.
	Username, Password string
	// SentinelPassword authenticates to the Sentinels; "" means none.
	SentinelPassword string
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
	where  string                // what Redis is, for the log: its address, its Sentinels or its nodes
	client redis.UniversalClient // a Client, a FailoverClient or a ClusterClient
	follow redis.UniversalClient // the revocation follower's own, for XREAD BLOCK; nil without Revoke

	unsentMu sync.Mutex
	unsent   [][]string // revocations Redis did not take yet; guarded by unsentMu

	loadMu  sync.Mutex
	loadQ   []*quota.Counter // counters made here whose totals are to be fetched; guarded by loadMu
	loadSig chan struct{}    // a counter was queued; capacity 1

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
	newClient, where, err := clientOf(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.SyncInterval <= 0 || cfg.Timeout <= 0 {
		return nil, fmt.Errorf("cluster: sync interval %v and timeout %v must be positive", cfg.SyncInterval, cfg.Timeout)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	redisLog.Store(log)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
	c := &Cluster{cfg: cfg, log: log, where: where, client: newClient(4)}
	if cfg.Revoke != nil {
		c.follow = newClient(1)
	}
	c.others.Store(&map[string]int{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.loadSig = make(chan struct{}, 1)
	cfg.Quota.SetLoader(c.queueLoad, cfg.Timeout)
	return c, nil
}

// clientOf returns how to make a client of the Redis cfg names, with a
// pool of a given size (at most that many connections to each server),
// and what Redis is, for the log (no credentials). Every call of the
// clients is bounded by cfg.Timeout and tried once: no retry, no second
// dial, and in a Redis Cluster no redirection followed (the client
// learns where the slot went, and the next sync goes there). A failed
// sync is retried by the next; and a pipeline over several nodes whose
// one node fails thus leaves the others' replies as they came (go-redis
// marks every command of a pipeline failed when a retry runs out of
// time, even those that were applied, which would send them again).
func clientOf(cfg *Config) (newClient func(pool int) redis.UniversalClient, where string, err error) {
	common := redis.UniversalOptions{
		Username: cfg.Username, Password: cfg.Password, SentinelPassword: cfg.SentinelPassword,
		DialTimeout: cfg.Timeout, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout, PoolTimeout: cfg.Timeout,
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, MaxRedirects: -1, DisableIdentity: true,
	}
	switch {
	case len(cfg.Sentinels) > 0:
		if cfg.MasterName == "" {
			return nil, "", errors.New("cluster: Sentinels without a master name")
		}
		common.Addrs, common.MasterName = cfg.Sentinels, cfg.MasterName
		return func(pool int) redis.UniversalClient {
				o := common.Failover()
				o.PoolSize = pool
				return redis.NewFailoverClient(o)
			}, fmt.Sprintf("master %s of sentinels %s", cfg.MasterName, strings.Join(cfg.Sentinels, ",")),
			nil
	case len(cfg.Nodes) > 0:
		common.Addrs = cfg.Nodes
		return func(pool int) redis.UniversalClient {
			o := common.Cluster()
			o.PoolSize = pool
			return redis.NewClusterClient(o)
		}, "cluster of nodes " + strings.Join(cfg.Nodes, ","), nil
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // without the URL, which holds the password
		}
		return nil, "", fmt.Errorf("cluster: redis URL: %w", err)
	}
	if cfg.Username != "" || cfg.Password != "" {
		opt.Username, opt.Password = cfg.Username, cfg.Password
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = cfg.Timeout, cfg.Timeout, cfg.Timeout, cfg.Timeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DisableIdentity = true
	return func(pool int) redis.UniversalClient {
		o := *opt
		o.PoolSize = pool
		return redis.NewClient(&o)
	}, opt.Addr, nil
}

// Instance returns this instance's name.
func (c *Cluster) Instance() string { return c.cfg.Instance }

// Start syncs once (so that the other instances' connections are known
// when Redis is there, within one timeout when it is not), finds the
// last entry of the revocation stream (what comes after it is for this
// instance; when Redis is not there, the entries added since this
// instance's clock's now), and starts the sync loop, the loader of the
// counters' first totals and the revocation follower.
func (c *Cluster) Start() {
	c.sync()
	c.wg.Add(2)
	go c.loop()
	go c.loadCounters()
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

// queueLoad queues the fetch of the totals of a counter just made here
// (see quota.Tracker.SetLoader): its first requests wait for them, at
// most one timeout, unless Redis is known to be unreachable (the last
// sync failed) or the cluster is closed: then they go on at once, checked
// against this instance's counts. It does not block.
func (c *Cluster) queueLoad(qc *quota.Counter) {
	if c.ctx.Err() != nil {
		qc.Release()
		return
	}
	if c.syncs.Load() > 0 && !c.up.Load() {
		qc.Release() // still fetched: Loaded sets the totals if Redis answers
	}
	c.loadMu.Lock()
	c.loadQ = append(c.loadQ, qc)
	c.loadMu.Unlock()
	select {
	case c.loadSig <- struct{}{}:
	default:
	}
}

// loadCounters fetches the totals of the counters queueLoad queued, the
// counters queued meanwhile in one pipeline, until Close.
func (c *Cluster) loadCounters() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			c.loadMu.Lock()
			q := c.loadQ
			c.loadQ = nil
			c.loadMu.Unlock()
			for _, qc := range q {
				qc.Release()
			}
			return
		case <-c.loadSig:
		}
		c.loadMu.Lock()
		q := c.loadQ
		c.loadQ = nil
		c.loadMu.Unlock()
		c.load(q)
	}
}

// load reads the totals of counters' current windows (HMGET, one key
// each) and hands them over; a counter whose totals could not be read is
// released (its requests are checked against this instance's counts,
// and its next sync reads the totals).
func (c *Cluster) load(counters []*quota.Counter) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
	defer cancel()
	pipe := c.client.Pipeline()
	starts := make([]int64, len(counters))
	cmds := make([]*redis.SliceCmd, len(counters))
	for i, qc := range counters {
		start, _ := qc.Window()
		starts[i] = start.UnixNano()
		cmds[i] = pipe.HMGet(ctx, quotaKey(qc.Rule().Name, qc.Scope(), starts[i]), "bytes", "requests")
	}
	pipe.Exec(ctx) // each command's error is its counter's
	for i, qc := range counters {
		v, err := cmds[i].Result()
		if err != nil || len(v) != 2 {
			qc.Release()
			continue
		}
		qc.Loaded(starts[i], total(v[0]), total(v[1]))
	}
}

// total reads a field of a quota hash as HMGET returns it: nil (no such
// field) is 0.
func total(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
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
			c.log.Info("cluster: Redis reachable again; limits are shared", "redis", c.where)
		}
		return
	}
	c.up.Store(false)
	c.others.Store(&map[string]int{})
	if !c.down {
		c.down = true
		c.log.Warn("cluster: Redis unreachable; limits count locally until it is back",
			"redis", c.where, "err", err)
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
	_, err := pipe.Exec(ctx)
	for _, t := range counts {
		// A counter whose commands failed (Redis down; in a Redis Cluster,
		// the node that holds its key) keeps its counts counted here,
		// and they go with the next sync; the others are confirmed.
		if t.b.Err() == nil && t.r.Err() == nil {
			t.c.Settle(t.start, t.bytes, t.requests, t.b.Val(), t.r.Val())
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: sync: %w", err)
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
