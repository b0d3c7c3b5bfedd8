package kafka

import kafkago "github.com/segmentio/kafka-go"

// newBalancer returns kafka-go's balancer for a validated Partitioner name.
func newBalancer(name string) kafkago.Balancer {
	switch name {
	case PartitionerCRC32:
		return kafkago.CRC32Balancer{}
	case PartitionerFNV1a:
		return &kafkago.Hash{}
	case PartitionerRoundRobin:
		return &kafkago.RoundRobin{}
	default:
		return kafkago.Murmur2Balancer{}
	}
}
