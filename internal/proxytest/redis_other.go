//go:build !unix

package proxytest

// Stop skips the test: stopping a server as a hung one (SIGSTOP) needs
// Unix.
func (r *Redis) Stop() {
	r.t.Helper()
	r.t.Skip("proxytest: Redis.Stop needs SIGSTOP (Unix)")
}

// Continue does nothing: Stop does not stop the server here.
func (r *Redis) Continue() {}
