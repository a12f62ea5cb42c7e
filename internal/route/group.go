package route

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// Select is how a group picks one of its parents.
type Select uint8

// The selection modes, with their configuration names.
const (
	// RoundRobin takes the parents in turn ("round-robin").
	RoundRobin Select = iota
	// Random takes one at random ("random").
	Random
	// FirstAvailable takes the first parent that is up: ordered failover
	// ("first-available").
	FirstAvailable
	// HashHost keeps one destination host on one parent ("hash-host").
	HashHost
	// HashUser keeps one user on one parent ("hash-user"): the user
	// name up to the session separator, so that all of a user's sessions
	// share it.
	HashUser
	// HashSession keeps one session on one parent ("hash-session"): the
	// whole user name, such as alice-session-42, so that each of a
	// user's sessions has a parent of its own.
	HashSession
)

var selectNames = [...]string{"round-robin", "random", "first-available", "hash-host", "hash-user", "hash-session"}

// String returns s's configuration name.
func (s Select) String() string {
	if int(s) < len(selectNames) {
		return selectNames[s]
	}
	return ""
}

// SelectNames lists the selection modes' names.
func SelectNames() []string { return selectNames[:] }

// ParseSelect returns the mode named s; "" is RoundRobin.
func ParseSelect(s string) (Select, error) {
	if s == "" {
		return RoundRobin, nil
	}
	for i, n := range selectNames {
		if n == s {
			return Select(i), nil
		}
	}
	return 0, fmt.Errorf("route: select %q is not one of %s", s, strings.Join(selectNames[:], ", "))
}

// DefaultSessionSeparator separates a user name from its session in a
// Proxy-Authorization user name ("alice-session-42").
const DefaultSessionSeparator = "-session-"

// Key is what a hashed selection hashes.
type Key struct {
	// Host is the destination host.
	Host string
	// User is the user name as authenticated, "" = anonymous.
	User string
}

// Group is an ordered list of parents and how to pick one. It is safe for
// concurrent use.
type Group struct {
	parents []*Parent
	sel     Select
	sep     string
	next    atomic.Uint64
}

// NewGroup returns a group of parents (at least one) picked by sel; sep
// is the session separator of HashUser ("" = DefaultSessionSeparator).
func NewGroup(parents []*Parent, sel Select, sep string) *Group {
	if sep == "" {
		sep = DefaultSessionSeparator
	}
	return &Group{parents: parents, sel: sel, sep: sep}
}

// Parents returns the group's parents in order; the slice must not be
// changed.
func (g *Group) Parents() []*Parent { return g.parents }

// Select returns the group's selection mode.
func (g *Group) Select() Select { return g.sel }

// Pick returns a parent that is up at now, chosen by the group's mode,
// skipping except (nil = none: a retry passes the parent that failed);
// nil when none is up. It allocates nothing.
func (g *Group) Pick(k Key, now time.Time, except *Parent) *Parent {
	n := len(g.parents)
	switch g.sel {
	case FirstAvailable:
		for _, p := range g.parents {
			if p != except && p.health.Up(now) {
				return p
			}
		}
		return nil
	case RoundRobin, Random:
		var start uint64
		if g.sel == RoundRobin {
			start = g.next.Add(1) - 1
		} else {
			start = rand.Uint64()
		}
		for i := range n {
			p := g.parents[(start+uint64(i))%uint64(n)]
			if p != except && p.health.Up(now) {
				return p
			}
		}
		return nil
	}
	var key string
	switch g.sel {
	case HashHost:
		key = k.Host
	case HashUser:
		key = k.User
		if i := strings.Index(key, g.sep); i >= 0 {
			key = key[:i]
		}
	case HashSession:
		key = k.User
	}
	// Rendezvous hashing: the parent with the highest score for the key
	// among those up. A parent that goes down moves only its own keys,
	// and they come back to it when it is up again.
	var best *Parent
	var bestScore uint64
	for i, p := range g.parents {
		if p == except || !p.health.Up(now) {
			continue
		}
		if s := score(key, i); best == nil || s > bestScore {
			best, bestScore = p, s
		}
	}
	return best
}

// score hashes key with the parent index i (FNV-1a, then a 64-bit
// finalizer so that near keys spread).
func score(key string, i int) uint64 {
	h := uint64(14695981039346656037)
	for j := 0; j < len(key); j++ {
		h ^= uint64(key[j])
		h *= 1099511628211
	}
	h ^= uint64(i) + 0x9e3779b97f4a7c15
	h *= 1099511628211
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
