package auth

import (
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Test hooks. Each must be called before a is shared between goroutines.

// MaxBcryptPassword is maxBcryptPassword, for tests.
const MaxBcryptPassword = maxBcryptPassword

// ParseBasic is parseBasic, for tests.
var ParseBasic = parseBasic

// SetClock makes a read the time from now instead of time.Now.
func SetClock(a *Authenticator, now func() time.Time) { a.now = now }

// CountCompares wraps a's bcrypt comparison (against users' hashes and the
// dummy hash alike) and returns the counter of calls.
func CountCompares(a *Authenticator) *atomic.Int64 {
	n := new(atomic.Int64)
	inner := a.compare
	a.compare = func(hash, password []byte) error {
		n.Add(1)
		return inner(hash, password)
	}
	return n
}

// WrapCompare calls wrap around each of a's bcrypt comparisons.
func WrapCompare(a *Authenticator, wrap func(compare func(hash, password []byte) error, hash, password []byte) error) {
	inner := a.compare
	a.compare = func(hash, password []byte) error { return wrap(inner, hash, password) }
}

// CacheLen returns the number of cached verdicts, expired ones included.
func CacheLen(a *Authenticator) int { return a.cache.len() }

// DummyCost returns the bcrypt cost of a's dummy hash.
func DummyCost(a *Authenticator) int {
	c, err := bcrypt.Cost(a.dummy)
	if err != nil {
		panic(err)
	}
	return c
}
