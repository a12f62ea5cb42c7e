package proxytest

import (
	"time"

	"github.com/rustle-proxy/rustle/internal/route"
)

// ParentDefaults returns c with its settings left zero given the values
// rustle's configuration gives them (config.SetDefaults, with the default
// timeouts.connect), which route.NewParent requires: a 10s connect
// timeout, and 3 failures within 10s putting the parent down for 30s.
func ParentDefaults(c route.ParentConfig) route.ParentConfig {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	h := &c.Health
	if h.MaxFails == 0 {
		h.MaxFails = 3
	}
	if h.Window == 0 {
		h.Window = 10 * time.Second
	}
	if h.Cooldown == 0 {
		h.Cooldown = 30 * time.Second
	}
	return c
}

// RouteDefaults returns c with ParentDefaults applied to its parents.
func RouteDefaults(c route.Config) route.Config {
	ps := make([]route.ParentConfig, len(c.Parents))
	for i, p := range c.Parents {
		ps[i] = ParentDefaults(p)
	}
	c.Parents = ps
	return c
}
