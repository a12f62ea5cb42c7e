package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"

	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// KeyExchangeIDs returns the key exchanges of l's key_exchanges key, most
// preferred first; nil when the key is left out (Go's default). Call it
// on a validated configuration: a name that does not parse is skipped.
func (l Listener) KeyExchangeIDs() []tls.CurveID {
	if l.KeyExchanges == nil {
		return nil
	}
	ids := make([]tls.CurveID, 0, len(l.KeyExchanges))
	for _, name := range l.KeyExchanges {
		if id, err := tlsconf.ParseKeyExchange(name); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// validateKeyExchanges checks a listener's key_exchanges key: https only,
// not empty, each name one crypto/tls implements (as
// tlsconf.KeyExchangeNames lists them), none twice.
func (c *Config) validateKeyExchanges(v *validator, key string, l Listener) {
	if l.KeyExchanges == nil {
		return
	}
	key += ".key_exchanges"
	if l.Protocol != "https" {
		v.add(key, fmt.Errorf("is only for https listeners, not %q", l.Protocol))
		return
	}
	if len(l.KeyExchanges) == 0 {
		v.add(key, errors.New(`is empty: list key exchanges such as "X25519MLKEM768", "X25519", or leave the key out for Go's default`))
		return
	}
	for i, name := range l.KeyExchanges {
		ikey := fmt.Sprintf("%s[%d]", key, i)
		switch {
		case !slices.Contains(tlsconf.KeyExchangeNames(), name):
			v.oneOf(ikey, name, tlsconf.KeyExchangeNames())
		case slices.Contains(l.KeyExchanges[:i], name):
			v.add(ikey, fmt.Errorf("%q is listed twice", name))
		}
	}
}
