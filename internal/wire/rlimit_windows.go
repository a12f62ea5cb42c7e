package wire

import "errors"

// DefaultOpenFiles is the open-file limit the default connection limit
// is derived from on Windows, which has no per-process limit on open
// sockets (only memory bounds them): 65536, so a connection limit of
// 24512 (and 8192 splice pipes, unused there) unless
// limits.max_connections sets one.
const DefaultOpenFiles = 65536

// OpenFileLimit reports that Windows has no open-file limit.
func OpenFileLimit() (soft, hard uint64, err error) {
	return 0, 0, errors.New("wire: no open-file limit on windows")
}
