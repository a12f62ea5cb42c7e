package admin

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/rustle-proxy/rustle/internal/quota"
)

// Proxy is what the endpoints /quota and /revoke ask of the running
// proxy; *server.Server implements it.
type Proxy interface {
	// Quota returns the state of user's quotas; none when no quota
	// applies.
	Quota(user string) []quota.Status
	// Quotas returns every quota counter; none without quotas.
	Quotas() []quota.Status
	// ClusterState reports whether the counts are shared through Redis
	// (cluster) and, then, whether the last sync succeeded (up).
	ClusterState() (cluster, up bool)
	// RevokeUser ends the sessions and tunnels of user on every listener
	// and, with a cluster, on every instance. It returns how many users
	// it ended anything of here (0 or 1), and the error of publishing
	// the revocation to the other instances.
	RevokeUser(user string) (int, error)
}

// HandleProxy adds the endpoints that p serves: GET /quota
// ([QuotaHandler]) and POST /revoke ([RevokeHandler]).
func (s *Server) HandleProxy(p Proxy) {
	s.Handle("GET /quota", QuotaHandler(p))
	s.Handle("POST /revoke", RevokeHandler(p))
}

// QuotaReport is the answer of the endpoint GET /quota?user=NAME.
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

// QuotaHandler serves GET /quota?user=NAME: the user's quotas as a JSON
// [QuotaReport]; without user, every counter.
func QuotaHandler(p Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.URL.Query().Get("user")
		rep := QuotaReport{User: user, Quotas: []quota.Status{}}
		if user != "" {
			rep.Quotas = append(rep.Quotas, p.Quota(user)...)
		} else {
			rep.Quotas = append(rep.Quotas, p.Quotas()...)
		}
		rep.Cluster, rep.RedisUp = p.ClusterState()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(&rep)
	})
}

// RevokeHandler serves POST /revoke?user=NAME: it ends the user's
// sessions and tunnels here and, with a cluster, on every instance (see
// Proxy.RevokeUser). It answers 200 with the count, 400 without a user,
// 502 when the revocation could not be published.
func RevokeHandler(p Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.URL.Query().Get("user")
		if user == "" {
			http.Error(w, "revoke: user=NAME is required", http.StatusBadRequest)
			return
		}
		n, err := p.RevokeUser(user)
		if err != nil {
			http.Error(w, fmt.Sprintf("revoked here (%d), not yet published to the other instances: %v", n, err), http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, "revoked %d\n", n)
	})
}
