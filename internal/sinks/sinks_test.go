package sinks

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Parse reads a sink's flags as relay run does, and Changed returns those
// not at their default as variables: what a harness hands its relays. A
// webhook reader points --webhook-url at its receiver.
func TestParseAndChanged(t *testing.T) {
	t.Parallel()
	nats, _ := Named("nats")
	_, fs, err := nats.Parse("--nats-url", "nats://127.0.0.1:1", "--nats-max-in-flight", "7")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Changed(fs), []string{"OUTBOX_NATS_MAX_IN_FLIGHT=7", "OUTBOX_NATS_URL=nats://127.0.0.1:1"}; !slices.Equal(got, want) {
		t.Errorf("Changed = %q, want %q", got, want)
	}

	hook, _ := Named("webhook")
	settings, fs, err := hook.Parse()
	if err != nil {
		t.Fatal(err)
	}
	r, err := settings.(Readable).Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if env := Changed(fs); len(env) != 1 || !strings.HasPrefix(env[0], "OUTBOX_WEBHOOK_URL=http://127.0.0.1:") {
		t.Errorf("Changed after Reader = %q, want the receiver's URL", env)
	}
	if _, err := settings.(Readable).Reader(); err == nil || !strings.Contains(err.Error(), "leave --webhook-url") {
		t.Errorf("a second Reader with --webhook-url set: %v, want refused", err)
	}
}

// A reader reads to the end what the sink's publisher sent: here Kafka's,
// on the embedded broker its Reader starts.
func TestKafkaReaderReadsToTheEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kafka, _ := Named("kafka")
	settings, _, err := kafka.Parse()
	if err != nil {
		t.Fatal(err)
	}
	topic := UniqueTopic("sinks.test")
	r, err := settings.(Readable).Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Prepare(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := settings.Check(relay.Config{}); err != nil {
		t.Fatal(err)
	}
	pub, err := settings.Open(relay.Config{}, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var msgs []outbox.Message
	for i := range 5 {
		msgs = append(msgs, outbox.Message{ID: uuid.New(), Topic: topic, Key: fmt.Appendf(nil, "k%d", i%2), Payload: []byte("{}")})
	}
	if err := pub.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var got []Record
	if err := r.Read(ctx, topic, false, func(rec Record) { got = append(got, rec) }, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(msgs) {
		t.Fatalf("read %d records, want %d: %+v", len(got), len(msgs), got)
	}
	for _, rec := range got {
		if rec.EventID == "" || rec.Payload != "{}" || rec.Time.IsZero() {
			t.Errorf("record %+v: want an event id, the payload and a time", rec)
		}
	}
	// Remove deletes the topic Prepare created: Prepare creates it anew.
	if err := r.Remove(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Prepare(ctx, topic); err != nil || !r.(*kafkaReader).created[topic] {
		t.Errorf("Prepare after Remove: %v, created %v: want the topic created again", err, r.(*kafkaReader).created[topic])
	}
}
