package pubsubsink_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// refuseFirst refuses the first publish request with ResourceExhausted.
type refuseFirst struct{ n atomic.Int64 }

func (r *refuseFirst) React(any) (bool, any, error) {
	if r.n.Add(1) > 1 {
		return false, nil, nil
	}
	return true, nil, status.Error(codes.ResourceExhausted, "quota (test)")
}

// TestKeyStopsAfterFailedRequest: when a key's first request fails, its
// later messages of the call fail unsent (paused), transient, and none is
// stored; the next call goes out in full (the key was resumed). Another
// key is not held back.
func TestKeyStopsAfterFailedRequest(t *testing.T) {
	t.Parallel()
	srv := pstest.NewServerWithAddress("127.0.0.1:0", pstest.ServerReactorOption{FuncName: "Publish", Reactor: &refuseFirst{}})
	t.Cleanup(func() { _ = srv.Close() })
	f := &fake{srv: srv}
	topic := f.newTopic(t, "keystop")
	p := newPublisher(t, srv.Addr)
	var msgs []outbox.Message
	for i := range 300 { // three requests of 100
		msgs = append(msgs, message(topic, []byte("k"), fmt.Sprint(i)))
	}
	errs := publishers.PerMessage(p.Publish(testCtx(t), msgs), len(msgs))
	paused := 0
	for i, err := range errs {
		var pe pubsub.ErrPublishingPaused
		switch {
		case publishers.ClassOf(err) != publishers.ClassTransient:
			t.Fatalf("message %d: %v (%s), want transient", i, err, publishers.ClassOf(err))
		case errors.As(err, &pe):
			paused++
		}
	}
	if paused < 200 {
		t.Errorf("%d of 300 messages failed paused, want the 200 behind the refused request", paused)
	}
	if recs := f.records(t, topic); len(recs) != 0 {
		t.Fatalf("%d messages stored after the key's first request failed, want none", len(recs))
	}
	if err := p.Publish(testCtx(t), msgs); err != nil {
		t.Fatalf("the key's next call: %v", err)
	}
	recs := f.records(t, topic)
	if len(recs) != 300 {
		t.Fatalf("%d stored, want 300", len(recs))
	}
	for i, r := range recs {
		if string(r.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d is %q: out of order", i, r.Value)
		}
	}
}
