package metrics

import (
	"sync"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/relay"
)

// DefaultMaxTopics is the default of Options.MaxTopics.
const DefaultMaxTopics = 100

// Topic label values that are not a topic. Neither can be one: both hold
// bytes outside a topic's [a-zA-Z0-9._-].
const (
	// OtherTopic counts the topics beyond Options.MaxTopics.
	OtherTopic = "<other>"
	// InvalidTopic counts the rows whose topic is invalid
	// (relay.InvalidTopic: they fail as malformed), and the messages a
	// wrapped sink is given whose topic is empty or not valid UTF-8.
	InvalidTopic = relay.InvalidTopic
)

// topicLabels gives the topic label values of one metric: the first
// limit topics seen are their own label, later ones share OtherTopic, and
// an empty topic or one that is not valid UTF-8 (client_golang panics on
// such a label value) is InvalidTopic. Safe for concurrent use; callers
// cache the series of each label, and ask again only for a topic not
// cached.
type topicLabels struct {
	limit int
	mu    sync.Mutex
	seen  map[string]struct{} // the topics that are their own label
}

func newTopicLabels(limit int) *topicLabels {
	return &topicLabels{limit: limit, seen: make(map[string]struct{})}
}

// of returns topic's label value.
func (l *topicLabels) of(topic string) string {
	switch {
	case topic == "" || !utf8.ValidString(topic):
		return InvalidTopic
	case topic == InvalidTopic || topic == OtherTopic:
		return topic
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[topic]; !ok {
		if len(l.seen) >= l.limit {
			return OtherTopic
		}
		l.seen[topic] = struct{}{}
	}
	return topic
}
