package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	mqttsink "github.com/outboxrelay/outboxrelay/publishers/mqtt"
	"github.com/outboxrelay/outboxrelay/relay"
)

// mqttSink publishes to an MQTT 5 broker (publishers/mqtt); its flags are
// --mqtt-*.
func init() { register(mqttSink) }

var mqttSink = Sink{
	Name:        "mqtt",
	About:       "MQTT 5, QoS 1 or 2",
	CloudEvents: cloudevents.MQTT,
	Flags: func(f Flags) Settings {
		m := &mqttFlags{}
		m.register(f)
		return m
	},
}

// mqttFlags are the MQTT sink's flags.
type mqttFlags struct {
	cfg mqttsink.Config // built by Check

	url, clientID, username, password string
	qos                               int
	publishTimeout                    time.Duration
}

func (m *mqttFlags) register(f Flags) {
	f.String(&m.url, "mqtt-url", "", "the broker, mqtt://host:port (required)")
	f.Int(&m.qos, "mqtt-qos", mqttsink.DefaultQoS, "1 (PUBACK) or 2 (PUBCOMP)")
	f.String(&m.clientID, "mqtt-client-id", "", "MQTT client id, unique per relay process (default: outboxrelay-HOST-PID-RANDOM)")
	f.String(&m.username, "mqtt-username", "", "MQTT user name")
	f.String(&m.password, "mqtt-password", "", "MQTT password of --mqtt-username (prefer the environment variable; never logged)")
	f.Duration(&m.publishTimeout, "mqtt-publish-timeout", mqttsink.DefaultPublishTimeout, "how long a message waits for its acknowledgement, and a connection attempt")
}

// mqttConfigFlag maps mqttsink.Config fields to the flags that set them.
var mqttConfigFlag = map[string]string{
	"URL": "mqtt-url", "QoS": "mqtt-qos", "ClientID": "mqtt-client-id", "Password": "mqtt-password", "PublishTimeout": "mqtt-publish-timeout",
}

// Check builds the mqttsink.Config and reports every problem of the
// flags, naming each flag.
func (m *mqttFlags) Check(relay.Config) error {
	var errs problems
	m.cfg = mqttsink.Config{URL: m.url, QoS: byte(m.qos), ClientID: m.clientID, Username: m.username, Password: m.password, PublishTimeout: m.publishTimeout}
	reported := map[string]bool{}
	if m.url == "" {
		errs.add(usage("--mqtt-url (%s) is required with --sink mqtt: mqtt://host:port", EnvName("mqtt-url")))
		reported["URL"] = true
	}
	if m.qos != 1 && m.qos != 2 {
		errs.add(invalid("mqtt-qos", fmt.Sprintf("%d is not 1 or 2", m.qos)))
		reported["QoS"] = true
	}
	if m.publishTimeout <= 0 {
		errs.add(invalid("mqtt-publish-timeout", "must be positive"))
		reported["PublishTimeout"] = true
	}
	for _, err := range joined(m.cfg.Validate()) {
		var ce *mqttsink.ConfigError
		switch {
		case !errors.As(err, &ce) || mqttConfigFlag[ce.Field] == "":
			errs.add(usage("invalid MQTT configuration: %v", err))
		case !reported[ce.Field]:
			errs.add(invalid(mqttConfigFlag[ce.Field], ce.Reason))
		}
	}
	return errs.err()
}

// Open returns the MQTT publisher and logs its configuration without the
// password. It does not connect: the first publish or probe does.
func (m *mqttFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	cfg := m.cfg
	cfg.Logger = logger
	p, err := mqttsink.New(cfg)
	if err != nil {
		return nil, err
	}
	logger.Info("mqtt sink", "config", p.Config().String())
	return p, nil
}

// Embed starts a private Mosquitto (internal/emulators) and points
// --mqtt-url at it.
func (m *mqttFlags) Embed() (func(), error) {
	e, err := emulators.Mosquitto()
	if err != nil {
		return nil, err
	}
	m.url = e.Endpoint
	return e.Close, nil
}

// Reader returns a Reader of --mqtt-url; without one it embeds a private
// Mosquitto (Embed).
func (m *mqttFlags) Reader() (Reader, error) {
	r := &mqttReader{f: m, got: map[string][]Record{}, arrived: make(chan struct{})}
	if m.url == "" {
		var err error
		if r.stop, err = m.Embed(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// mqttReader subscribes (QoS 1) to each topic Prepare is given, on one
// connection, and keeps what arrives: MQTT keeps no log, so a Read hands
// over what arrived since Prepare. A Read that does not follow publishes a
// marker and reads until it arrives: a broker forwards a topic's messages
// in the order it took them, so everything acknowledged before is in.
type mqttReader struct {
	f    *mqttFlags
	stop func()
	c    *paho.Client
	mu   sync.Mutex
	got  map[string][]Record
	// arrived is closed, and replaced, at each arrival: every Read waiting
	// wakes.
	arrived chan struct{}
}

// mqttMarker is the user property of a Read's marker message.
const mqttMarker = "outboxrelay-read-marker"

func (r *mqttReader) connect(ctx context.Context) error {
	if r.c != nil {
		return nil
	}
	host, err := mqttsink.Config{URL: r.f.url}.Address()
	if err != nil {
		return fmt.Errorf("mqtt: --mqtt-url %s: %w", r.f.url, err)
	}
	nc, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("cannot reach MQTT at %s (start mosquitto, or pass --mqtt-url): %w", r.f.url, err)
	}
	r.c = paho.NewClient(paho.ClientConfig{Conn: nc, OnPublishReceived: []func(paho.PublishReceived) (bool, error){r.received}})
	_, err = r.c.Connect(ctx, &paho.Connect{ClientID: "outboxrelay-reader-" + uuid.NewString(), CleanStart: true, KeepAlive: 30,
		Username: r.f.username, UsernameFlag: r.f.username != "", Password: []byte(r.f.password), PasswordFlag: r.f.password != ""})
	if err != nil {
		r.c = nil
		_ = nc.Close()
		return fmt.Errorf("mqtt: connect the reader to %s: %w", r.f.url, err)
	}
	return nil
}

// received keeps one arrival.
func (r *mqttReader) received(p paho.PublishReceived) (bool, error) {
	m := p.Packet
	key, _ := mqttsink.Key(m.Properties.User) // a bad key property arrives as a wrong key
	rec := Record{EventID: m.Properties.User.Get(outbox.HeaderEventID), Key: string(key), Payload: string(m.Payload), Time: time.Now()}
	if marker := m.Properties.User.Get(mqttMarker); marker != "" {
		rec.EventID, rec.Payload = "", mqttMarker+marker
	}
	r.mu.Lock()
	rec.Offset = int64(len(r.got[m.Topic]))
	r.got[m.Topic] = append(r.got[m.Topic], rec)
	close(r.arrived)
	r.arrived = make(chan struct{})
	r.mu.Unlock()
	return true, nil
}

// Prepare subscribes to topic.
func (r *mqttReader) Prepare(ctx context.Context, topic string) (string, error) {
	if err := r.connect(ctx); err != nil {
		return "", err
	}
	if _, err := r.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
		return "", fmt.Errorf("mqtt: subscribe to %s: %w", topic, err)
	}
	return fmt.Sprintf("mqtt:     %s, subscribed to topic %s (QoS 1)", r.f.url, topic), nil
}

// Read hands got what arrived at topic since Prepare; with follow it then
// hands each arrival until ctx ends, without, it stops at its marker.
func (r *mqttReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	marker := ""
	if !follow {
		marker = uuid.NewString()
		props := &paho.PublishProperties{}
		props.User.Add(mqttMarker, marker)
		if _, err := r.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte("marker"), Properties: props}); err != nil {
			return fmt.Errorf("mqtt: publish the read marker to %s: %w", topic, err)
		}
	}
	if ready != nil {
		ready()
	}
	for next := 0; ; {
		r.mu.Lock()
		recs, arrived := r.got[topic][next:], r.arrived
		r.mu.Unlock()
		for _, rec := range recs {
			next++
			switch {
			case rec.Payload == mqttMarker+marker:
				return nil
			case strings.HasPrefix(rec.Payload, mqttMarker) && rec.EventID == "":
				continue // another Read's marker
			}
			got(rec)
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			if follow {
				return nil
			}
			return ctx.Err()
		}
	}
}

// Remove unsubscribes from topic; MQTT has nothing to delete.
func (r *mqttReader) Remove(ctx context.Context, topic string) error {
	if r.c == nil {
		return nil
	}
	if _, err := r.c.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{topic}}); err != nil {
		return fmt.Errorf("mqtt: unsubscribe from %s: %w", topic, err)
	}
	return nil
}

// Close disconnects and stops the embedded broker, if any.
func (r *mqttReader) Close() error {
	if r.c != nil {
		_ = r.c.Disconnect(&paho.Disconnect{})
	}
	if r.stop != nil {
		r.stop()
	}
	return nil
}
