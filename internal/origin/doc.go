// Package origin is the exchange of a forwarded HTTP request with its
// upstream, written once for every HTTP front-end: the HTTP/1.1 proxy
// (internal/httpproxy), HTTP/2 (internal/h2) and HTTP/3 (internal/h3)
// each keep only their own framing of the client's request and of the
// response, and hand the rest to an [Exchange].
//
// It sits between gate, which decides and dials, and the front-ends. On
// a request the policy granted, a front-end calls [Exchange.Begin] (the
// route's http parent, if it takes the request itself, and the pool key),
// [Exchange.Send] (a kept, pooled or new upstream with the grant's
// admission check, the request head and the part of the body at hand,
// and, for a request whose body is complete, the response head), or for a
// body that streams [Exchange.StartBody] and [Exchange.ReadResponse]
// while it sends the rest itself; it relays the response from
// [Exchange.Resp] and [Exchange.Up] (HTTP/2 and HTTP/3 with
// [Exchange.NextBody]) and ends with [Exchange.Release]. One place thus
// holds, for every front-end:
//
//   - the upstream: kept by an HTTP/1.1 client connection for its next
//     request, taken from the shared pool, or dialled through the grant;
//     a kept or pooled one is used only when the grant admits it
//     ([gate.Grant.Admits]): one made for the same identity
//     ([gate.Grant.PoolOwner]), never another user's or client's;
//   - the request head built for where it goes (absolute form with the
//     parent's Proxy-Authorization to an http parent, origin form
//     otherwise: [AppendRequestTarget], [AppendParentAuthorization]);
//   - the header rules of the request's route and of the [[header_rules]]
//     entries it matches ([Headers], chosen by Begin): the fields the
//     head builders leave out and add, the response fields ReadResponse
//     marks dropped and the front-ends add;
//   - the response head read within timeouts.response_header and
//     max_header_bytes, 1xx answers passed to the front-end;
//   - the retry of an idempotent request whose pooled connection turns out
//     dead, on a fresh one, and of one whose parent failed before a byte
//     of the response, on the route's next parent; and of one whose
//     origin, spoken HTTP/2 to, reset its stream with HTTP_1_1_REQUIRED,
//     on a new connection offering http/1.1 alone, as that origin's are
//     for a while (ErrHTTP11Required);
//   - a 401 offering NTLM or Negotiate, which authenticate the
//     connection, that an HTTP/2 or HTTP/3 front-end, whose client's
//     requests are not bound to one upstream, turns into a reset asking
//     for HTTP/1.1 ([Exchange.RetryOverHTTP11]);
//   - a parent's 407 (it refused rustle's own credentials), which is a 502
//     and a failure of the parent's health, never a 407 to the client;
//   - pool or drop: a connection goes back to the pool only at a message
//     boundary, and never one that runs through a parent as a tunnel;
//   - one mapping from upstream failures to a status, an access-log reason
//     and a client-safe text ([Exchange.Failure]).
//
// An origin reached over TLS (the requests inside intercepted tunnels)
// that chooses h2 by ALPN is spoken HTTP/2 to through an h2Conn, which
// the exchange writes and reads as an HTTP/1.1 connection: all of the
// above holds for it unchanged.
//
// The HTTP helpers every front-end uses to build heads live here too:
// hop-by-hop fields, the Forwarded and X-Forwarded-For element, the
// request target, which methods are idempotent.
package origin
