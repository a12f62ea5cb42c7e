package httpproxy

import "time"

// observation is what the connection learns of the request being served,
// for its grant's Finish: the payload bytes each way and when the request
// was complete upstream.
type observation struct {
	up, down int64     // body content written to the upstream and to the client
	sent     time.Time // when the request was complete upstream; zero = not observed
}

// begin starts observing a parsed request.
func (cn *conn) begin() { cn.obs = observation{} }

// finish reports the request that just ended to the metrics and the
// access log, through its grant.
func (cn *conn) finish() { cn.g.Finish(cn.obs.up, cn.obs.down) }
