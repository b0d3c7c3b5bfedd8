package relay

import "time"

// Observer is told what a relay does, as it happens: claims, publishes,
// recorded outcomes, leases lost, sink outages, janitor runs and shard
// hand-backs. Metrics, traces and test harnesses attach here
// (Config.Observer).
//
// Observe is called synchronously from the relay's loops, from several
// goroutines at once: it must be safe for concurrent use, return quickly
// and never block. The Event is passed by value; keep what you need of it.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event, and the fields each sets.
const (
	// EventClaimed: a claim statement ran. Rows is how many rows it took
	// (0 for a claim that found nothing), Duration its time, Claim the
	// kind of claim.
	EventClaimed EventKind = iota + 1
	// EventPublished: a batch's messages were handed to the sink and
	// Publish returned (or was abandoned). Rows is how many messages,
	// Duration the time in Publish (all rounds, for an ordered batch).
	EventPublished
	// EventRecorded: a batch's outcome was written. Result counts it,
	// Duration is the write-back's time.
	EventRecorded
	// EventLeaseLost: a lease renewal found Rows of a batch held by
	// another claim by then: they may be published twice.
	EventLeaseLost
	// EventOutageStarted: the sink was found down (Err), and Rows rows
	// deferred by the batch that found it.
	EventOutageStarted
	// EventOutageEnded: the sink answered again after Duration; Rows rows
	// were deferred during the outage.
	EventOutageEnded
	// EventJanitorRan: a retention run ended, having deleted Rows sent rows
	// in Duration.
	EventJanitorRan
	// EventShardHandedBack: an ordered shard (Shard) was handed back after
	// Rows rows were claimed from it.
	EventShardHandedBack
	// EventShardLeased: the relay's ordered loop leased a shard (Shard);
	// an EventShardHandedBack follows when it is done with it.
	EventShardLeased
)

// String returns the kind's name, e.g. "claimed".
func (k EventKind) String() string {
	switch k {
	case EventClaimed:
		return "claimed"
	case EventPublished:
		return "published"
	case EventRecorded:
		return "recorded"
	case EventLeaseLost:
		return "lease_lost"
	case EventOutageStarted:
		return "outage_started"
	case EventOutageEnded:
		return "outage_ended"
	case EventJanitorRan:
		return "janitor_ran"
	case EventShardHandedBack:
		return "shard_handed_back"
	case EventShardLeased:
		return "shard_leased"
	}
	return "unknown"
}

// Event is one thing a relay did; Kind says which fields are set.
type Event struct {
	Kind EventKind
	// Claim is how the batch was claimed: ClaimLease, ClaimLock, or
	// ClaimOrdered for a shard's batch. Set on claim, publish and record
	// events.
	Claim ClaimMode
	// Rows counts the rows or messages the event concerns.
	Rows int
	// Duration is how long the step took.
	Duration time.Duration
	// Result is a recorded batch's outcome (EventRecorded).
	Result BatchResult
	// Err describes the sink's error (EventOutageStarted).
	Err string
	// Shard is the ordered shard (EventShardLeased, EventShardHandedBack).
	Shard int
	// Topics breaks Rows (EventClaimed) or Result (EventRecorded) down by
	// topic, one entry per topic of the batch, in order of first
	// appearance. On EventClaimed only Claimed is set. On EventRecorded
	// Fenced is exact per topic when the rows of each write-back that
	// found some of its rows held by another claim all had one topic;
	// otherwise the fenced rows of that write-back are shared among its
	// topics in proportion to their rows (the statement reports a count,
	// not which rows). Rows whose topic is invalid are counted under
	// InvalidTopic. The relay computes it only when an Observer is set.
	Topics []TopicCount
}

// BatchResult counts what happened to one claimed batch.
type BatchResult struct {
	// Claimed is the number of rows taken.
	Claimed int
	// Sent, Retried, Failed and Released count rows whose outcome was
	// recorded. Retried rows wait for a later attempt; those deferred
	// because the sink was unavailable got their attempt back, and so did
	// Released rows, which are claimable again at once.
	Sent, Retried, Failed, Released int
	// Fenced counts rows whose outcome was not recorded because another
	// claim held them by then.
	Fenced int
	// Abandoned counts rows whose publish did not return within half a
	// second of its deadline (PublishTimeout, or ShutdownTimeout after
	// cancellation): the sink may still be sending them, so they keep
	// their lease and return when it ends. Claimed = Sent + Retried +
	// Failed + Released + Fenced + Abandoned.
	Abandoned int
	// SinkUnavailable is true when the sink took none of the batch and not
	// because of the messages: it is down. The batch's rows went back to
	// pending, due at once, without spending an attempt; Run claims none
	// until the sink answers again.
	SinkUnavailable bool
	// Backoff is, when SinkUnavailable, how long to wait before trying the
	// sink again with a batch; it grows with each consecutive outage batch,
	// from OutageBackoffMin up to OutageBackoffMax.
	Backoff time.Duration
}

// TopicCount is what a batch did with the rows of one topic: the
// per-topic share of a BatchResult.
type TopicCount struct {
	Topic                                                       string
	Claimed, Sent, Retried, Failed, Released, Fenced, Abandoned int
}

// ClaimOrdered marks the events of ordered batches (Event.Claim); it is
// not a Config.Claim value.
const ClaimOrdered ClaimMode = "ordered"

// Observers returns an Observer that passes each event to each of obs in
// turn; nil ones are left out. With none left it returns nil, so that
// Config.Observer stays unset and observing costs nothing.
func Observers(obs ...Observer) Observer {
	var all multiObserver
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return all
}

// multiObserver is what Observers returns for several observers.
type multiObserver []Observer

// Observe passes e to each observer.
func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}
