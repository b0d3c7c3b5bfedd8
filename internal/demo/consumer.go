package demo

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// consumerName is the inbox consumer of the demo (Config.Inbox).
const consumerName = "demo-consumer"

// InboxSummary is what the inbox consumer of a run (Config.Inbox) did.
type InboxSummary struct {
	// Delivered counts the messages it read, both passes; Duplicates
	// those the inbox had recorded before, whose effect it skipped.
	Delivered, Duplicates int
	// Effects counts the effect rows; DuplicateEffects those beyond the
	// first of an event.
	Effects, DuplicateEffects int
}

// ok reports whether each of committed events was applied once and
// delivered at least twice.
func (s InboxSummary) ok(committed int) bool {
	return s.Effects == committed && s.DuplicateEffects == 0 && s.Duplicates >= committed
}

// consume reads the topic from its beginning and applies every event
// through the inbox, then reads it all again, as a consumer that crashed
// before committing its offsets would, and counts the effects.
func consume(ctx context.Context, cfg Config, db backend) (InboxSummary, error) {
	var s InboxSummary
	for range 2 {
		var failed error
		err := cfg.Sink.Read(ctx, cfg.Topic, false, func(r sinks.Record) {
			if failed != nil {
				return
			}
			id, err := inbox.ParseID(r.EventID)
			if err != nil {
				failed = err
				return
			}
			m := inbox.Message{ID: id, Topic: cfg.Topic, Key: []byte(r.Key), Payload: []byte(r.Payload)}
			duplicate, err := db.applyEffect(ctx, m)
			if err != nil {
				failed = err
				return
			}
			s.Delivered++
			if duplicate {
				s.Duplicates++
			}
		}, nil)
		if err := errors.Join(err, failed); err != nil {
			return s, fmt.Errorf("inbox consumer: %w", err)
		}
	}
	var err error
	s.Effects, s.DuplicateEffects, err = db.countEffects(ctx)
	return s, err
}
