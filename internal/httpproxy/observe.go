package httpproxy

// observation is what the connection learns of the request being served,
// for its grant's Finish: the payload bytes each way.
type observation struct {
	up, down int64 // body content written to the upstream and to the client
}

// begin starts observing a parsed request.
func (cn *conn) begin() { cn.obs = observation{} }

// finish reports the request that just ended to the metrics and the
// access log, through its grant.
func (cn *conn) finish() { cn.g.Finish(cn.obs.up, cn.obs.down) }
