// Package route chooses how rustle reaches a destination: directly, or
// through a parent proxy (an upstream HTTP, HTTPS or SOCKS5 proxy), and
// dials through the parent it chose.
//
// A [Parent] is one configured upstream proxy, parsed from its URL by
// [NewParent]: http://user:pass@host:port (HTTP CONNECT, and plain HTTP
// requests in absolute form), https://… (the same inside TLS, with an
// optional CA file and server name), socks5://user:pass@host:port (SOCKS5
// with RFC 1929 username/password, given the address rustle resolved and
// checked) and socks5h://… (given the host name: the parent resolves it).
// [Parent.Dial] connects to the parent's own address (operator-configured,
// so the private-destination guard does not apply to it) and performs the
// handshake, every wait bounded by the parent's connect timeout; its
// errors are [*Error], whose [ErrorKind] a front-end answers with 502 or
// 504 and whose Reason is safe to show a client. The parent's own
// credentials are sent; a client's never are.
//
// Each parent has a [Health]: passive (a parent whose connects fail
// MaxFails times within Window is down for Cooldown, and after it is on
// probation: one more failure puts it down again, a success brings it
// back) and, when configured, active ([Table.Start] runs one probe loop
// per parent, joined by [Table.Close]).
//
// A [Table] is the ordered list of routes of a configuration: the first
// route whose criteria match a request wins (the criteria of the access
// rules, compiled by [acl.NewMatcher]), and no match is the direct route.
// A route goes direct, or through a [Group] of parents with a [Select]
// mode (round-robin, random, first-available, hashed by destination host,
// by user or by session); [Route.Pick] skips the parents that are down,
// and when all are, falls back to direct or refuses with [ErrNoParent].
// [Table.Match] and [Route.Pick] allocate nothing.
//
// A reload builds the next Table with [NewAfter]: a parent of the same
// name and URL keeps its health, and when its configuration is unchanged
// it is the same *Parent, whose probe loop the new Table takes over (a
// loop runs while a started Table holds the parent). A connection keeps
// the *Route and *Parent it was given, which stay usable after the old
// Table is closed. Readiness asks [Table.Healthy]. [Parent.Associate]
// makes a SOCKS5 UDP ASSOCIATE with a socks5 or socks5h parent for SOCKS
// UDP through it; http and https parents cannot carry UDP. A retry on the
// next parent calls [Route.PickExcept] with the parent that failed.
//
// An [Instance] names one rustle in loop detection: the Via element of
// every CONNECT it sends a parent ([Target].Self), which [NamesSelf]
// finds in a request that came back, and, for SOCKS5, which has no
// header, its parent handshakes in progress, which [Returning] matches a
// connection it accepted against.
package route
