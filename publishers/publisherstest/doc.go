// Package publisherstest is the conformance suite every sink runs: one call
// to Run, from the sink's own tests, against its real broker.
//
// A sink's test supplies a Harness: a constructor of a fresh publisher, a
// fresh destination (a topic that accepts messages), a way to read back
// what arrived there, hooks for the faults it can be put through, and
// Features, which declare what the sink promises. Run then checks the
// contract stated in package publishers:
//
//   - every message Publish acknowledged is readable at once, exactly once,
//     even when the broker is cut off the moment Publish returns
//     (Features.DurableAcks);
//   - key, payload bytes, headers and the event id arrive intact, for
//     keyed and unkeyed, text and binary messages;
//   - one key's messages in one Publish arrive in their order
//     (Features.KeyOrder), in small batches, large ones and concurrent ones;
//   - a sink that takes a key's whole run in one call (publishers.KeyBatcher,
//     Features.KeyBatches) never delivers a key's later message without
//     its earlier ones, wherever a cut off broker interrupts the call;
//   - per-message errors land on the right message, are permanent, and the
//     other messages of the batch arrive (Features.PerMessageErrors);
//   - a message over the size limit is permanent and fails alone
//     (Features.MaxMessageBytes);
//   - an ended context makes Publish fail at once and send nothing; a
//     deadline or a cancellation ends a Publish stuck on a silent broker
//     within a bound, and Close returns within a bound meanwhile
//     (Features.Stall);
//   - a broker that goes away makes every message unavailable (never
//     permanent), Probe says so (Features.Prober), and once it is back
//     Probe and Publish succeed (Features.Outage).
//
// A subtest is skipped only when the sink declares that it lacks the
// feature the subtest checks; the skip message says so. Everything else
// always runs. Subtests run in parallel, except those that put the broker
// through faults: they run one at a time, before the others resume, so
// that a fault never reaches another subtest's publisher.
//
// Typical use, in the sink's package:
//
//	func TestConformance(t *testing.T) {
//		b := startBroker(t)
//		publisherstest.Run(t, publisherstest.Harness{
//			Name:     "mysink",
//			Features: publisherstest.Features{DurableAcks: true, KeyOrder: true},
//			New:      func(t *testing.T) publishers.Publisher { return mysink.New(b.Addr()) },
//			Topic:    func(t *testing.T) string { return b.NewTopic(t) },
//			Read:     func(t *testing.T, topic string) []publisherstest.Record { return b.Read(t, topic) },
//		})
//	}
package publisherstest
