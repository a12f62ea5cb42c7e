//go:build !linux

package rawsys

import "net"

// Wrap returns c: raw system calls are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }
