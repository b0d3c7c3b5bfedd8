package console

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/admin"
)

// confirmation is the part of an action's body that says whether to act:
// a dry run, or the count the operator confirmed.
type confirmation struct {
	// DryRun counts the rows the action would change, and changes none.
	DryRun bool `json:"dry_run"`
	// Confirm is the count the operator saw and confirmed: the action
	// goes ahead only if that many rows match now, and changes at most
	// that many.
	Confirm int64 `json:"confirm"`
}

// groupRequest is the body of a group's retry or purge.
type groupRequest struct {
	confirmation
	// ClearError (retry) clears last_error.
	ClearError bool `json:"clear_error"`
}

func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	fp, name := strings.ToLower(r.PathValue("fp")), r.PathValue("action")
	adm := s.adm.WithActor(callerOf(r).actor)
	var act func(context.Context, admin.Filter, admin.ActionOptions) (admin.Result, error)
	switch name {
	case "retry":
		act = adm.RetryFailed
	case "purge":
		act = adm.PurgeFailed
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no action %q: retry or purge", name))
		return
	}
	var req groupRequest
	if !decodeAction(w, r, name, &req) {
		return
	}
	if !admin.IsFingerprint(fp) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("group %q is not a fingerprint (16 hex digits, as /api/groups gives)", fp))
		return
	}
	f := admin.Filter{Group: fp}
	count := func(ctx context.Context) (int64, error) { return adm.CountFailed(ctx, f) }
	run := func(ctx context.Context, o admin.ActionOptions) (admin.Result, error) {
		o.ClearError = req.ClearError
		return act(ctx, f, o)
	}
	runConfirmed(w, r, req.confirmation, "the group has", "failed rows", count, run)
}

// replayRequest is the body of POST /api/replay: the parts of
// admin.ReplayFilter, named as the audit trail records them.
type replayRequest struct {
	confirmation
	IDs     []string  `json:"ids"`
	Topics  []string  `json:"topics"`
	Created timeRange `json:"created"`
	Sent    timeRange `json:"sent"`
}

// timeRange is an admin.TimeRange: RFC 3339 times, from included, to
// excluded, either left out for an open bound.
type timeRange struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	if !decodeAction(w, r, "replay", &req) {
		return
	}
	for _, id := range req.IDs {
		if _, err := uuid.Parse(id); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not an event id", id))
			return
		}
	}
	f := admin.ReplayFilter{IDs: req.IDs, Topics: req.Topics,
		Created: admin.TimeRange(req.Created), Sent: admin.TimeRange(req.Sent)}
	adm := s.adm.WithActor(callerOf(r).actor)
	count := func(ctx context.Context) (int64, error) { return adm.CountReplay(ctx, f) }
	run := func(ctx context.Context, o admin.ActionOptions) (admin.Result, error) { return adm.Replay(ctx, f, o) }
	runConfirmed(w, r, req.confirmation, "the filter matches", "sent rows", count, run)
}

// decodeAction decodes the body of a POST that acts into req, once it
// has checked that the caller holds a write token and sent JSON; false
// means it answered the request.
func decodeAction(w http.ResponseWriter, r *http.Request, name string, req any) bool {
	switch mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); {
	case callerOf(r).role != Write:
		writeError(w, http.StatusForbidden, name+" needs a write token")
		return false
	case mt != "application/json":
		// A cross-site form can send only form or text types.
		writeError(w, http.StatusUnsupportedMediaType, "the body must be Content-Type: application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		writeError(w, http.StatusBadRequest, "the body: "+err.Error())
		return false
	}
	return true
}

// runConfirmed answers a dry run of act, or runs act if count gives the
// confirmed number now (409 with the count otherwise, "<subject> N <rows>
// now"), with that number as its limit: rows that match from then on are
// left alone (Result.Left counts them).
func runConfirmed(w http.ResponseWriter, r *http.Request, c confirmation, subject, rows string,
	count func(context.Context) (int64, error), act func(context.Context, admin.ActionOptions) (admin.Result, error)) {
	if c.DryRun {
		res, err := act(r.Context(), admin.ActionOptions{DryRun: true})
		if err != nil {
			writeAdminError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	if c.Confirm <= 0 {
		writeError(w, http.StatusBadRequest, `"confirm" is required: the number of rows the operator saw (a dry run counts them); nothing changed`)
		return
	}
	n, err := count(r.Context())
	if err != nil {
		writeAdminError(w, err)
		return
	}
	if n != c.Confirm {
		writeJSON(w, http.StatusConflict, errorBody{
			Error: fmt.Sprintf("%s %d %s now, not the %d confirmed: nothing changed; look again and confirm the new count", subject, n, rows, c.Confirm),
			Rows:  &n,
		})
		return
	}
	res, err := act(r.Context(), admin.ActionOptions{Limit: c.Confirm})
	if err != nil {
		writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
