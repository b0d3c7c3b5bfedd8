// Package faultproxy is a TCP proxy for fault-injection tests. A harness
// starts one on loopback between relay processes and PostgreSQL, or between
// relays and a Kafka-protocol broker, points the relays at Addr, and switches
// faults on and off while traffic flows:
//
//	p, err := faultproxy.Start(pgAddr)
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//
//	p.Stall() // queries hang: nothing is forwarded, nothing is lost
//	p.Heal()  // and then complete
//	p.Cut()   // every connection is reset; new ones are refused until Heal
//
// Whatever the mode and however often it changes, a connection either carries
// its bytes exactly and in order, or is closed: faults delay or sever
// streams, they never drop, duplicate or reorder bytes within one.
package faultproxy
