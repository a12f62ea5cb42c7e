package origin

// Edits are the header fields a [Client] sets on and removes from every
// request it forwards and every response it relays: the request_headers
// and response_headers of an interception rule (see package intercept),
// whose Client edits each request inside the tunnels the rule
// intercepts. They are one more header rule of the request (see
// [Headers]), applied after the route's and the [[header_rules]]
// entries' and before the decision service's fields, with the same
// checks (CheckRuleField, CheckRuleValue). Edits are immutable and safe
// for concurrent use; a nil *Edits edits nothing.
type Edits struct {
	r headerRule
}

// EditConfig is what an Edits does: for requests and for responses,
// fields set (replacing the message's own of their names) and names
// removed.
type EditConfig struct {
	RequestSet, ResponseSet       []HeaderField
	RequestRemove, ResponseRemove []string
}

// NewEdits compiles cfg; nil when it edits nothing. It fails as
// NewHeaderRules does on a field a rule may not name or value, or a
// name given twice in one direction; the errors name the field, never a
// value.
func NewEdits(cfg EditConfig) (*Edits, error) {
	r, err := compileHeaderRule(HeaderRule{
		Name:     "of the interception rule",
		Request:  HeaderEdit{Set: cfg.RequestSet, Remove: cfg.RequestRemove},
		Response: HeaderEdit{Set: cfg.ResponseSet, Remove: cfg.ResponseRemove},
	})
	if err != nil {
		return nil, err
	}
	if len(r.reqDrop) == 0 && len(r.respDrop) == 0 {
		return nil, nil
	}
	return &Edits{r: r}, nil
}
