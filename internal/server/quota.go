package server

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/cluster"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/quota"
	"github.com/rustle-proxy/rustle/internal/wire"
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

// newShared makes the quota tracker and the cluster link of cfg, and
// reads back the saved quota counters.
func (s *Server) newShared(cfg *config.Config) error {
	sh := &s.shared
	sh.stop = make(chan struct{})
	q, err := wire.Quota(cfg)
	if err != nil {
		return err
	}
	sh.quota = q
	sh.cluster, err = wire.Cluster(cfg, q, wire.ClusterHooks{LocalConns: s.localConns, Revoke: s.revokeUsers}, s.log)
	if err != nil || sh.cluster != nil {
		return err
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
	g := s.gen
	s.mu.Unlock()
	if g != nil {
		g.Limiter.UserConns(fn)
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

// Quotas returns every quota counter, none without quotas.
func (s *Server) Quotas() []quota.Status {
	if s.shared.quota == nil {
		return nil
	}
	return s.shared.quota.All()
}

// ClusterState reports whether the quota counts and the users'
// connections are shared through Redis ([cluster] redis) and, then,
// whether the last sync succeeded.
func (s *Server) ClusterState() (cluster, up bool) {
	if cl := s.shared.cluster; cl != nil {
		return true, cl.Up()
	}
	return false, false
}

// ClusterInstance returns the name of this instance in the cluster
// (cluster.instance, or the host name and process id); "" without a
// cluster.
func (s *Server) ClusterInstance() string {
	if cl := s.shared.cluster; cl != nil {
		return cl.Instance()
	}
	return ""
}

// ErrSharedQuota is ResetQuota's error with a cluster: the counts are
// totals in Redis that every instance adds to.
var ErrSharedQuota = errors.New("quota counts are shared through the cluster's Redis; a reset here would be undone by the next sync")

// ResetQuota sets the counts of the quota counter of rule and scope (a
// user, or "group:NAME") to zero until its period ends, and reports
// whether there was such a counter. With a cluster it resets nothing and
// returns ErrSharedQuota.
func (s *Server) ResetQuota(rule, scope string) (bool, error) {
	if s.shared.cluster != nil {
		return false, ErrSharedQuota
	}
	return s.shared.quota.Reset(rule, scope), nil
}

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

// removedUsers returns the users a reload from prev to g revoked here
// (revoked) and the configured users of prev that g no longer has,
// sorted, for the other instances, which may hold their connections.
func (s *Server) removedUsers(prev, g *generation, revoked []string) []string {
	if s.shared.cluster == nil {
		return nil
	}
	out := slices.Clone(revoked)
	for _, name := range prev.Names {
		if g.Auth == nil || !g.Auth.Has(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
