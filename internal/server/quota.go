package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/cluster"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/quota"
)

// shared is what the server shares across generations for quotas and a
// cluster: made by New from the first configuration ([quota] and
// [cluster] only change with a restart).
type shared struct {
	quota   *quota.Tracker   // nil without quota rules
	cluster *cluster.Cluster // nil without a [cluster]
	// stateFile is where the quota counters are saved when there is no
	// cluster; "" = not saved.
	stateFile string
	every     time.Duration
	stop      chan struct{} // closed by closeShared: ends the save loop
	done      sync.WaitGroup
	started   sync.Once // startShared
	once      sync.Once // closeShared
}

// quotaRules converts the configured rules; the configuration is
// validated.
func quotaRules(q config.Quota) ([]quota.Rule, error) {
	rules := make([]quota.Rule, len(q.Rules))
	for i, r := range q.Rules {
		period, err := quota.ParsePeriod(r.Period)
		if err != nil {
			return nil, err
		}
		reset, err := config.ParseReset(r.Reset)
		if err != nil {
			return nil, err
		}
		loc, err := time.LoadLocation(r.TimeZone)
		if err != nil {
			return nil, err
		}
		rules[i] = quota.Rule{Name: r.Name, Users: r.Users, Groups: r.Groups, Period: period, Reset: reset,
			Loc: loc, Bytes: r.Bytes, Requests: r.Requests}
	}
	return rules, nil
}

// newShared makes the quota tracker and the cluster link of cfg, and
// reads back the saved quota counters.
func (s *Server) newShared(cfg *config.Config) error {
	sh := &s.shared
	sh.stop = make(chan struct{})
	if len(cfg.Quota.Rules) > 0 {
		rules, err := quotaRules(cfg.Quota)
		if err != nil {
			return fmt.Errorf("server: quota: %w", err)
		}
		sh.quota = quota.New(quota.Config{Rules: rules, Groups: cfg.ACL.Groups})
	}
	if c := cfg.Cluster; c.Enabled() {
		cc := cluster.Config{
			URL: c.Redis, Sentinels: c.Sentinels, MasterName: c.MasterName, Nodes: c.Nodes, Username: c.Username,
			SyncInterval: c.SyncInterval.Duration, Timeout: c.Timeout.Duration,
			Instance: c.Instance, Quota: sh.quota, LocalConns: s.localConns, Revoke: s.revokeUsers,
			Logger: s.log,
		}
		var err error
		if c.PasswordFile != "" {
			if cc.Password, err = readSecret(c.PasswordFile); err != nil {
				return fmt.Errorf("server: cluster.password_file: %w", err)
			}
		}
		if c.SentinelPasswordFile != "" {
			if cc.SentinelPassword, err = readSecret(c.SentinelPasswordFile); err != nil {
				return fmt.Errorf("server: cluster.sentinel_password_file: %w", err)
			}
		}
		cl, err := cluster.New(cc)
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		sh.cluster = cl
		return nil
	}
	if cfg.Quota.StateFile != "" && sh.quota != nil {
		sh.stateFile, sh.every = cfg.Quota.StateFile, cfg.Quota.SaveInterval.Duration
		n, err := sh.quota.Load(sh.stateFile)
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		s.log.Info("quota counters restored", "file", sh.stateFile, "counters", n)
	}
	return nil
}

// startShared starts the cluster link, or the loop that saves the quota
// counters. It does so once.
func (s *Server) startShared() { s.shared.started.Do(s.startSharedOnce) }

func (s *Server) startSharedOnce() {
	sh := &s.shared
	if sh.cluster != nil {
		sh.cluster.Start()
		return
	}
	if sh.stateFile == "" {
		return
	}
	sh.done.Add(1)
	go func() {
		defer sh.done.Done()
		t := time.NewTicker(sh.every)
		defer t.Stop()
		for {
			select {
			case <-sh.stop:
				return
			case <-t.C:
				s.saveQuota()
			}
		}
	}()
}

// saveQuota writes the quota counters to the state file, logging a
// failure.
func (s *Server) saveQuota() {
	if err := s.shared.quota.Save(s.shared.stateFile); err != nil {
		s.log.Error("quota counters not saved", "err", err)
	}
}

// closeShared stops the save loop and saves the counters a last time, or
// closes the cluster link after a last sync. It is idempotent.
func (s *Server) closeShared() {
	sh := &s.shared
	sh.once.Do(func() {
		if sh.stop != nil {
			close(sh.stop)
		}
		sh.done.Wait()
		if sh.cluster != nil {
			sh.cluster.Close()
		}
		if sh.stateFile != "" {
			s.saveQuota()
		}
	})
}

// localConns reports the current limiter's users' connections to the
// cluster.
func (s *Server) localConns(fn func(user string, conns int)) {
	s.mu.Lock()
	lim := s.lim
	s.mu.Unlock()
	if lim != nil {
		lim.UserConns(fn)
	}
}

// revokeUsers ends, on every listener, the sessions and tunnels of users
// another instance revoked.
func (s *Server) revokeUsers(users []string) {
	n := s.revoked.Revoke(func(listener, user string) bool { return !slices.Contains(users, user) })
	if n > 0 {
		s.log.Info("access revoked by another instance", "count", n)
	}
}

// RevokeUser ends the sessions and tunnels of user on every listener,
// and with a cluster on every instance; it returns how many users it
// ended anything of here (0 or 1), and the error of publishing the
// revocation to the other instances. It does not remove the user: one
// still configured may come back.
func (s *Server) RevokeUser(user string) (int, error) {
	n := s.revoked.Revoke(func(listener, u string) bool { return u != user })
	if n > 0 {
		s.log.Info("access revoked by an admin call", "user", user)
	}
	if s.shared.cluster == nil {
		return n, nil
	}
	return n, s.shared.cluster.Publish([]string{user})
}

// publishRevoked tells the other instances of the users a reload
// revoked, logging a failure.
func (s *Server) publishRevoked(users []string) {
	if s.shared.cluster == nil || len(users) == 0 {
		return
	}
	if err := s.shared.cluster.Publish(users); err != nil {
		s.log.Warn("revocation not published to the other instances", "err", err)
	}
}

// Quota returns the state of user's quotas, none when no quota applies.
func (s *Server) Quota(user string) []quota.Status { return s.shared.quota.Status(user) }

// registerQuotaMetrics makes m report the quota counters and, with a
// cluster, whether Redis is reachable.
func (s *Server) registerQuotaMetrics(m *metrics.Metrics) {
	if q := s.shared.quota; q != nil {
		m.SetQuotaStats(func() []metrics.QuotaStat {
			all := q.All()
			out := make([]metrics.QuotaStat, len(all))
			for i, st := range all {
				out[i] = metrics.QuotaStat{Rule: st.Rule, Scope: st.Scope, BytesUsed: st.BytesUsed,
					BytesLimit: st.BytesLimit, RequestsUsed: st.RequestsUsed, RequestsLimit: st.RequestsLimit}
			}
			return out
		})
	}
	if cl := s.shared.cluster; cl != nil {
		m.SetClusterUp(cl.Up)
	}
}

// userNames returns the names of cfg's users, inline and from the
// htpasswd files (which auth.New has just read: a file that no longer
// reads adds none).
func userNames(cfg *config.Config) []string {
	var names []string
	for _, u := range cfg.Auth.Users {
		names = append(names, u.Name)
	}
	for _, path := range cfg.Auth.Htpasswd {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		users, _ := auth.ParseHtpasswd(f, path)
		f.Close()
		for _, u := range users {
			names = append(names, u.Name)
		}
	}
	return names
}

// removedUsers returns the users a reload from prev to g revoked here
// (revoked) and the configured users of prev that g no longer has,
// sorted, for the other instances, which may hold their connections.
func (s *Server) removedUsers(prev, g *generation, revoked []string) []string {
	if s.shared.cluster == nil {
		return nil
	}
	out := slices.Clone(revoked)
	for _, name := range prev.names {
		if g.authr == nil || !g.authr.Has(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// QuotaReport is the answer of the admin endpoint GET /quota?user=NAME.
type QuotaReport struct {
	// User is the user asked about; "" for every counter.
	User string `json:"user"`
	// Quotas are the user's quotas (every counter without a user); none
	// when no quota applies.
	Quotas []quota.Status `json:"quotas"`
	// Cluster says whether the counts are shared through Redis, and
	// RedisUp whether the last sync succeeded.
	Cluster bool `json:"cluster"`
	RedisUp bool `json:"redis_up"`
}

// QuotaHandler serves GET /quota?user=NAME on the admin listener: the
// user's quotas as a JSON [QuotaReport]; without user, every counter.
func (s *Server) QuotaHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.URL.Query().Get("user")
		rep := QuotaReport{User: user, Quotas: []quota.Status{}}
		if user != "" {
			rep.Quotas = append(rep.Quotas, s.Quota(user)...)
		} else if q := s.shared.quota; q != nil {
			rep.Quotas = append(rep.Quotas, q.All()...)
		}
		if cl := s.shared.cluster; cl != nil {
			rep.Cluster, rep.RedisUp = true, cl.Up()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(&rep)
	})
}

// RevokeHandler serves POST /revoke?user=NAME on the admin listener: it
// ends the user's sessions and tunnels here and, with a cluster, on
// every instance (see RevokeUser). It answers 200 with the count, 400
// without a user, 502 when the revocation could not be published.
func (s *Server) RevokeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.URL.Query().Get("user")
		if user == "" {
			http.Error(w, "revoke: user=NAME is required", http.StatusBadRequest)
			return
		}
		n, err := s.RevokeUser(user)
		if err != nil {
			http.Error(w, fmt.Sprintf("revoked here (%d), not yet published to the other instances: %v", n, err), http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, "revoked %d\n", n)
	})
}
