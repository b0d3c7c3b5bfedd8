// Package chaos is the relay's fault-injection harness: real `relay run`
// processes, a producer writing events in real transactions (some rolled
// back), faults from a seeded schedule, and an independent checker
// (internal/history) that compares the producer's record of committed
// transactions with what a consumer read back from the sink.
//
// The sink is Kafka unless OUTBOX_CHAOS_SINK names another sink of the
// registry (internal/sinks) that can be read back: kinesis, mqtt, nats,
// pubsub, rabbitmq, redis, sqs, webhook. The relays publish with the sink of `relay run --sink`, its
// flags pointing at the broker fault proxy; the sink's Reader prepares the
// run's two topics (chaos.ordered and chaos.plain with a suffix unique to
// the run, chaos.ordered.r1a2b3c4d), follows them during the run as a
// consumer would, and reads what is left once the relays have stopped. A
// record's time is the broker's (the producer's, on Kafka), or its arrival
// at the reader where the broker keeps none (RabbitMQ, the webhook
// receiver).
//
// What the harness adds to a sink for its faults is in sink_setup_test.go,
// by sink name (a sink without a setup runs on its flags' defaults, behind
// a proxy of the server its --<sink>-url names, without broker-errors):
//
//	kafka     a kfake broker of the run that advertises its proxy's address and
//	          refuses a share of produce requests (NOT_LEADER_FOR_PARTITION)
//	kinesis   kinesalite, which the Reader starts (internal/emulators)
//	mqtt      a private Mosquitto the Reader starts (internal/emulators)
//	nats      the NATS server (OUTBOX_TEST_NATS_URL, default this machine's)
//	pubsub    the Google client's fake (pstest) in the test process, refusing a
//	          share of publish requests (ResourceExhausted)
//	rabbitmq  the RabbitMQ broker (OUTBOX_TEST_RABBITMQ_URL)
//	redis     the Redis server (OUTBOX_TEST_REDIS_ADDR)
//	sqs       local-aws-sqs, which the Reader starts (internal/emulators), read
//	          directly; the relays reach it through a front that answers a
//	          share of the requests 503
//	webhook   the sink's receiver in the test process, behind a front that
//	          answers a share of the POSTs 503
//
// broker-errors runs against Kafka, Pub/Sub, SQS and the webhook;
// the other brokers have no such switch and leave it out.
//
// The harness owns every component it breaks: a private PostgreSQL server
// (internal/pgserver) it can crash and restart, a kfake broker, and TCP
// fault proxies (internal/faultproxy) between each relay and PostgreSQL and
// between the relays and the broker. The machine's shared PostgreSQL server
// is not touched.
//
// The database is PostgreSQL unless OUTBOX_CHAOS_DB=mariadb: then a
// private mariadbd (internal/mariadbtest) takes its place behind the same
// proxies, the table is created with migrations.UpMySQL, the producer
// writes with outbox.FromMySQL, and each relay runs `relay run
// --database-url mysql://...` as a MariaDB user named for the process, so
// that the harness finds its sessions in the process list. The pg-* faults
// become mariadb-restart (SIGKILL mariadbd, start it again: InnoDB
// recovers), mariadb-cut, mariadb-stall and mariadb-slow. The relay
// refuses lock claims on MySQL and MariaDB, so every relay there takes
// lease claims.
//
// Faults, one at a time, each for a few seconds:
//
//	kill9                SIGKILL a relay while it holds claimed rows; a replacement starts
//	sigterm              SIGTERM a relay while it holds claimed rows; a replacement starts
//	sigterm-broker-stall stall every connection to the broker, SIGTERM a relay while it
//	                     publishes claimed rows into the stall, heal; a replacement starts
//	freeze               SIGSTOP a relay past its lease, then SIGCONT (its write-backs must be fenced)
//	pg-restart           crash-restart PostgreSQL (pg_ctl restart -m immediate)
//	pg-cut               cut one relay's PostgreSQL connections and refuse new ones
//	pg-stall             stall one relay's PostgreSQL connections past its lease
//	pg-slow              delay one relay's PostgreSQL traffic
//	broker-down          cut every connection to the broker and refuse new ones
//	broker-stall         stall every connection to the broker
//	broker-slow          delay every connection to the broker
//	broker-errors        the broker refuses a share of produce requests with retriable errors
//	                     (Kafka and webhook only)
//
// A relay sent SIGTERM (sigterm, sigterm-broker-stall) must exit 0 within
// its --shutdown-timeout + 2s, holding no claimed rows; each exit time is
// logged. After each broker outage (broker-down, broker-stall,
// sigterm-broker-stall) the checker reports the time from the heal to the
// first record produced and until the backlog committed before the heal was
// produced; these are reported, not judged.
//
// Inbox consumers, in every run whose sink has a consumer client (kafka,
// nats, redis; inbox_*_test.go): two instances of one consumer read the
// run's topics with the broker's own client, racing, and apply each
// delivery through the inbox (package inbox) as one row of an effects
// table in the consumer's own database: the schema consumer on the
// private PostgreSQL server (inbox.Handle), or a database of its own on
// the run's mariadbd (inbox.HandleSQL); pg-restart and mariadb-restart
// crash it too. The effects table has no unique key, so that an effect
// applied twice is two rows. After 0.1% of the deliveries (drawn from the
// seed), an instance crashes between the effect's commit and the
// acknowledgement: it drops its client without acknowledging that
// delivery or any after it, and a fresh instance takes its place.
//
//	kafka  consumer group, franz-go; offsets committed after each poll's
//	       records are handled, rebalances blocked meanwhile; a crash
//	       closes the client uncommitted (through the broker proxy, so
//	       broker faults reach the consumers too)
//	nats   durable pull consumer per stream, explicit ack, AckWait 2s; a
//	       crash closes the connection, the server redelivers after AckWait
//	redis  consumer group per stream, XACK after the effect; a crashed
//	       member's pending entries are claimed (XAUTOCLAIM) after 2s idle
//
// Once the relays have stopped, the checker waits until every event the
// sink holds has an effect (or the effects stop growing for 30s), stops
// the consumers, and wants one effect per committed event, at most one per
// event of unknown outcome, none for any other; the summary line's
// "inbox:" part counts them, with the duplicate deliveries the inbox
// absorbed and the crashes.
//
// Profiles: short (the default; every kind once, about a minute, run by
// `make test` and CI) and long (`make chaos`: random faults for
// OUTBOX_CHAOS_DURATION, default 10m). OUTBOX_CHAOS_SEED replays a run's
// schedule and random choices; the test logs the seed it used.
//
//	go test -count=1 -v -run TestChaos ./integration/chaos
//	OUTBOX_CHAOS_SINK=nats go test -count=1 -v -run TestChaos ./integration/chaos
//	OUTBOX_CHAOS_DB=mariadb go test -count=1 -v -run TestChaos ./integration/chaos
//	OUTBOX_CHAOS_PROFILE=long OUTBOX_CHAOS_SEED=42 go test -count=1 -v -timeout 60m -run TestChaos ./integration/chaos
package chaos
