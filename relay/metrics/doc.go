// Package metrics exports what a relay does as Prometheus metrics.
//
// Three parts, each optional:
//
//   - New returns a *Metrics, a relay.Observer: set it as
//     relay.Config.Observer and it counts events by topic and outcome,
//     times claims and write-backs, and follows lease losses, the
//     janitor, the relay's sink outages and the ordered shards it holds.
//   - Metrics.Publisher wraps a sink (a publishers.Publisher) and measures it:
//     messages by topic and result, the duration and size of each
//     Publish, the age of each event when the sink acknowledged it, and
//     whether the sink is in an outage as its own calls see it. Wrap each
//     sink under its own name; a wrapped sink that can be probed still can.
//   - Metrics.WatchBacklog reads the table's backlog in the background
//     (relay.Relay.Backlog): rows by state, the age of the oldest due row
//     and, with ordered delivery, the keys blocked at the head of line. It
//     runs every interval, not per scrape, under a statement timeout. Its
//     gauges carry a table label (BacklogOptions.Table): a process serving
//     several tables runs one WatchBacklog per table on one Metrics.
//
// The metric names, types and labels are listed in docs/operations.md and
// in the help text of each metric. Topic labels are bounded: the first
// Options.MaxTopics topics get their own, later ones share OtherTopic, and
// rows rejected for their topic are counted under InvalidTopic. Register
// the Go and process collectors (prometheus/collectors) yourself if you
// want them; relay run does.
//
// Observing costs a few map lookups and atomic adds per batch, not per
// event; the Publisher wrapper adds one histogram observation per
// acknowledged message (the age at publish). relay run measured no
// difference in throughput beyond noise (docs/operations.md).
package metrics
