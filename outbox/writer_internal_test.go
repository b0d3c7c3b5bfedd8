package outbox

import "testing"

// WriteBatch splits multi-row INSERTs into power-of-two chunks so that a
// connection prepares few statement shapes; the chunks must cover the batch.
func TestChunkSize(t *testing.T) {
	t.Parallel()
	shapes := map[int]bool{}
	for n := 1; n <= 5000; n++ {
		covered := 0
		for covered < n {
			c := chunkSize(n - covered)
			if c < 1 || c > maxChunk || c&(c-1) != 0 || c > n-covered {
				t.Fatalf("chunkSize(%d) = %d: want a power of two in [1, min(%d, remaining)]", n-covered, c, maxChunk)
			}
			shapes[c] = true
			covered += c
		}
	}
	if len(shapes) != 11 {
		t.Errorf("%d statement shapes, want 11 (1..1024)", len(shapes))
	}
	if got := chunkSize(1000); got != 512 {
		t.Errorf("chunkSize(1000) = %d, want 512", got)
	}
}
