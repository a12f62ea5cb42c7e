package tlsconf

import (
	"crypto/rand"
	"fmt"
	"time"
)

// newTicketKey returns a fresh random session ticket key.
func newTicketKey() ([32]byte, error) {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return k, fmt.Errorf("tlsconf: generate session ticket key: %w", err)
	}
	return k, nil
}

// rotateLoop rotates the session ticket keys every m.rotation until Close.
func (m *Manager) rotateLoop() {
	defer close(m.done)
	t := time.NewTicker(m.rotation)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if err := m.rotateTicketKeys(); err != nil {
				// The old keys stay; tickets keep working, only longer
				// than planned.
				m.log.Error("tlsconf: rotate session ticket keys", "err", err)
			}
		}
	}
}

// rotateTicketKeys makes a new current ticket key, keeps the two previous
// ones for decryption, and installs the set on every config in use.
func (m *Manager) rotateTicketKeys() error {
	key, err := newTicketKey()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([][32]byte, 0, ticketKeysKept)
	keys = append(keys, key)
	keys = append(keys, m.keys[:min(len(m.keys), ticketKeysKept-1)]...)
	m.keys = keys
	m.installLocked(m.cur.Load())
	m.gen.Add(1)
	return nil
}
