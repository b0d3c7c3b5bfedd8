package pgstore

import (
	"embed"
	"strings"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the texts of the relay's statements for one table, each
// named for its file in sql/.
type statements struct {
	claim                                                      string
	markSent, markRetry, markFailed, release, extend, countDue string
	// markSentByTID is markSent by the tuple ids a claim returned
	// (Store.MarkSent).
	markSentByTID                                              string
	claimLocked, lockedSent, lockedRetry, lockedFailed         string
	shardCount, shardCreate, leaseShard, handBack, extendShard string
	// The ordered claim's steps (ordered_claim.go) and write-back.
	orderedHead, orderedBuckets, orderedTake, recordOrdered, recordOrderedRetried string
	claimJob, deleteSent, recordBatch, finishJob, mayVacuum, vacuum               string
	backlog, backlogEstimate                                                      string
	dueKeyless                                                                    string
	lookBelow                                                                     string
}

// loadStatements reads the statements for table. read records each file
// it reads, for the test that every file is used.
func loadStatements(table outbox.Table, read func(file string)) statements {
	names := strings.NewReplacer("{{table}}", table.Ident(), "{{shards}}", table.Related("shard_ranges"), "{{jobs}}", table.Related("jobs"))
	raw := func(name string) string {
		if read != nil {
			read(name)
		}
		b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
		if err != nil {
			panic(err) // embedded: a missing file is a build mistake
		}
		return string(b)
	}
	text := func(q string) string { return names.Replace(store.StripComments(q)) }
	file := func(name string) string { return text(raw(name)) }
	return statements{
		claim:    file("claim"),
		markSent: file("mark_sent"), markSentByTID: file("mark_sent_by_tid"), markRetry: file("mark_retry"), markFailed: file("mark_failed"),
		release: file("release"), extend: file("extend"), countDue: file("count_due"),
		claimLocked: file("claim_locked"), lockedSent: file("locked_sent"), lockedRetry: file("locked_retry"), lockedFailed: file("locked_failed"),
		shardCount: file("shard_count"), shardCreate: file("shard_create"), leaseShard: file("lease_shard"),
		handBack: file("hand_back"), extendShard: file("extend_shard"),
		orderedHead: file("ordered_head"), orderedBuckets: file("ordered_buckets"), orderedTake: file("ordered_take"),
		recordOrdered: file("record_ordered"), recordOrderedRetried: file("record_ordered_retried"),
		claimJob: file("claim_job"), deleteSent: file("delete_sent"), recordBatch: file("record_batch"),
		finishJob: file("finish_job"), mayVacuum: file("may_vacuum"), vacuum: file("vacuum"),
		backlog: file("backlog"), backlogEstimate: file("backlog_estimate"), dueKeyless: file("due_keyless"),
		lookBelow: file("look_below"),
	}
}
