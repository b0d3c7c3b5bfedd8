package relay

import (
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// InvalidTopic is the topic of Event.Topics under which the relay counts
// the rows whose topic is invalid (outbox.ValidateTopic). They fail as
// malformed. No valid topic can be InvalidTopic.
const InvalidTopic = "<invalid>"

// Per-topic counts for the Observer (Event.Topics). The pipeline counts
// each row's intended outcome by topic as it decides it; once the outcome
// is written, the rows a write-back found held by another claim (fenced)
// are taken from the intended counts of that write-back. A nil *topicTally
// counts nothing: without an Observer the relay makes none, and the
// counting costs a nil check per row. A row whose topic is invalid
// (outbox.ValidateTopic: not UTF-8, too long, bad bytes) is counted under
// InvalidTopic, so that observers never see such a topic.

// tallied is an outcome the pipeline decides for a row.
type tallied int

const (
	tallySent tallied = iota
	tallyRetried
	tallyFailed
	tallyReleased
	tallyAbandoned
)

// topicTally counts one batch's rows per topic and intended outcome.
type topicTally struct {
	counts []TopicCount   // in order of first appearance
	index  map[string]int // into counts, once there are many topics
	last   int            // the entry found last: rows come in runs of one topic
}

// tallyIndexFrom is how many topics a batch has before the tally looks
// them up in a map instead of comparing each.
const tallyIndexFrom = 8

// newTopicTally returns a tally when the relay has an Observer, else nil.
func (p *pipeline) newTopicTally() *topicTally {
	if p.obs == nil {
		return nil
	}
	return &topicTally{}
}

// at returns topic's entry (InvalidTopic's for an invalid topic), adding
// it if needed.
func (t *topicTally) at(topic string) *TopicCount {
	if t.last < len(t.counts) && t.counts[t.last].Topic == topic {
		return &t.counts[t.last]
	}
	if t.index != nil {
		if i, ok := t.index[topic]; ok {
			t.last = i
			return &t.counts[i]
		}
	} else {
		for i := range t.counts {
			if t.counts[i].Topic == topic {
				t.last = i
				return &t.counts[i]
			}
		}
	}
	if topic != InvalidTopic && outbox.ValidateTopic(topic) != nil {
		return t.at(InvalidTopic)
	}
	t.counts = append(t.counts, TopicCount{Topic: topic})
	t.last = len(t.counts) - 1
	switch {
	case t.index != nil:
		t.index[topic] = t.last
	case len(t.counts) >= tallyIndexFrom:
		t.index = make(map[string]int, 2*len(t.counts))
		for i := range t.counts {
			t.index[t.counts[i].Topic] = i
		}
	}
	return &t.counts[t.last]
}

// add counts n rows of topic with outcome o.
func (t *topicTally) add(topic string, o tallied, n int) {
	if t == nil || n == 0 {
		return
	}
	c := t.at(topic)
	switch o {
	case tallySent:
		c.Sent += n
	case tallyRetried:
		c.Retried += n
	case tallyFailed:
		c.Failed += n
	case tallyReleased:
		c.Released += n
	case tallyAbandoned:
		c.Abandoned += n
	}
}

// result returns the per-topic counts of a batch whose outcome res was
// recorded: each write-back's fenced rows (its intended count less what
// it recorded) are moved from its outcome to Fenced, and Claimed is the
// sum of every outcome. nil for a nil tally.
func (t *topicTally) result(res BatchResult) []TopicCount {
	if t == nil {
		return nil
	}
	steps := []struct {
		recorded int
		field    func(*TopicCount) *int
	}{
		{res.Sent, func(c *TopicCount) *int { return &c.Sent }},
		{res.Retried, func(c *TopicCount) *int { return &c.Retried }},
		{res.Failed, func(c *TopicCount) *int { return &c.Failed }},
		{res.Released, func(c *TopicCount) *int { return &c.Released }},
	}
	for _, s := range steps {
		intended := 0
		for i := range t.counts {
			intended += *s.field(&t.counts[i])
		}
		fenced := min(max(intended-s.recorded, 0), intended)
		if fenced == 0 {
			continue
		}
		shares := shareOut(t.counts, s.field, fenced, intended)
		for i := range t.counts {
			*s.field(&t.counts[i]) -= shares[i]
			t.counts[i].Fenced += shares[i]
		}
	}
	for i := range t.counts {
		c := &t.counts[i]
		c.Claimed = c.Sent + c.Retried + c.Failed + c.Released + c.Fenced + c.Abandoned
	}
	return t.counts
}

// shareOut splits fenced rows among the topics in proportion to their
// intended counts (field), by largest remainder, so that the shares add up
// to fenced and none exceeds its topic's count. When every row of the step
// was fenced, or the step had one topic, the split is exact.
func shareOut(counts []TopicCount, field func(*TopicCount) *int, fenced, intended int) []int {
	shares := make([]int, len(counts))
	rems := make([]int, len(counts))
	given := 0
	for i := range counts {
		n := *field(&counts[i])
		shares[i] = n * fenced / intended
		rems[i] = n * fenced % intended
		given += shares[i]
	}
	for given < fenced {
		best := -1
		for i := range counts {
			if shares[i] < *field(&counts[i]) && (best < 0 || rems[i] > rems[best]) {
				best = i
			}
		}
		shares[best]++
		rems[best] = -1
		given++
	}
	return shares
}

// claimedTopics counts claimed rows by topic, for EventClaimed; nil
// without an Observer.
func (p *pipeline) claimedTopics(rows []store.Row) []TopicCount {
	if p.obs == nil || len(rows) == 0 {
		return nil
	}
	t := &topicTally{}
	for i := range rows {
		t.at(rows[i].Topic).Claimed++
	}
	return t.counts
}
