package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
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

// maxPage is the most failed rows one GET /api/failed returns.
const maxPage = 1000

// Handler returns the console API on adm:
//
//	GET  /api/status                  adm.Status, as relay status --json
//	GET  /api/failed                  adm.ListFailed without payloads: ?topic= (repeatable), group, after, limit (default 50, at most 1000)
//	GET  /api/failed/{id}             one failed row; ?payload=1 (write tokens) adds its payload
//	GET  /api/groups                  adm.FailureGroups; ?topic= (repeatable)
//	POST /api/groups/{fp}/retry       {"dry_run": true} counts; {"confirm": N} retries the group if it has N rows
//	POST /api/groups/{fp}/purge       the same, deleting them
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
	p := admin.Page{After: q.Get("after"), Limit: 50}
	if p.After != "" {
		if _, err := uuid.Parse(p.After); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after %q is not an event id", p.After))
			return
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxPage {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: give a number from 1 to %d", l, maxPage))
			return
		}
		p.Limit = n
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

// actionRequest is the body of a group's retry or purge.
type actionRequest struct {
	// DryRun counts the rows the action would change, and changes none.
	DryRun bool `json:"dry_run"`
	// Confirm is the count the operator saw and confirmed: the action
	// goes ahead only if the group has that many rows now, and changes at
	// most that many.
	Confirm int64 `json:"confirm"`
	// ClearError (retry) clears last_error.
	ClearError bool `json:"clear_error"`
}

func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	fp, name := strings.ToLower(r.PathValue("fp")), r.PathValue("action")
	c := callerOf(r)
	adm := s.adm.WithActor(c.actor)
	var act func(context.Context, admin.Filter, admin.ActionOptions) (admin.Result, error)
	switch name {
	case "retry":
		act = adm.RetryFailed
	case "purge":
		act = adm.PurgeFailed
	}
	switch mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); {
	case act == nil:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no action %q: retry or purge", name))
		return
	case c.role != Write:
		writeError(w, http.StatusForbidden, name+" needs a write token")
		return
	case mt != "application/json":
		// A cross-site form can send only form or text types.
		writeError(w, http.StatusUnsupportedMediaType, "the body must be Content-Type: application/json")
		return
	case !admin.IsFingerprint(fp):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("group %q is not a fingerprint (16 hex digits, as /api/groups gives)", fp))
		return
	}
	var req actionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "the body: "+err.Error())
		return
	}
	f := admin.Filter{Group: fp}
	if req.DryRun {
		res, err := act(r.Context(), f, admin.ActionOptions{DryRun: true})
		if err != nil {
			writeAdminError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	if req.Confirm <= 0 {
		writeError(w, http.StatusBadRequest, `"confirm" is required: the number of rows the operator saw (a dry run counts them); nothing changed`)
		return
	}
	n, err := adm.CountFailed(r.Context(), f)
	if err != nil {
		writeAdminError(w, err)
		return
	}
	if n != req.Confirm {
		writeJSON(w, http.StatusConflict, errorBody{
			Error: fmt.Sprintf("the group has %d failed rows now, not the %d confirmed: nothing changed; look again and confirm the new count", n, req.Confirm),
			Rows:  &n,
		})
		return
	}
	// The confirmed count is the limit: rows joining the group from now
	// on are left alone (Result.Left counts them).
	res, err := act(r.Context(), f, admin.ActionOptions{Limit: req.Confirm, ClearError: req.ClearError})
	if err != nil {
		writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
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
