package mqttsink

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// User properties the sink sets besides the message's headers.
const (
	// AttrKey carries the key when it is valid UTF-8; an empty key is "".
	AttrKey = "outbox-key"
	// AttrKeyBase64 carries any other key, standard base64.
	AttrKeyBase64 = "outbox-key-base64"
	// headerContentType is the header that sets the Content Type property.
	headerContentType = "content-type"
)

// ErrInvalidMessage is wrapped by the permanent error of a message MQTT
// cannot carry intact.
var ErrInvalidMessage = errors.New("mqttsink: invalid message")

// toPublish converts m to a PUBLISH packet at qos.
func toPublish(m *outbox.Message, qos byte) (*paho.Publish, error) {
	switch {
	case m.Topic == "" || len(m.Topic) > 65535 || !utf8.ValidString(m.Topic):
		return nil, fmt.Errorf("%w: topic %q: 1 to 65,535 bytes of UTF-8", ErrInvalidMessage, m.Topic)
	case strings.ContainsAny(m.Topic, "+#\x00"):
		return nil, fmt.Errorf("%w: topic %q: a topic name has no wildcard (+, #) and no NUL", ErrInvalidMessage, m.Topic)
	}
	props := &paho.PublishProperties{}
	for name, value := range m.Headers {
		if name == outbox.HeaderEventID || name == AttrKey || name == AttrKeyBase64 {
			return nil, fmt.Errorf("%w: header %q is reserved", ErrInvalidMessage, name)
		}
		if !utf8.ValidString(name) || !utf8.ValidString(value) {
			return nil, fmt.Errorf("%w: header %q: user properties are UTF-8", ErrInvalidMessage, name)
		}
		props.User.Add(name, value)
		if name == headerContentType {
			props.ContentType = value
		}
	}
	props.User.Add(outbox.HeaderEventID, m.ID.String())
	if m.Key != nil {
		props.User.Add(keyProperty(m.Key))
	}
	return &paho.Publish{QoS: qos, Topic: m.Topic, Payload: m.Payload, Properties: props}, nil
}

// keyProperty returns the user property that carries key.
func keyProperty(key []byte) (string, string) {
	if utf8.Valid(key) {
		return AttrKey, string(key)
	}
	return AttrKeyBase64, base64.StdEncoding.EncodeToString(key)
}

// Key returns the key a message's user properties carry, nil for none.
func Key(props paho.UserProperties) ([]byte, error) {
	for _, p := range props {
		switch p.Key {
		case AttrKey:
			return []byte(p.Value), nil
		case AttrKeyBase64:
			return base64.StdEncoding.DecodeString(p.Value)
		}
	}
	return nil, nil
}
