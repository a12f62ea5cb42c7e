package wire

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/route"
)

// headers reads the header rules of the routes and of [[header_rules]]:
// their "{file:PATH}" values are the files' contents, read now (at start,
// and on each reload, which builds anew). A file that does not read, is
// empty, or holds what a field value may not is an error naming the
// key and its line, never the content.
func (b *builder) headers() error {
	cfg := b.cfg
	b.routeHeaders = make([]origin.HeaderRule, len(cfg.Routes))
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		hr, err := headerRule(cfg, fmt.Sprintf("routes[%d]", i), r.Name, &r.RequestHeaders, &r.ResponseHeaders)
		if err != nil {
			return err
		}
		b.routeHeaders[i] = hr
	}
	b.headerRules = make([]origin.HeaderRule, len(cfg.HeaderRules))
	for i := range cfg.HeaderRules {
		r := &cfg.HeaderRules[i]
		key := fmt.Sprintf("header_rules[%d]", i)
		hr, err := headerRule(cfg, key, r.Name, &r.RequestHeaders, &r.ResponseHeaders)
		if err != nil {
			return err
		}
		hr.Match = r.Criteria.Rule()
		if err := b.withLists(key, r.Criteria, &hr.Match); err != nil {
			return err
		}
		b.headerRules[i] = hr
	}
	return nil
}

// headerRule returns the rule named name, at key, with its values read.
func headerRule(cfg *config.Config, key, name string, req, resp *config.HeaderEdit) (origin.HeaderRule, error) {
	hr := origin.HeaderRule{Name: name}
	var err error
	if hr.Request, err = headerEdit(cfg, key+".request_headers", req); err != nil {
		return hr, err
	}
	if hr.Response, err = headerEdit(cfg, key+".response_headers", resp); err != nil {
		return hr, err
	}
	return hr, nil
}

// headerEdit returns the edit e, at key, with its values read.
func headerEdit(cfg *config.Config, key string, e *config.HeaderEdit) (origin.HeaderEdit, error) {
	set, add, setKeys, addKeys := config.HeaderEditFields(e, key)
	for i := range set {
		v, err := headerValue(cfg, setKeys[i], set[i].Value)
		if err != nil {
			return origin.HeaderEdit{}, err
		}
		set[i].Value = v
	}
	for i := range add {
		v, err := headerValue(cfg, addKeys[i], add[i].Value)
		if err != nil {
			return origin.HeaderEdit{}, err
		}
		add[i].Value = v
	}
	oe := origin.HeaderEdit{Set: set, Add: add, Remove: e.Remove}
	if err := oe.Check(); err != nil {
		return oe, cfg.KeyError(key, err)
	}
	return oe, nil
}

// headerValue returns the value v of the field at key: v itself, or for
// "{file:PATH}" the file's content less its trailing line breaks, which
// must be a field value (see origin.CheckRuleValue). A file is read up to
// a little over origin.MaxRuleValue bytes. An error names the file, never
// a byte of its content.
func headerValue(cfg *config.Config, key, v string) (string, error) {
	path, ok := config.FileValue(v)
	if !ok {
		return v, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", cfg.KeyError(key, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, origin.MaxRuleValue+3))
	if err != nil {
		return "", cfg.KeyError(key, fmt.Errorf("read %s: %w", path, err))
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", cfg.KeyError(key, fmt.Errorf("%s is empty", path))
	}
	if err := origin.CheckRuleValue(s); err != nil {
		return "", cfg.KeyError(key, fmt.Errorf("%s: %w", path, err))
	}
	return s, nil
}

// compileHeaderRules compiles the header rules headers read, the routes' by the
// routes of the generation's table; nil when none edits anything.
func (b *builder) compileHeaderRules() (*origin.HeaderRules, error) {
	cfg := b.cfg
	hc := origin.HeaderRulesConfig{Rules: b.headerRules, Groups: cfg.ACL.Groups, ProviderGroups: cfg.ProviderGroups()}
	if t := b.g.Routes; t != nil {
		routes := t.Routes()
		if len(routes) != len(b.routeHeaders) {
			return nil, errors.New("wire: the route table does not hold the configuration's routes")
		}
		for i := range routes {
			hr := b.routeHeaders[i]
			if hr.Request.Empty() && hr.Response.Empty() {
				continue
			}
			if hc.Routes == nil {
				hc.Routes = make(map[*route.Route]origin.HeaderRule)
			}
			hc.Routes[&routes[i]] = hr
		}
	}
	h, err := origin.NewHeaderRules(hc)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	return h, nil
}
