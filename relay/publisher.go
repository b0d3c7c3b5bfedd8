package relay

import "github.com/outboxrelay/outboxrelay/publishers"

// keyBatches reports whether p declares publishers.KeyBatcher and answers
// true.
func keyBatches(p publishers.Publisher) bool {
	kb, ok := p.(publishers.KeyBatcher)
	return ok && kb.KeyBatches()
}
