package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Counts are the counters of one protocol, summed over the listeners
// that speak it, as [Metrics.Read] finds them.
type Counts struct {
	// Accepted counts client connections accepted; Open is those open
	// now.
	Accepted uint64
	Open     int64
	// Requests counts requests answered and tunnels established;
	// Status splits them by status class, indexed by status/100 (index
	// 0: outside 100..599).
	Requests uint64
	Status   [6]uint64
	// Tunnels counts tunnels opened.
	Tunnels uint64
	// BytesUp and BytesDown are the payload bytes written to the
	// upstream and to the client.
	BytesUp, BytesDown uint64
	// AuthFailed, AuthMissing and ACLDenied count the refusals for wrong
	// credentials, for missing credentials, and by the access policy.
	AuthFailed, AuthMissing, ACLDenied uint64
}

// add adds o to c.
func (c *Counts) add(o Counts) {
	c.Accepted += o.Accepted
	c.Open += o.Open
	c.Requests += o.Requests
	for i := range c.Status {
		c.Status[i] += o.Status[i]
	}
	c.Tunnels += o.Tunnels
	c.BytesUp += o.BytesUp
	c.BytesDown += o.BytesDown
	c.AuthFailed += o.AuthFailed
	c.AuthMissing += o.AuthMissing
	c.ACLDenied += o.ACLDenied
}

// ParentReading is one parent proxy's series as [Metrics.Read] finds
// them.
type ParentReading struct {
	// Name is the parent's configured name.
	Name string
	// Up is its health gauge: up (or on probation), or held down.
	Up bool
	// Requests counts the connects and handshakes through it, Failures
	// those that failed.
	Requests, Failures uint64
	// DialOK counts the successful connects and DialOKSeconds sums
	// their durations; DialErr counts the failed ones.
	DialOK, DialErr uint64
	DialOKSeconds   float64
}

// Reading is the value of rustle's counters at one moment: what the
// admin page samples once a second. It is read from the series the data
// path already updates; reading costs the data path nothing.
type Reading struct {
	// Protocols maps each protocol a listener spoke ("http", "https",
	// "h2", "h3", "socks5", "socks4") to its counts.
	Protocols map[string]Counts
	// TunnelsOpen is the number of tunnels open in the engines; -1 when
	// no function reports it (see [Metrics.SetTunnelsOpen]).
	TunnelsOpen int
	// Parents are the configured parent proxies, by name.
	Parents []ParentReading
}

// Total returns the counts of every protocol together.
func (r *Reading) Total() Counts {
	var c Counts
	for _, p := range r.Protocols {
		c.add(p)
	}
	return c
}

// UserReading is one user's per-user series (see [Config.PerUser]).
type UserReading struct {
	// Name is the user, or [OtherUser] for those past the bound.
	Name string
	// Requests counts its requests and tunnels; BytesUp and BytesDown
	// its payload bytes each way.
	Requests, BytesUp, BytesDown uint64
}

// reader reads the values of single series into one reused message.
type reader struct{ d dto.Metric }

func (r *reader) value(m prometheus.Metric) float64 {
	r.d.Reset()
	if m == nil || m.Write(&r.d) != nil {
		return 0
	}
	switch {
	case r.d.Counter != nil:
		return r.d.Counter.GetValue()
	case r.d.Gauge != nil:
		return r.d.Gauge.GetValue()
	}
	return 0
}

func (r *reader) count(m prometheus.Metric) uint64 { return uint64(r.value(m)) }

// histogram returns a histogram's sample count and sum.
func (r *reader) histogram(o prometheus.Observer) (uint64, float64) {
	m, ok := o.(prometheus.Metric)
	r.d.Reset()
	if !ok || m.Write(&r.d) != nil || r.d.Histogram == nil {
		return 0, 0
	}
	return r.d.Histogram.GetSampleCount(), r.d.Histogram.GetSampleSum()
}

// Read returns the value of the counters now. It takes the locks of the
// listener and parent tables, not those of the data path, and reads
// each series once: a few microseconds for a few listeners. It returns
// the zero Reading on a nil Metrics.
func (m *Metrics) Read() Reading {
	if m == nil {
		return Reading{TunnelsOpen: -1}
	}
	var rd reader
	out := Reading{Protocols: make(map[string]Counts), TunnelsOpen: -1}
	m.mu.Lock()
	ls := make([]*ListenerMetrics, 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	ps := make([]*ParentMetrics, 0, len(m.parentsByName))
	for _, p := range m.parentsByName {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	for _, l := range ls {
		c := Counts{
			Accepted:    rd.count(l.accepted),
			Open:        int64(rd.value(l.open)),
			Tunnels:     rd.count(l.tunnels),
			BytesUp:     rd.count(l.up),
			BytesDown:   rd.count(l.down),
			AuthFailed:  rd.count(l.authFails),
			AuthMissing: rd.count(l.authAsks),
			ACLDenied:   rd.count(l.aclDenies),
		}
		for i, r := range l.requests {
			c.Status[i] = rd.count(r)
			c.Requests += c.Status[i]
		}
		sum := out.Protocols[l.protocol]
		sum.add(c)
		out.Protocols[l.protocol] = sum
	}
	for _, p := range ps {
		pr := ParentReading{Name: p.name, Up: rd.value(p.up) != 0,
			Requests: rd.count(p.requests), Failures: rd.count(p.failures)}
		pr.DialOK, pr.DialOKSeconds = rd.histogram(p.dialOK)
		pr.DialErr, _ = rd.histogram(p.dialErr)
		out.Parents = append(out.Parents, pr)
	}
	sort.Slice(out.Parents, func(i, j int) bool { return out.Parents[i].Name < out.Parents[j].Name })
	if fn := m.funcs.tunnels.Load(); fn != nil && *fn != nil {
		out.TunnelsOpen = (*fn)()
	}
	return out
}

// PerUser reports whether m has per-user series ([Config.PerUser]).
func (m *Metrics) PerUser() bool { return m != nil && m.users != nil }

// Users returns the per-user series, the [OtherUser] one included when
// it counted anything, in no order; none when per-user series are off.
func (m *Metrics) Users() []UserReading {
	if !m.PerUser() {
		return nil
	}
	m.usersMu.RLock()
	us := make([]*UserMetrics, 0, len(m.users)+1)
	for _, u := range m.users {
		us = append(us, u)
	}
	m.usersMu.RUnlock()
	us = append(us, m.other)
	var rd reader
	out := make([]UserReading, 0, len(us))
	for _, u := range us {
		ur := UserReading{Name: u.name, Requests: rd.count(u.requests), BytesUp: rd.count(u.up), BytesDown: rd.count(u.down)}
		if u == m.other && ur.Requests == 0 && ur.BytesUp == 0 && ur.BytesDown == 0 {
			continue
		}
		out = append(out, ur)
	}
	return out
}
