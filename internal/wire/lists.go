package wire

import (
	"fmt"
	"net/netip"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/lists"
)

// listsConfig makes how the generation's lists load: [lists], with a
// guard of its own for the fetches (allow_private's ranges and
// lists.allow_private's).
func (b *builder) listsConfig() error {
	var allow []netip.Prefix
	for i, s := range b.cfg.Lists.AllowPrivate {
		p, err := acl.ParsePrefix(s)
		if err != nil {
			return b.cfg.KeyError(fmt.Sprintf("lists.allow_private[%d]", i), err)
		}
		allow = append(allow, p)
	}
	allow = append(allow, b.g.Guard.Allowed()...)
	b.g.ListConfig = b.cfg.ListConfig()
	b.g.ListConfig.Guard = dialer.NewGuard(allow)
	b.g.ListConfig.Mark = b.cfg.Egress.MarkValue()
	b.listReg = b.env.Lists
	if b.listReg == nil {
		b.listReg = lists.NewRegistry(b.log) // Check's: loads files, fetches nothing
	}
	return nil
}

// withLists adds to r the lists that cr, the criteria at key, names: a
// file is read now, a URL's list is the registry's (see lists.Registry).
// A source named twice in one configuration is one list.
func (b *builder) withLists(key string, cr config.Criteria, r *acl.Rule) error {
	for _, src := range cr.ListSources() {
		id := listID{src.Kind, src.File, src.URL}
		l, ok := b.listsByID[id]
		if !ok {
			var err error
			if src.File != "" {
				l, err = b.listReg.File(b.g.ListConfig, src.File, src.Kind)
			} else {
				l, err = b.listReg.URL(src.URL, src.Kind)
			}
			if err != nil {
				return b.cfg.KeyError(key+"."+src.Key, err)
			}
			if b.listsByID == nil {
				b.listsByID = make(map[listID]*acl.List)
			}
			b.listsByID[id] = l
			b.g.Lists = append(b.g.Lists, l)
		}
		if src.Kind == acl.ClientList {
			r.ClientLists = append(r.ClientLists, l)
		} else {
			r.HostLists = append(r.HostLists, l)
		}
	}
	return nil
}

// listID is a list's source in one configuration.
type listID struct {
	kind      acl.ListKind
	file, url string
}
