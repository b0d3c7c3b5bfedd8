package admin

import "testing"

func TestPattern(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want, class string }{
		{
			in:    `permanent: kafka: topic "orders": event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a77: message of 1048577 bytes exceeds MaxMessageBytes (1048576): MESSAGE_TOO_LARGE`,
			want:  `permanent: kafka: topic <q>: event <id>: message of <n> bytes exceeds MaxMessageBytes (<n>): MESSAGE_TOO_LARGE`,
			class: "permanent",
		},
		{
			in:    `attempt 5 of 5: webhook: POST http://127.0.0.1:43117/hooks/orders: event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a77: timed out (10s): context deadline exceeded`,
			want:  `attempt <n> of <n>: webhook: POST http://<addr>/hooks/orders: event <id>: timed out (<n>): context deadline exceeded`,
			class: "exhausted",
		},
		{
			in:    `parked: nats: publish to orders.eu: dial tcp [::1]:4222: connect: connection refused after 1m30.5s`,
			want:  `parked: nats: publish to orders.eu: dial tcp <addr>: connect: connection refused after <n>`,
			class: "parked",
		},
		{
			in:    `permanent: no route for the topic "audit.x": add a --route rule for it (or a catch-all "*=SINK")`,
			want:  `permanent: no route for the topic <q>: add a --route rule for it (or a catch-all <q>)`,
			class: "permanent",
		},
		{
			in:    `malformed row: headers are not a JSON object of string values: invalid character 'x' looking for beginning of value`,
			want:  `malformed row: headers are not a JSON object of string values: invalid character <q> looking for beginning of value`,
			class: "malformed",
		},
		{
			in:    `event too large: 2097152 bytes of payload, key and headers exceed the limit of 1048576 (MaxEventBytes); the relay did not read them`,
			want:  `event too large: <n> bytes of payload, key and headers exceed the limit of <n> (MaxEventBytes); the relay did not read them`,
			class: "too large",
		},
		{
			in:    `attempt 7 exceeds max attempts 5: earlier claims ended without a recorded outcome (relay died or lost its lease), or max attempts was lowered`,
			want:  `attempt <n> exceeds max attempts <n>: earlier claims ended without a recorded outcome (relay died or lost its lease), or max attempts was lowered`,
			class: "rescued",
		},
		{
			// Hex ids, 0x values and sizes with units; a short hex-like
			// word and an apostrophe inside a word stay.
			in:    "redis: XADD stream `orders`: trace 4bf92f3577b34da6a3ce929d0e0e4736 at 0x1f, 12MiB used, can't add b2c",
			want:  "redis: XADD stream <q>: trace <id> at <id>, <n> used, can't add b2c",
			class: "other",
		},
	} {
		if got := Pattern(c.in); got != c.want {
			t.Errorf("Pattern(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		if got := ErrorClass(c.in); got != c.class {
			t.Errorf("ErrorClass(%q) = %q, want %q", c.in, got, c.class)
		}
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a := Fingerprint("orders", `attempt 5 of 5: webhook: POST http://10.0.0.7:8080/hooks: event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a77: 503 Service Unavailable`)
	if !fingerprintRe.MatchString(a) {
		t.Fatalf("Fingerprint = %q, want 16 hex digits", a)
	}
	same := Fingerprint("orders", `attempt 8 of 8: webhook: POST http://10.0.0.9:8081/hooks: event 0191f2a4-0000-7b21-9a4f-2f5d9c1e8a78: 502 Service Unavailable`)
	if same != a {
		t.Errorf("errors differing only in numbers, addresses and ids: fingerprints %s and %s, want one", a, same)
	}
	for name, fp := range map[string]string{
		"another topic": Fingerprint("payments", `attempt 5 of 5: webhook: POST http://10.0.0.7:8080/hooks: event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a77: 503 Service Unavailable`),
		"another class": Fingerprint("orders", `parked: webhook: POST http://10.0.0.7:8080/hooks: event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a77: 503 Service Unavailable`),
		"another cause": Fingerprint("orders", `attempt 5 of 5: webhook: POST http://10.0.0.7:8080/hooks: event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a77: 500 Internal Server Error`),
		"another sink":  Fingerprint("orders", `attempt 5 of 5: kafka: POST http://10.0.0.7:8080/hooks: event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a77: 503 Service Unavailable`),
	} {
		if fp == a {
			t.Errorf("%s: same fingerprint %s", name, fp)
		}
	}
}
