package relay

import "testing"

// Every bucket belongs to exactly one shard, for every shard count: the
// shard bucket * shards / Buckets names, and the shards' ranges cover the
// buckets in order with no gap or overlap.
func TestBucketsOfCoverEveryBucketOnce(t *testing.T) {
	for shards := 1; shards <= Buckets; shards++ {
		next := 0
		for shard := range shards {
			b := bucketsOf(shard, shards)
			if len(b) == 0 {
				t.Fatalf("%d shards: shard %d has no bucket", shards, shard)
			}
			for _, x := range b {
				if int(x) != next {
					t.Fatalf("%d shards: shard %d holds bucket %d, want %d next", shards, shard, x, next)
				}
				if got := int(x) * shards / Buckets; got != shard {
					t.Fatalf("%d shards: bucket %d is in the range of shard %d, but maps to %d", shards, x, shard, got)
				}
				next++
			}
		}
		if next != Buckets {
			t.Fatalf("%d shards: the ranges end at bucket %d, want %d", shards, next, Buckets)
		}
	}
}

func TestHeadWindowHoldsTheClaim(t *testing.T) {
	for _, limit := range []int{1, 10, 500, 10000} {
		if w := headWindow(limit); w <= limit {
			t.Errorf("headWindow(%d) = %d, want more than the claim", limit, w)
		}
	}
}
