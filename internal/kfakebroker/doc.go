// Package kfakebroker starts an in-process Kafka-protocol cluster (franz-go's
// kfake) on loopback TCP, for the `relay demo` command and for tests that
// talk to it with a real Kafka client.
//
// kfake is not Apache Kafka: it implements the wire protocol faithfully
// enough for clients (kafka-go, franz-go, librdkafka) to produce, fetch and
// manage topics, and it lets a test intercept any request through
// Cluster().ControlKey. Its state lives in memory unless Options.DataDir is
// set, so a broker closed and started again on the same Port comes back
// empty apart from the Options.Topics it pre-creates.
//
// Typical use in a test:
//
//	b, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"orders"}})
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(b.Close)
//	addrs := b.Addrs() // "127.0.0.1:port", ready for a client
package kfakebroker
