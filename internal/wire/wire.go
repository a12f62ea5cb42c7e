// Package wire turns a validated configuration into the parts rustle
// runs, and is the one place that does: for each listener a
// [gate.Policy] and the front-ends that speak its protocols (the
// HTTP/1.1 proxy, SOCKS, HTTP/2 and HTTP/3 servers, the TLS manager),
// the parts the listeners of one configuration share (users and
// identity providers, access rules, the private-destination guard, the
// limiter, the resolver, the dialer, egress sources, parents and
// routes), and those that every configuration of a process shares (the
// upstream pool, the tunnel engines, the quota tracker, the cluster
// link).
//
// It builds and starts nothing else: it opens no socket, starts no
// probe and serves nothing. Package server does that with what [Build]
// returns, and calls Build again on a reload with the [Generation] in
// use, whose parts the new configuration leaves unchanged are carried
// over (the limiter and its counts, the resolver and its cache, the TLS
// managers, the parents and their health, the decision service's client
// and its cache).
package wire

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/authz"
	"github.com/rustle-proxy/rustle/internal/cluster"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/h2"
	"github.com/rustle-proxy/rustle/internal/h3"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/lists"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/pac"
	"github.com/rustle-proxy/rustle/internal/quota"
	"github.com/rustle-proxy/rustle/internal/resolve"
	"github.com/rustle-proxy/rustle/internal/route"
	"github.com/rustle-proxy/rustle/internal/socks5"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
	"github.com/rustle-proxy/rustle/internal/transparent"
)

// Env is what the policies of every generation share: made once, at
// start, from the first configuration (see [Pool], [Quota], [Cluster]).
// Its zero value shares nothing.
type Env struct {
	// Logger receives the parts' logs; nil = discard.
	Logger *slog.Logger
	// Pool keeps idle upstream connections; nil = no upstream
	// keep-alive.
	Pool *dialer.Pool
	// Metrics gives each listener, user, resolver and parent its
	// series; nil = none.
	Metrics *metrics.Metrics
	// AccessLog receives a record per request and tunnel; nil = none.
	AccessLog *accesslog.Logger
	// Revoked tracks the sessions and tunnels of each user; nil = not
	// tracked.
	Revoked *gate.Registry
	// Cut is done once a shutdown cuts what still runs; nil = never.
	Cut context.Context
	// Quota counts the users' requests and bytes; nil = no quotas.
	Quota *quota.Tracker
	// Instance names the rustle in the Via of what it sends parents, for
	// every generation (loop detection, see route.Instance); nil = the
	// process's default instance.
	Instance *route.Instance
	// Cluster shares the users' connections with other instances, whose
	// counts the limiter then adds, and is told of the users a reload
	// removes (Generation.Names); nil = no cluster.
	Cluster *cluster.Cluster
	// Lists keeps the lists from URLs across generations and loads the
	// files' (see lists.Registry): the server loads and refreshes a
	// generation's (Generation.Lists) when it uses it. nil = each Build
	// loads its files and leaves its URLs' lists unloaded (Check).
	Lists *lists.Registry
}

func (e *Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

// Generation is what one configuration builds. It is not changed once
// built.
type Generation struct {
	// Config is the configuration it was built from.
	Config *config.Config
	// Guard is the private-destination guard of every listener's dialer.
	Guard *dialer.Guard
	// Limiter enforces [limits]; every listener's policy holds it.
	Limiter *limits.Limiter
	// Budget is how the descriptors are shared, Limiter's connection
	// limit among them.
	Budget Budget
	// Auth holds the configured users (inline and from htpasswd
	// files); nil = none configured.
	Auth *auth.Authenticator
	// Users is the number of configured users.
	Users int
	// Names are the configured users' names, kept only with a cluster
	// (to tell the other instances of the users a reload removes); nil
	// otherwise.
	Names []string
	// Resolver is the [dns] resolver; nil = the system's.
	Resolver *resolve.Resolver
	// Routes are the parents and routes, not started (see
	// route.Table.Start); nil = none.
	Routes *route.Table
	// Dialer is the listeners' dialer, which the routes' probes dial
	// parents with.
	Dialer *dialer.Dialer
	// Listeners are the configured listeners' parts, in configuration
	// order.
	Listeners []*Listener
	// Lists are the lists the rules and routes name, files' loaded,
	// URLs' as Env.Lists holds them; ListConfig is how they load.
	Lists      []*acl.List
	ListConfig lists.Config
	// Intercept is the TLS interception of [intercept]; nil = none.
	Intercept *intercept.Interceptor
	// Authz asks the [authz] decision service; nil = none.
	Authz *authz.Client

	authzToken string // the bearer token Authz sends, to tell whether a reload changed it

	created []*tlsconf.Manager // TLS managers this build made rather than took from the previous generation
}

// Listener is what one configured listener serves with: its policy
// and the front-ends of its protocol.
type Listener struct {
	// Config is the listener's configuration.
	Config config.Listener
	// Policy is what the listener's requests go through.
	Policy *gate.Policy
	// Proxy is the HTTP/1.1 proxy (of "http" and "mixed" listeners, and
	// of "https" ones that offer "http/1.1").
	Proxy *httpproxy.Proxy
	// SOCKS is the SOCKS server of "socks5" and "mixed" listeners; nil
	// otherwise.
	SOCKS *socks5.Server
	// TLS is the TLS manager of "https" listeners; nil otherwise.
	TLS *tlsconf.Manager
	// H2 is the HTTP/2 server of "https" listeners that offer "h2"; nil
	// otherwise.
	H2 *h2.Server
	// H3 is the HTTP/3 server of "https" listeners with http3 on; nil
	// otherwise.
	H3 *h3.Server
	// Transparent serves the connections of "transparent" listeners;
	// nil otherwise.
	Transparent *transparent.Server
	// HTTP1 reports whether an "https" listener offers "http/1.1".
	HTTP1 bool
	// ProxyFrom are the peers a proxy_protocol listener takes
	// connections from; nil = every peer.
	ProxyFrom []netip.Prefix
	// ReadHeader is timeouts.read_header: how long a "mixed" listener
	// waits for a first byte, an "https" one for its TLS handshake, a
	// proxy_protocol one for the PROXY header.
	ReadHeader time.Duration
	// ClientHello is timeouts.client_hello: how long an "https" listener
	// waits for a whole ClientHello record.
	ClientHello time.Duration
	// QUICRetry is http3.retry_threshold: the unvalidated QUIC
	// handshakes in progress past which new ones are sent a Retry
	// first; -1 = always.
	QUICRetry int
}

// Build makes the generation of cfg, a validated configuration, in env.
// prev, the generation in use, is nil at start; otherwise its limiter,
// resolver, parents and TLS managers are carried over where cfg leaves
// their settings unchanged, and the certificates of carried-over TLS
// managers are re-read. The error names what did not load: a users,
// certificate or CA file, an identity provider, an egress address.
func Build(cfg *config.Config, env *Env, prev *Generation) (*Generation, error) {
	b := &builder{cfg: cfg, env: env, log: env.logger(), prev: prev, g: &Generation{Config: cfg},
		chains: make(map[string]*auth.Authenticator)}
	for _, step := range []func() error{
		b.users,        // [auth] users and htpasswd files
		b.providers,    // [[auth.providers]]
		b.guard,        // allow_private
		b.listsConfig,  // [lists], with allow_private
		b.accessRules,  // [acl], with the files of its lists
		b.limiter,      // [limits], with the descriptor budget
		b.resolver,     // [dns]
		b.dialer,       // timeouts.connect, socket buffers, the guard and the resolver
		b.egress,       // [egress]
		b.headers,      // the routes' and [[header_rules]]' header rules, their {file:} values read
		b.routes,       // [[parents]], [[routes]]
		b.origin,       // forwarded, via, max_header_bytes, timeouts: how requests go upstream
		b.interception, // [intercept]: the CA, the leaves' cache, the rules and their origin clients
		b.pac,          // [pac]: the file some listeners serve
		b.authz,        // [authz]: the decision service
		b.listeners,    // [[listen]]: policies and front-ends
	} {
		if err := step(); err != nil {
			b.g.Drop()
			return nil, err
		}
	}
	return b.g, nil
}

// Drop closes the TLS managers g made (not those it took over from the
// previous generation), when g is not to be used.
func (g *Generation) Drop() {
	for _, m := range g.created {
		m.Close()
	}
	g.created = nil
}

// Check loads what cfg names, as Build and Admin do: the users and
// their files, the identity providers, the access rules and their lists'
// files (not their URLs, which rustle fetches when it starts), the
// private ranges, the resolvers, the egress addresses, the parents, the
// https listeners' certificates and the admin listener's access files. It
// starts nothing and releases what it loaded before returning: nil, or
// the error Build or Admin would have returned.
func Check(cfg *config.Config) error {
	g, err := Build(cfg, &Env{Revoked: new(gate.Registry)}, nil)
	if err != nil {
		return err
	}
	g.Drop()
	if g.Resolver != nil {
		g.Resolver.Close()
	}
	if cfg.Admin != "" {
		if _, err := admin.LoadAccess(cfg.AdminAccess); err != nil {
			return err
		}
	}
	return nil
}

// builder is one Build in progress: its steps fill g.
type builder struct {
	cfg  *config.Config
	env  *Env
	log  *slog.Logger
	prev *Generation // nil at start
	g    *Generation

	byName    map[string]auth.Provider       // [[auth.providers]], by name
	chains    map[string]*auth.Authenticator // the listeners' authenticators, by the providers they try
	rules     *acl.Policy                    // [acl]; nil = every request allowed
	audited   *acl.Policy                    // rules in audit mode, for the listeners that audit; made once
	listReg   *lists.Registry                // Env.Lists, or Check's own
	listsByID map[listID]*acl.List           // the lists named so far, each once
	egressT   egressTable                    // [egress] and its rules
	oc        *origin.Client                 // how every listener's front-ends talk to upstreams
	icOrigins []*origin.Client               // each interception rule's: TLS to origins, the rule's edits
	pacFile   *pac.PAC                       // [pac]'s file; nil = none

	routeHeaders []origin.HeaderRule // each of cfg.Routes' header rules, values read
	headerRules  []origin.HeaderRule // [[header_rules]], values read
}

// tlsKey is what a TLS manager is made from: a listener's TLS files,
// the ALPN protocols and the key exchanges it offers, joined with commas.
type tlsKey struct {
	tls       config.ListenerTLS
	alpn, kex string
}

func tlsKeyOf(lc config.Listener) tlsKey {
	return tlsKey{lc.TLS, strings.Join(lc.EffectiveALPN(), ","), strings.Join(lc.KeyExchanges, ",")}
}
