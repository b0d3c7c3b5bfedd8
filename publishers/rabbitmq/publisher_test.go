package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// publishEach publishes msgs and returns one result per message.
func publishEach(t *testing.T, p *rabbitmq.Publisher, msgs []outbox.Message) []error {
	t.Helper()
	return publishers.PerMessage(p.Publish(testCtx(t, 30*time.Second), msgs), len(msgs))
}

// mustPublish publishes msgs and fails t unless every one was confirmed.
func mustPublish(t *testing.T, p *rabbitmq.Publisher, msgs []outbox.Message) {
	t.Helper()
	for i, err := range publishEach(t, p, msgs) {
		if err != nil {
			t.Fatalf("message %d of %d: %v", i, len(msgs), err)
		}
	}
}

// wantClasses checks the class of each result against want.
func wantClasses(t *testing.T, errs []error, want ...string) {
	t.Helper()
	for i, err := range errs {
		if got := publishers.ClassOf(err).String(); got != want[i] {
			t.Errorf("message %d: %s (%v), want %s", i, got, err, want[i])
		}
	}
}

// ids returns the message ids of ds in order.
func ids(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageId
	}
	return out
}

// The AMQP message carries everything of the outbox message: body, key
// header (exact bytes; absent for nil; present and empty for the empty
// key), headers as strings, event id as message_id and header,
// timestamp, persistent delivery mode. A message header named like the
// key header is dropped for the real key.
func TestMessageLayout(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, nil)
	p := newPublisher(t, rabbitmq.Config{})
	created := time.Date(2026, 3, 4, 5, 6, 7, 800_000_000, time.UTC)
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: q, Key: []byte{0, 0xff, 'k', 0x80}, Payload: []byte{0, 1, 2, 0xfe}, CreatedAt: created,
			Headers: map[string]string{"trace-id": "abc", "ünï": "cødé", rabbitmq.HeaderKey: "forged", outbox.HeaderEventID: "forged"}},
		{ID: uuid.New(), Topic: q, Key: nil, Payload: []byte("no key"), CreatedAt: created},
		{ID: uuid.New(), Topic: q, Key: []byte{}, Payload: nil, CreatedAt: created},
	}
	mustPublish(t, p, msgs)
	ds := b.deliveries(t, q)
	if len(ds) != len(msgs) {
		t.Fatalf("%d messages arrived, want %d", len(ds), len(msgs))
	}
	for i, d := range ds {
		m := msgs[i]
		if d.MessageId != m.ID.String() || d.Headers[outbox.HeaderEventID] != m.ID.String() {
			t.Errorf("message %d: message_id %q, header %v; want %s in both", i, d.MessageId, d.Headers[outbox.HeaderEventID], m.ID)
		}
		if !bytes.Equal(d.Body, m.Payload) {
			t.Errorf("message %d: body %q, want %q", i, d.Body, m.Payload)
		}
		key, hasKey := d.Headers[rabbitmq.HeaderKey]
		switch {
		case m.Key == nil && hasKey:
			t.Errorf("message %d: nil key arrived as header %q", i, key)
		case m.Key != nil && (!hasKey || key != string(m.Key)):
			t.Errorf("message %d: key %q arrived as %q (present %t)", i, m.Key, key, hasKey)
		}
		if !d.Timestamp.Equal(created.Truncate(time.Second)) {
			t.Errorf("message %d: timestamp %v, want %v", i, d.Timestamp, created.Truncate(time.Second))
		}
		if d.DeliveryMode != amqp.Persistent {
			t.Errorf("message %d: delivery mode %d, want persistent", i, d.DeliveryMode)
		}
		if d.Exchange != "" || d.RoutingKey != q {
			t.Errorf("message %d: arrived through exchange %q with routing key %q, want the default exchange and %q", i, d.Exchange, d.RoutingKey, q)
		}
	}
	if h := ds[0].Headers; h["trace-id"] != "abc" || h["ünï"] != "cødé" || len(h) != 4 {
		t.Errorf("headers arrived as %v, want trace-id, ünï, the key and the event id", h)
	}
}

// A topic without "/" is a routing key on Config.Exchange (the default
// exchange unless set); "exchange/key" names both; "/queue" is the
// default exchange whatever Config.Exchange says.
func TestDestinationMapping(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	ex := b.exchange(t, amqp.ExchangeTopic)
	direct := b.queue(t, nil) // reached through the default exchange
	routed := b.queue(t, nil) // bound to ex with orders.*
	fanned := b.exchange(t, amqp.ExchangeFanout)
	fanQ := b.queue(t, nil)
	b.bind(t, routed, "orders.*", ex)
	b.bind(t, fanQ, "", fanned)

	plain := newPublisher(t, rabbitmq.Config{})
	viaEx := newPublisher(t, rabbitmq.Config{Exchange: ex})
	mustPublish(t, plain, []outbox.Message{msg(direct, "k", "1"), msg(ex+"/orders.created", "k", "2"), msg(fanned+"/", "k", "3")})
	mustPublish(t, viaEx, []outbox.Message{msg("orders.paid", "k", "4"), msg("/"+direct, "k", "5")})

	body := func(ds []amqp.Delivery) string {
		var s []string
		for _, d := range ds {
			s = append(s, string(d.Body))
		}
		return strings.Join(s, ",")
	}
	for q, want := range map[string]string{direct: "1,5", routed: "2,4", fanQ: "3"} {
		if got := body(b.deliveries(t, q)); got != want {
			t.Errorf("queue %s got %q, want %q", q, got, want)
		}
	}
	// With Config.Exchange set, a topic matching no binding is returned.
	errs := publishEach(t, viaEx, []outbox.Message{msg("invoices.paid", "k", "6")})
	wantClasses(t, errs, "permanent")
}

func TestParseDestination(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	for _, c := range []struct {
		topic, def string
		want       rabbitmq.Destination
		err        string
	}{
		{"orders.created", "", rabbitmq.Destination{"", "orders.created"}, ""},
		{"orders.created", "events", rabbitmq.Destination{"events", "orders.created"}, ""},
		{"events/orders.created", "", rabbitmq.Destination{"events", "orders.created"}, ""},
		{"events/a/b", "", rabbitmq.Destination{"events", "a/b"}, ""},
		{"/invoices", "events", rabbitmq.Destination{"", "invoices"}, ""},
		{"audit/", "", rabbitmq.Destination{"audit", ""}, ""},
		{"", "", rabbitmq.Destination{}, "empty"},
		{"/", "", rabbitmq.Destination{}, "needs a routing key"},
		{long, "events", rabbitmq.Destination{}, "routing key is 256 bytes"},
		{long + "/k", "", rabbitmq.Destination{}, "exchange name is 256 bytes"},
		{"a\nb/k", "", rabbitmq.Destination{}, "control character"},
		{"ex/\xff", "", rabbitmq.Destination{}, "not valid UTF-8"},
	} {
		got, err := rabbitmq.ParseDestination(c.topic, c.def)
		if c.err != "" {
			if !errors.Is(err, rabbitmq.ErrInvalidDestination) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseDestination(%q, %q) = %v, %v; want an ErrInvalidDestination saying %q", c.topic, c.def, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseDestination(%q, %q) = %+v, %v; want %+v", c.topic, c.def, got, err, c.want)
		}
	}
}

// An invalid destination or header fails its message permanently, alone.
func TestInvalidMessagesArePermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, nil)
	p := newPublisher(t, rabbitmq.Config{MaxMessageBytes: 10})
	long := msg(q, "k", "x")
	long.Headers = map[string]string{strings.Repeat("h", 256): "v"}
	msgs := []outbox.Message{msg(q, "k", "ok"), msg("bad\x00topic", "k", "x"), long, msg(q, "k", "eleven byte"), msg(q, "k", "ok too")}
	errs := publishEach(t, p, msgs)
	wantClasses(t, errs, "acknowledged", "permanent", "permanent", "permanent", "acknowledged")
	if !errors.Is(errs[1], rabbitmq.ErrInvalidDestination) || !errors.Is(errs[2], outbox.ErrInvalidHeader) || !errors.Is(errs[3], rabbitmq.ErrTooLarge) {
		t.Errorf("errors %v do not wrap ErrInvalidDestination, outbox.ErrInvalidHeader, ErrTooLarge", errs[1:4])
	}
	if got := ids(b.deliveries(t, q)); len(got) != 2 || got[0] != msgs[0].ID.String() || got[1] != msgs[4].ID.String() {
		t.Errorf("arrived %v, want messages 0 and 4", got)
	}
}

// A message that no queue takes is returned (mandatory) and fails
// permanently with the broker's reason; its neighbours arrive.
func TestUnroutableIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, nil)
	p := newPublisher(t, rabbitmq.Config{})
	nowhere := "outboxrelay-test-no-such-queue-" + uuid.NewString()
	msgs := []outbox.Message{msg(q, "k", "1"), msg(nowhere, "k", "2"), msg(q, "k", "3")}
	errs := publishEach(t, p, msgs)
	wantClasses(t, errs, "acknowledged", "permanent", "acknowledged")
	re, ok := errorsAs[*rabbitmq.ReturnedError](errs[1])
	if !ok || re.Code != amqp.NoRoute || re.Destination.RoutingKey != nowhere {
		t.Errorf("error %v: want a ReturnedError (312 NO_ROUTE) for routing key %s", errs[1], nowhere)
	}
	if !strings.Contains(errs[1].Error(), "no queue bound to the default exchange") {
		t.Errorf("error %q does not say no queue is bound", errs[1])
	}
	if got := ids(b.deliveries(t, q)); len(got) != 2 {
		t.Errorf("arrived %v, want messages 0 and 2", got)
	}
}

// Returns are matched to their messages by message_id (the event id).
// Should an id repeat in a call with some of its messages returned and
// some not, which is which is unknown: all of them are transient, neither
// failed for good nor taken as delivered.
func TestReturnsMatchTheirMessages(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, nil)
	p := newPublisher(t, rabbitmq.Config{MaxInFlight: 7})
	var msgs []outbox.Message
	var want []string
	for i := range 200 {
		m := msg(q, fmt.Sprintf("k%d", i%5), fmt.Sprint(i))
		want = append(want, "acknowledged")
		if i%3 == 0 {
			m.Topic = "/outboxrelay-test-nowhere"
			want[i] = "permanent"
		}
		msgs = append(msgs, m)
	}
	// Messages 3 and 6 are returned, 5 is not, all three of one id.
	msgs[5].ID, msgs[6].ID = msgs[3].ID, msgs[3].ID
	want[3], want[5], want[6] = "transient", "transient", "transient"
	// Messages 9 and 12 are both returned, of one id.
	msgs[12].ID = msgs[9].ID
	wantClasses(t, publishEach(t, p, msgs), want...)
}

// A missing exchange fails its own messages permanently (404), not the
// others of the batch, and the publisher goes on.
func TestMissingExchangeFailsOnlyItsMessages(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	good := b.topic(t)
	missing := "outboxrelay-test-missing-" + uuid.NewString() + "/key"
	p := newPublisher(t, rabbitmq.Config{})
	msgs := []outbox.Message{msg(good, "k", "1"), msg(missing, "k", "2"), msg(good, "k", "3"), msg(missing, "j", "4")}
	errs := publishEach(t, p, msgs)
	wantClasses(t, errs, "acknowledged", "permanent", "acknowledged", "permanent")
	if !strings.Contains(fmt.Sprint(errs[1]), "404") {
		t.Errorf("error %v does not give the broker's 404", errs[1])
	}
	mustPublish(t, p, []outbox.Message{msg(good, "k", "5")})
	if got := len(b.records(t, good)); got != 3 {
		t.Errorf("%d messages arrived, want 3", got)
	}
}

// An exchange deleted after the publisher saw it closes the channel in
// the middle of a batch: its messages fail permanently, the others are
// retried (transient, never unavailable), and the next call works.
func TestExchangeDeletedMidBatch(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	good := b.topic(t)
	doomed := b.topic(t)
	p := newPublisher(t, rabbitmq.Config{})
	mustPublish(t, p, []outbox.Message{msg(doomed, "k", "seen")})
	b.do(t, func(ch *amqp.Channel) error {
		return ch.ExchangeDelete(doomed[:strings.Index(doomed, "/")], false, false)
	})

	msgs := []outbox.Message{msg(good, "k", "1"), msg(doomed, "k", "2"), msg(good, "k", "3"), msg(doomed, "k", "4")}
	errs := publishEach(t, p, msgs)
	for i, err := range errs {
		doomedMsg := i%2 == 1
		switch c := publishers.ClassOf(err).String(); {
		case doomedMsg && c != "permanent":
			t.Errorf("message %d to the deleted exchange: %s (%v), want permanent", i, c, err)
		case !doomedMsg && c != "acknowledged" && c != "transient":
			t.Errorf("message %d to a live exchange: %s (%v), want acknowledged or transient", i, c, err)
		}
	}
	// The exchange is checked again: still permanent, at once.
	wantClasses(t, publishEach(t, p, []outbox.Message{msg(good, "k", "5"), msg(doomed, "k", "6")}), "acknowledged", "permanent")
}

// A nack (here from a full queue that rejects publishes) is transient.
func TestNackIsTransient(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	p := newPublisher(t, rabbitmq.Config{})
	errs := publishEach(t, p, []outbox.Message{msg(q, "k", "1"), msg(q, "k", "2"), msg(q, "k", "3")})
	wantClasses(t, errs, "acknowledged", "transient", "transient")
	if !errors.Is(errs[1], rabbitmq.ErrNacked) {
		t.Errorf("error %v does not wrap ErrNacked", errs[1])
	}
	// Once there is room, the same publisher takes them.
	b.deliveries(t, q)
	mustPublish(t, p, []outbox.Message{msg(q, "k", "2")})
}

// A window of MaxInFlight smaller than the batch keeps the order and loses
// nothing.
func TestMaxInFlightWindow(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, nil)
	p := newPublisher(t, rabbitmq.Config{MaxInFlight: 3})
	var msgs []outbox.Message
	var want []string
	for i := range 500 {
		msgs = append(msgs, msg(q, "k", fmt.Sprint(i)))
		want = append(want, msgs[i].ID.String())
	}
	mustPublish(t, p, msgs)
	if got := ids(b.deliveries(t, q)); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("arrived %d messages, not the %d published in order", len(got), len(want))
	}
}

// A connection the broker end resets is unavailable for every message;
// the next call reconnects by itself, without a Probe.
func TestReconnectsAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, nil)
	proxy := startProxy(t)
	p := newPublisher(t, rabbitmq.Config{URL: proxied(t, proxy.Addr())})
	mustPublish(t, p, []outbox.Message{msg(q, "k", "before")})
	proxy.Cut()
	errs := publishEach(t, p, []outbox.Message{msg(q, "k", "during"), msg(q, "j", "during")})
	wantClasses(t, errs, "unavailable", "unavailable")
	proxy.Heal()
	// The first call after the cut may find the old connection not yet
	// known dead: it fails unavailable, and the next one redials.
	after := []outbox.Message{msg(q, "k", "after")}
	if err := p.Publish(testCtx(t, 10*time.Second), after); err != nil {
		if publishers.ClassOf(err).String() != "unavailable" {
			t.Fatalf("first Publish after the cut healed: %s (%v), want success or unavailable", publishers.ClassOf(err).String(), err)
		}
		mustPublish(t, p, after)
	}
	if got := len(b.deliveries(t, q)); got < 2 {
		t.Errorf("%d messages arrived, want at least before and after", got)
	}
}

// A Publish whose context ends while its writes are stuck (the broker
// reads nothing, the socket buffers are full) returns about on time: the
// connection is broken off. The publisher works again once healed.
func TestStuckWriteHonoursDeadline(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t, nil)
	proxy := startProxy(t)
	p := newPublisher(t, rabbitmq.Config{URL: proxied(t, proxy.Addr())})
	mustPublish(t, p, []outbox.Message{msg(q, "k", "warm")})
	proxy.Stall()
	defer proxy.Heal()
	big := bytes.Repeat([]byte("x"), 1<<20)
	var msgs []outbox.Message
	for range 64 { // 64 MiB: more than any socket buffer holds
		m := msg(q, "k", "")
		m.Payload = big
		msgs = append(msgs, m)
	}
	const deadline = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	err := p.Publish(ctx, msgs)
	took := time.Since(start)
	// Below PublishTimeout (30s), the next bound that could end the call;
	// a busy machine may overrun the deadline by seconds.
	if took > deadline+15*time.Second {
		t.Errorf("Publish with stuck writes took %v, deadline %v", took, deadline)
	}
	for i, e := range publishers.PerMessage(err, len(msgs)) {
		if e == nil || publishers.IsPermanent(e) {
			t.Fatalf("message %d: %s (%v), want a failure that is not permanent", i, publishers.ClassOf(e).String(), e)
		}
	}
	proxy.Heal()
	after := []outbox.Message{msg(q, "k", "after")}
	if err := p.Publish(testCtx(t, 10*time.Second), after); err != nil {
		mustPublish(t, p, after) // the first may find the broken connection
	}
}

// A broker that refuses the credentials is unavailable, and the error does
// not hold the password.
func TestBadCredentialsAreUnavailable(t *testing.T) {
	t.Parallel()
	admin(t) // a broker answers
	u := strings.Replace(brokerURL(), "guest:guest", "guest:s3cr3t-pw", 1)
	if u == brokerURL() {
		u = "amqp://guest:s3cr3t-pw@" + brokerAddr(t) + "/"
	}
	p := newPublisher(t, rabbitmq.Config{URL: u})
	err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{msg("q", "k", "x")})
	if publishers.ClassOf(err).String() != "unavailable" || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Errorf("Publish with a wrong password = %s (%v), want unavailable without the password", publishers.ClassOf(err).String(), err)
	}
	if err := p.Probe(testCtx(t, 10*time.Second)); publishers.ClassOf(err).String() != "unavailable" || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Errorf("Probe with a wrong password = %v, want unavailable without the password", err)
	}
}

// Nothing listens: Publish and Probe are unavailable, at once.
func TestNoBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	proxy := startProxy(t)
	proxy.Cut()
	p := newPublisher(t, rabbitmq.Config{URL: proxied(t, proxy.Addr())})
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{msg("q", "k", "x")}); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Publish = %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
	if err := p.Probe(testCtx(t, 10*time.Second)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe = %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
}

// Close during a dial that the broker never answers returns at once, and
// the dial ends with the Publish's context.
func TestCloseDuringStalledDial(t *testing.T) {
	t.Parallel()
	proxy := startProxy(t)
	proxy.Stall()
	defer proxy.Heal()
	// DialTimeout a minute: only the context (300ms) can end the dial in
	// the 20s that a busy machine is given.
	p := newPublisher(t, rabbitmq.Config{URL: proxied(t, proxy.Addr()), DialTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.Publish(ctx, []outbox.Message{msg("q", "k", "x")})
	if took := time.Since(start); took > 20*time.Second || err == nil || publishers.IsPermanent(err) {
		t.Errorf("Publish against a silent broker: %v after %v; want a failure that is not permanent, on time", err, took)
	}
	start = time.Now()
	if err := p.Close(); err != nil || time.Since(start) > 20*time.Second {
		t.Errorf("Close = %v after %v", err, time.Since(start))
	}
	if err := p.Publish(testCtx(t, time.Second), []outbox.Message{msg("q", "k", "x")}); publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, rabbitmq.ErrClosed) {
		t.Errorf("Publish after Close = %v, want unavailable ErrClosed", err)
	}
}

// A Probe that the broker does not answer in time breaks the connection
// off, so that the next one dials afresh rather than wait for heartbeats
// to declare a dead connection dead.
func TestProbeTimeoutRedials(t *testing.T) {
	t.Parallel()
	proxy := startProxy(t)
	p := newPublisher(t, rabbitmq.Config{URL: proxied(t, proxy.Addr())})
	if err := p.Probe(testCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	proxy.Stall()
	defer proxy.Heal()
	if err := p.Probe(testCtx(t, 200*time.Millisecond)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe of a silent broker = %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
	proxy.Heal()
	if err := p.Probe(testCtx(t, 10*time.Second)); err != nil {
		t.Errorf("first Probe after the broker answers again: %v", err)
	}
	if s := proxy.Stats(); s.Accepted < 2 {
		t.Errorf("the proxy accepted %d connections; want a second one, dialed after the timed-out probe", s.Accepted)
	}
}
