package main

import "syscall"

// sigReopen stands for SIGUSR1, which Windows does not have: a signal
// number that is never delivered there, so log files are not reopened
// on a signal. Neither is the configuration reloaded: Windows delivers
// no SIGHUP either, only SIGINT (Ctrl-C, Ctrl-Break) and SIGTERM (the
// console closing, logoff, shutdown).
const sigReopen = syscall.Signal(0x1e)
