package bench

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// activitySQL lists the relays' backends that are idle: their query is the
// last statement they ran, query_start its start and state_change its end.
// Each row also carries the age of the oldest transaction holding a
// snapshot or a transaction id in the database (a row of NULLs but for it
// when no relay backend is idle): while such a transaction runs, dead
// index entries cannot be marked dead and every claim visits their heap
// tuples. (A transaction idle between statements holds no snapshot, but
// one that wrote holds back the horizon by its id.)
const activitySQL = `SELECT a.pid,
       a.query_start,
       extract(epoch FROM a.state_change - a.query_start) * 1000,
       left(a.query, 200),
       o.oldest
FROM (SELECT (` + oldestXactSQL + `) AS oldest) AS o
LEFT JOIN pg_stat_activity AS a
    ON a.application_name = ANY($1)
   AND a.state = 'idle'
   AND a.query_start IS NOT NULL
   AND a.state_change IS NOT NULL`

// statementKey tells one statement of one backend apart from the next.
type statementKey struct {
	pid   int
	start time.Time
}

// sampler reads pg_stat_activity periodically and records the duration of
// every statement of the relays it finds finished. A statement is seen
// when a sample falls between its end and the backend's next statement,
// so the chance depends on the gap that follows it, not on its duration.
type sampler struct {
	pool     *pgxpool.Pool
	appNames []string
	enabled  bool
	cancel   context.CancelFunc
	done     chan struct{}

	mu         sync.Mutex
	seen       map[statementKey]struct{}
	baseline   bool // the first sample only marks what ran before
	queries    int  // samples taken: the sampler's own transactions
	statements int
	oldestXact float64 // seconds, the largest seen
	oldestAt   []oldestReading
	claimMS    []float64
	markSentMS []float64
}

// startSampler samples every interval until finish; a negative interval
// returns a sampler that records nothing.
func startSampler(ctx context.Context, pool *pgxpool.Pool, appNames []string, interval time.Duration) *sampler {
	s := &sampler{pool: pool, appNames: appNames, enabled: interval >= 0, baseline: true, done: make(chan struct{}), seen: map[statementKey]struct{}{}}
	ctx, s.cancel = context.WithCancel(ctx)
	if interval < 0 {
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			s.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// sample takes one reading; errors are dropped (a missed sample is only a
// smaller sample). The statements of the first reading ran before the
// sampler started: they are remembered, not counted.
func (s *sampler) sample(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries++
	rows, err := s.pool.Query(ctx, activitySQL, s.appNames)
	if err != nil {
		return
	}
	defer rows.Close()
	var (
		pid    *int
		start  *time.Time
		ms     *float64 // NULL, like pid, start and query, when no relay backend is idle
		oldest float64
		query  *string
	)
	baseline := s.baseline
	s.baseline = false
	at, reading := time.Now(), 0.0
	defer func() {
		if reading > 0 {
			s.oldestAt = append(s.oldestAt, oldestReading{at: at.Round(0), seconds: reading})
		}
	}()
	for rows.Next() {
		if rows.Scan(&pid, &start, &ms, &query, &oldest) != nil {
			return
		}
		s.oldestXact = max(s.oldestXact, oldest)
		reading = max(reading, oldest)
		if pid == nil || start == nil || query == nil || ms == nil {
			continue
		}
		k := statementKey{pid: *pid, start: *start}
		if _, dup := s.seen[k]; dup {
			continue
		}
		s.seen[k] = struct{}{}
		if baseline {
			continue
		}
		s.statements++
		switch {
		case strings.HasPrefix(strings.TrimSpace(*query), "WITH picked AS"):
			s.claimMS = append(s.claimMS, *ms)
		case strings.Contains(*query, "SET status = 'sent'"):
			s.markSentMS = append(s.markSentMS, *ms)
		}
	}
}

// oldestReading is the age of the oldest transaction at one reading, when
// there was one.
type oldestReading struct {
	at      time.Time // wall clock
	seconds float64
}

// samples is what a sampler recorded.
type samples struct {
	enabled             bool
	queries             int // readings of pg_stat_activity taken
	statements          int // distinct statements of the relays seen
	oldestXact          float64
	oldestAt            []oldestReading
	claimMS, markSentMS []float64
}

// finish stops the sampler and returns what it recorded. It may be called
// more than once.
func (s *sampler) finish() samples {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return samples{enabled: s.enabled, queries: s.queries, statements: s.statements,
		oldestXact: s.oldestXact, oldestAt: s.oldestAt, claimMS: s.claimMS, markSentMS: s.markSentMS}
}
