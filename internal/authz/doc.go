// Package authz asks an external decision service whether a request may
// pass: the [authz] hook, asked by package gate once a request has passed
// authentication, the limits and the access rules.
//
// A [Client] POSTs a small JSON document about the request to the
// configured URL, in the shape of Open Policy Agent's data API (POST
// /v1/data/<path> with {"input": ...}):
//
//	{"input":{"listener":"main","user":"alice","groups":["dev"],"client":"192.0.2.7",
//	  "host":"example.com","port":443,"method":"CONNECT","protocol":"connect","sni":"example.com"}}
//
// and reads {"result": ...} from the answer: true or false, or an object
// {"allow": bool, "headers": {"Name": "value", ...}, "ttl": seconds},
// headers and ttl optional. Anything else (a status other than 200, no
// result, which is what OPA answers for a policy undefined on the
// input, a result of another shape, a bad header or ttl, an answer over
// MaxAnswerBytes) is an error, as are a timeout and an unreachable
// service; [Config.OnError] says what the request gets then.
//
// Decisions are cached, keyed by the whole document, for the answer's
// ttl (at most, and by default, Config.CacheTTL) in a bounded cache
// evicting the least recently used; a decision asked again while the
// same document's call is in flight waits for that call. The calls in
// flight are bounded by Config.MaxInFlight, and a decision, the wait for
// a free call included, by Config.Timeout. Decide blocks the goroutine
// that asks (a connection's or a stream's), never a worker of the splice
// engine: package gate asks before a tunnel is handed to it.
//
// The service is the operator's: it is called directly, not through the
// private-destination guard, and its answer never widens what the guard
// allows (gate checks the destination at the dial whatever the service
// said).
package authz
