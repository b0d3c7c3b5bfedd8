package relay

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// heads keeps each key's messages up to its first failure that is not
// permanent (and acknowledged ones after it), and puts the key's later
// failed messages behind, in order.
func TestHeads(t *testing.T) {
	transient := errors.New("timeout")
	permanent := publishers.Permanent(errors.New("too large"))
	type in struct {
		key string
		err error
	}
	for _, tc := range []struct {
		name         string
		msgs         []in
		keep, behind []string
	}{
		{"all acknowledged", []in{{"a", nil}, {"b", nil}, {"a", nil}}, []string{"a0", "b1", "a2"}, nil},
		{"a transient failure holds its key's later failures back",
			[]in{{"a", nil}, {"a", transient}, {"b", nil}, {"a", transient}, {"a", transient}},
			[]string{"a0", "a1", "b2"}, []string{"a3", "a4"}},
		{"other keys go on", []in{{"a", transient}, {"b", transient}, {"b", transient}, {"c", nil}},
			[]string{"a0", "b1", "c3"}, []string{"b2"}},
		{"a permanent failure holds nothing back",
			[]in{{"a", permanent}, {"a", transient}, {"a", transient}},
			[]string{"a0", "a1"}, []string{"a2"}},
		{"an acknowledgement after a failure is kept", []in{{"a", transient}, {"a", nil}}, []string{"a0", "a1"}, nil},
		{"the same key on another topic is another key", []in{{"a", transient}, {"t2:a", transient}}, []string{"a0", "t2:a1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []outbox.Message
			var results []error
			for i, m := range tc.msgs {
				topic, key := "t", m.key
				if len(key) > 3 && key[:3] == "t2:" {
					topic, key = "t2", key[3:]
				}
				msgs = append(msgs, outbox.Message{Topic: topic, Key: []byte(key), Payload: fmt.Appendf(nil, "%s%d", m.key, i)})
				results = append(results, m.err)
			}
			keep, keepResults, behind := heads(msgs, results)
			if got := payloads(keep); !slices.Equal(got, tc.keep) {
				t.Errorf("keep %v, want %v", got, tc.keep)
			}
			if got := payloads(behind); !slices.Equal(got, tc.behind) {
				t.Errorf("behind %v, want %v", got, tc.behind)
			}
			for i, m := range keep {
				var want error
				for j := range msgs {
					if string(msgs[j].Payload) == string(m.Payload) {
						want = results[j]
					}
				}
				if keepResults[i] != want {
					t.Errorf("result of %s is %v, want %v", m.Payload, keepResults[i], want)
				}
			}
		})
	}
}

func payloads(msgs []outbox.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Payload))
	}
	return out
}
