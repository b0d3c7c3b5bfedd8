package relay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// A write-back's fenced rows move from its outcome to Fenced: exactly
// when the whole step was fenced or it had one topic, by largest
// remainder otherwise; Claimed adds every outcome up.
func TestTopicTallyResult(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		add  func(*topicTally)
		res  BatchResult
		want []TopicCount
	}{
		{"nothing fenced", func(tt *topicTally) {
			tt.add("a", tallySent, 3)
			tt.add("b", tallySent, 2)
			tt.add("b", tallyRetried, 1)
		}, BatchResult{Sent: 5, Retried: 1}, []TopicCount{
			{Topic: "a", Claimed: 3, Sent: 3},
			{Topic: "b", Claimed: 3, Sent: 2, Retried: 1},
		}},
		{"a whole step fenced", func(tt *topicTally) {
			tt.add("a", tallySent, 3)
			tt.add("b", tallySent, 2)
			tt.add("b", tallyFailed, 1)
		}, BatchResult{Sent: 0, Failed: 1, Fenced: 5}, []TopicCount{
			{Topic: "a", Claimed: 3, Fenced: 3},
			{Topic: "b", Claimed: 3, Fenced: 2, Failed: 1},
		}},
		{"one topic, part fenced", func(tt *topicTally) {
			tt.add("a", tallyReleased, 4)
			tt.add("b", tallySent, 2)
		}, BatchResult{Released: 1, Sent: 2, Fenced: 3}, []TopicCount{
			{Topic: "a", Claimed: 4, Released: 1, Fenced: 3},
			{Topic: "b", Claimed: 2, Sent: 2},
		}},
		{"several topics, part fenced: shared by largest remainder", func(tt *topicTally) {
			tt.add("a", tallySent, 6)
			tt.add("b", tallySent, 3)
			tt.add("c", tallySent, 1)
		}, BatchResult{Sent: 5, Fenced: 5}, []TopicCount{
			{Topic: "a", Claimed: 6, Sent: 3, Fenced: 3},
			{Topic: "b", Claimed: 3, Sent: 1, Fenced: 2}, // b's 1.5 and c's 0.5 tie on the remainder: the first gets the row
			{Topic: "c", Claimed: 1, Sent: 1},
		}},
		{"abandoned are never fenced", func(tt *topicTally) {
			tt.add("a", tallyAbandoned, 2)
		}, BatchResult{Abandoned: 2}, []TopicCount{
			{Topic: "a", Claimed: 2, Abandoned: 2},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tt := &topicTally{}
			c.add(tt)
			got := tt.result(c.res)
			if !slices.Equal(got, c.want) {
				t.Errorf("result = %+v\nwant     %+v", got, c.want)
			}
			fenced := 0
			for _, g := range got {
				fenced += g.Fenced
			}
			if fenced != c.res.Fenced {
				t.Errorf("fenced adds up to %d, want %d", fenced, c.res.Fenced)
			}
		})
	}
	var none *topicTally
	none.add("a", tallySent, 1) // a nil tally counts nothing, and does not panic
	if none.result(BatchResult{Sent: 1}) != nil {
		t.Error("a nil tally has a result")
	}
}

// Many topics are looked up in a map, with the same counts.
func TestTopicTallyManyTopics(t *testing.T) {
	t.Parallel()
	tt := &topicTally{}
	topics := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10", "t11"}
	for round := 0; round < 3; round++ {
		for _, topic := range topics {
			tt.add(topic, tallySent, 1)
		}
	}
	got := tt.result(BatchResult{Sent: 3 * len(topics)})
	if len(got) != len(topics) {
		t.Fatalf("%d entries, want %d", len(got), len(topics))
	}
	for i, g := range got {
		if g.Topic != topics[i] || g.Sent != 3 || g.Claimed != 3 {
			t.Errorf("entry %d = %+v, want %s with 3 sent", i, g, topics[i])
		}
	}
}

// A topic outbox.ValidateTopic refuses (not UTF-8, empty, too long, a
// byte outside its set) is counted under InvalidTopic: observers never
// see it.
func TestTopicTallyInvalidTopics(t *testing.T) {
	t.Parallel()
	tt := &topicTally{}
	for _, topic := range []string{"orders", "acc.p\xffA", "", "bad topic!", strings.Repeat("t", 10000), "orders", "..", InvalidTopic} {
		tt.add(topic, tallyFailed, 1)
	}
	got := tt.result(BatchResult{Failed: 8})
	want := []TopicCount{{Topic: "orders", Claimed: 2, Failed: 2}, {Topic: InvalidTopic, Claimed: 6, Failed: 6}}
	if !slices.Equal(got, want) {
		t.Errorf("result = %+v\nwant     %+v", got, want)
	}
	if outbox.ValidateTopic(InvalidTopic) == nil {
		t.Errorf("%q is a valid topic: a topic could be mistaken for the invalid ones", InvalidTopic)
	}
	r := &Relay{pipe: &pipeline{obs: ObserverFunc(func(Event) {})}}
	claimed := r.pipe.claimedTopics([]store.Row{{Topic: "acc.p\xffA"}, {Topic: "ok"}, {Topic: "bad topic!"}})
	if want := []TopicCount{{Topic: InvalidTopic, Claimed: 2}, {Topic: "ok", Claimed: 1}}; !slices.Equal(claimed, want) {
		t.Errorf("claimed = %+v, want %+v", claimed, want)
	}
}

// topicSink acknowledges topic "ok", refuses "bad" for good and fails
// "slow" transiently.
type topicSink struct{}

func (topicSink) Publish(_ context.Context, msgs []outbox.Message) error {
	errs := make(publishers.Errors, len(msgs))
	for i, m := range msgs {
		switch m.Topic {
		case "bad":
			errs[i] = publishers.Permanent(errors.New("rejected"))
		case "slow":
			errs[i] = errors.New("timeout")
		}
	}
	return errs
}

func (topicSink) Close() error { return nil }

// Claimed and recorded events break their rows down by topic, and the
// breakdown adds up to the batch's result.
func TestEventTopicsAddUpToTheBatch(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+table.Ident()+` (id, topic, payload)
		SELECT gen_random_uuid(), (ARRAY['ok', 'bad', 'slow'])[1 + g % 3], '\x00' FROM generate_series(1, 30) g`); err != nil {
		t.Fatal(err)
	}
	// A row whose headers are not an object fails as malformed; so do
	// rows with an invalid topic, counted under InvalidTopic.
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+table.Ident()+` (id, topic, payload, headers) VALUES (gen_random_uuid(), 'ok', '\x00', '[1]'),
		(gen_random_uuid(), 'bad topic!', '\x00', '{}'), (gen_random_uuid(), repeat('t', 10000), '\x00', '{}')`); err != nil {
		t.Fatal(err)
	}
	var seen events
	r := quietRelay(t, pool, topicSink{}, Config{Table: table, KeepSent: true, Observer: &seen})
	res, err := r.ProcessBatch(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 33 || res.Sent != 10 || res.Failed != 13 || res.Retried != 10 {
		t.Fatalf("result %+v, want 33 claimed: 10 sent, 13 failed, 10 retried", res)
	}
	claimed := seen.of(EventClaimed)
	if len(claimed) != 1 {
		t.Fatalf("%d claimed events, want 1", len(claimed))
	}
	byTopic := func(ts []TopicCount) map[string]TopicCount {
		m := map[string]TopicCount{}
		for _, tc := range ts {
			m[tc.Topic] = tc
		}
		return m
	}
	c := byTopic(claimed[0].Topics)
	if c["ok"].Claimed != 11 || c["bad"].Claimed != 10 || c["slow"].Claimed != 10 || c[InvalidTopic].Claimed != 2 || len(c) != 4 {
		t.Errorf("claimed by topic %+v, want ok 11, bad 10, slow 10, %s 2", claimed[0].Topics, InvalidTopic)
	}
	recorded := seen.of(EventRecorded)
	if len(recorded) != 1 {
		t.Fatalf("%d recorded events, want 1", len(recorded))
	}
	got := byTopic(recorded[0].Topics)
	want := map[string]TopicCount{
		"ok":         {Topic: "ok", Claimed: 11, Sent: 10, Failed: 1},
		"bad":        {Topic: "bad", Claimed: 10, Failed: 10},
		"slow":       {Topic: "slow", Claimed: 10, Retried: 10},
		InvalidTopic: {Topic: InvalidTopic, Claimed: 2, Failed: 2},
	}
	if len(got) != len(want) {
		t.Errorf("recorded topics %+v, want %d", recorded[0].Topics, len(want))
	}
	for topic, w := range want {
		if got[topic] != w {
			t.Errorf("recorded %s = %+v, want %+v", topic, got[topic], w)
		}
	}
}

// BenchmarkTopicTally1000 is what counting a batch of 1,000 rows of three
// topics by topic costs the pipeline when an Observer is set: the claimed
// counts, each row's outcome, and the result.
func BenchmarkTopicTally1000(b *testing.B) {
	r := &Relay{pipe: &pipeline{obs: ObserverFunc(func(Event) {})}}
	rows := make([]store.Row, 1000)
	topics := []string{"orders", "users", "payments"}
	for i := range rows {
		rows[i].Topic = topics[i*3/len(rows)]
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.pipe.claimedTopics(rows)
		t := r.pipe.newTopicTally()
		for i := range rows {
			t.add(rows[i].Topic, tallySent, 1)
		}
		_ = t.result(BatchResult{Sent: len(rows)})
	}
}
