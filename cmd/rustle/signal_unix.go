//go:build unix

package main

import "syscall"

// sigReopen is the signal that makes rustle reopen its log files (after
// a rotation): SIGUSR1.
const sigReopen = syscall.SIGUSR1
