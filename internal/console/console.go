package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/migrations"
)

// LoopbackActor is the audit actor of changes made without tokens.
const LoopbackActor = "console:loopback"

// maxPage is the most failed rows or audit entries one GET returns.
const maxPage = 1000

// maxBody is the largest POST body read: some 25,000 ids.
const maxBody = 1 << 20

// Handler returns the console API on adm:
//
//	GET  /api/status                  adm.Status, as relay status --json
//	GET  /api/failed                  adm.ListFailed without payloads: ?topic= (repeatable), group, after, limit (default 50, at most 1000)
//	GET  /api/failed/{id}             one failed row; ?payload=1 (write tokens) adds its payload
//	GET  /api/groups                  adm.FailureGroups; ?topic= (repeatable)
//	POST /api/groups/{fp}/retry       {"dry_run": true} counts; {"confirm": N} retries the group if it has N rows
//	POST /api/groups/{fp}/purge       the same, deleting them
//	GET  /api/audit                   adm.AuditLog, newest first: ?before= (the next of the previous page), limit
//	POST /api/replay                  adm.Replay of {"ids": [...]}, or {"topics": [...]} and "sent" or "created": {"from", "to"}
//	                                  (RFC 3339), with "dry_run" or "confirm" as for a group
//
// The POSTs, dry runs included, need a write token and an
// application/json body. Every answer is JSON; errors are {"error": "..."}. Without tokens only
// loopback clients that name a loopback host are served; with tokens
// every request needs one (Authorization: Bearer SECRET).
func Handler(adm *admin.Admin, tokens Tokens) *Server {
	s := &Server{adm: adm, tokens: tokens, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /api/status", s.status)
	s.mux.HandleFunc("GET /api/failed", s.listFailed)
	s.mux.HandleFunc("GET /api/failed/{id}", s.showFailed)
	s.mux.HandleFunc("GET /api/groups", s.groups)
	s.mux.HandleFunc("POST /api/groups/{fp}/{action}", s.act)
	s.mux.HandleFunc("GET /api/audit", s.audit)
	s.mux.HandleFunc("POST /api/replay", s.replay)
	s.mux.HandleFunc("GET /api/history", s.serveHistory)
	s.mux.HandleFunc("GET /{$}", servePage)
	s.mux.Handle("GET /assets/", http.FileServerFS(assets))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return s
}

// Server is the console: its API, its pages, and the status history
// the overview charts.
type Server struct {
	adm     *admin.Admin
	tokens  Tokens
	mux     *http.ServeMux
	history history
}

// caller is who asks: the audit actor and the role.
type caller struct {
	actor string
	role  Role
}

type callerKey struct{}

func callerOf(r *http.Request) caller { return r.Context().Value(callerKey{}).(caller) }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	c, status, msg := s.authenticate(r)
	if status == http.StatusUnauthorized && !strings.HasPrefix(r.URL.Path, "/api/") {
		status = 0 // the page and its assets hold no data, and come before the token
	}
	if status != 0 {
		if status == http.StatusUnauthorized {
			h.Set("WWW-Authenticate", `Bearer realm="relay console"`)
		}
		writeError(w, status, msg)
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
}

// authenticate returns the caller, or the status and message refusing
// the request. Only the Authorization header authenticates: no cookies,
// which a browser would send along with a cross-site request.
func (s *Server) authenticate(r *http.Request) (caller, int, string) {
	if len(s.tokens) == 0 {
		// Open to loopback only. The Host check stops a page whose name
		// resolves to 127.0.0.1 (DNS rebinding) from reading the API.
		if !loopbackRemote(r.RemoteAddr) || !loopbackHost(r.Host) {
			return caller{}, http.StatusForbidden, "without tokens the console serves only loopback clients at a loopback host name"
		}
		return caller{actor: LoopbackActor, role: Write}, 0, ""
	}
	scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return caller{}, http.StatusUnauthorized, "a token is required: Authorization: Bearer TOKEN"
	}
	t, ok := s.tokens.find(strings.TrimSpace(secret))
	if !ok {
		return caller{}, http.StatusUnauthorized, "unknown token"
	}
	return caller{actor: "console:" + t.Name, role: t.Role}, 0, ""
}

func loopbackRemote(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st, err := s.adm.Status(r.Context(), admin.StatusOptions{})
	if err != nil {
		writeAdminError(w, err)
		return
	}
	s.history.add(st)
	writeJSON(w, http.StatusOK, st)
}

// failedPage is the answer of GET /api/failed: next is the after of the
// next page, "" after the last.
type failedPage struct {
	Rows []admin.FailedRow `json:"rows"`
	Next string            `json:"next"`
}

func (s *Server) listFailed(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := admin.Filter{Topics: nonEmpty(q["topic"]), Group: strings.ToLower(q.Get("group"))}
	if f.Group != "" && !admin.IsFingerprint(f.Group) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("group %q is not a fingerprint (16 hex digits, as /api/groups gives)", f.Group))
		return
	}
	p := admin.Page{After: q.Get("after")}
	if p.After != "" {
		if _, err := uuid.Parse(p.After); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after %q is not an event id", p.After))
			return
		}
	}
	var ok bool
	if p.Limit, ok = pageLimit(w, r); !ok {
		return
	}
	rows, next, err := s.adm.ListFailed(r.Context(), f, p)
	if err != nil {
		writeAdminError(w, err)
		return
	}
	if rows == nil {
		rows = []admin.FailedRow{}
	}
	writeJSON(w, http.StatusOK, failedPage{Rows: rows, Next: next})
}

// pageLimit returns ?limit=, 50 when absent; false means it answered
// the request (400).
func pageLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	l := r.URL.Query().Get("limit")
	if l == "" {
		return 50, true
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > maxPage {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: give a number from 1 to %d", l, maxPage))
		return 0, false
	}
	return n, true
}

func (s *Server) showFailed(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := uuid.Parse(id); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not an event id", id))
		return
	}
	payload := r.URL.Query().Get("payload") == "1"
	if payload && callerOf(r).role != Write {
		writeError(w, http.StatusForbidden, "payloads need a write token")
		return
	}
	rows, _, err := s.adm.ListFailed(r.Context(), admin.Filter{IDs: []string{id}}, admin.Page{Limit: 1, WithPayload: payload})
	if err != nil {
		writeAdminError(w, err)
		return
	}
	if len(rows) == 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no failed row %s (it may be pending, sent or gone)", id))
		return
	}
	writeJSON(w, http.StatusOK, rows[0])
}

func (s *Server) groups(w http.ResponseWriter, r *http.Request) {
	groups, err := s.adm.FailureGroups(r.Context(), admin.Filter{Topics: nonEmpty(r.URL.Query()["topic"])})
	if err != nil {
		writeAdminError(w, err)
		return
	}
	if groups == nil {
		groups = []admin.FailureGroup{}
	}
	writeJSON(w, http.StatusOK, struct {
		Groups []admin.FailureGroup `json:"groups"`
	}{groups})
}

// auditPage is the answer of GET /api/audit: next is the before of the
// next page, 0 after the last.
type auditPage struct {
	Entries []admin.AuditEntry `json:"entries"`
	Next    int64              `json:"next"`
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	var p admin.AuditPage
	if b := r.URL.Query().Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("before %q is not an audit entry id (the next of the previous page)", b))
			return
		}
		p.Before = n
	}
	var ok bool
	if p.Limit, ok = pageLimit(w, r); !ok {
		return
	}
	entries, next, err := s.adm.AuditLog(r.Context(), p)
	if err != nil {
		writeAdminError(w, err)
		return
	}
	if entries == nil {
		entries = []admin.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, auditPage{Entries: entries, Next: next})
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// errorBody is every error answer; Rows is the count now, for a count
// that no longer holds.
type errorBody struct {
	Error string `json:"error"`
	Rows  *int64 `json:"rows,omitempty"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// writeAdminError answers an error of package admin.
func writeAdminError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, migrations.ErrNotMigrated), errors.Is(err, migrations.ErrSchemaTooNew):
		status = http.StatusServiceUnavailable
	case errors.Is(err, admin.ErrNoFilter):
		status = http.StatusBadRequest
	case errors.Is(err, admin.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	}
	writeError(w, status, err.Error())
}

// writeJSON writes v as JSON. encoding/json escapes <, > and & as \u003c
// and the like, and control characters, so text from the table (topics,
// errors) reaches a page as text, never as markup.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}
