// Package console serves package admin over HTTP as a JSON API, for relay
// console: the table's status, its failed rows and failure groups, its
// audit trail, the retry and purge of a group, and the replay of sent
// rows, each within a count the operator confirmed.
//
// Access is by bearer token (Tokens): a read token reads, a write token
// also acts and reads payloads; each change is written to the audit trail
// as console:<token name>. With no tokens at all the handler serves only
// loopback clients, and acts as console:loopback.
//
// No cookies are used and every POST must be application/json: a
// cross-site page can neither send the Authorization header nor a JSON
// body without a CORS preflight, which the handler never grants, so it
// cannot act for an operator whose browser is open on the console.
package console
