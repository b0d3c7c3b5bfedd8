package rabbitmq

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Destination is where a message is published: an exchange and a routing
// key. The empty Exchange is the default exchange, which delivers a
// message to the queue its routing key names.
type Destination struct {
	Exchange   string
	RoutingKey string
}

// String returns the destination as a topic that maps to it:
// "exchange/routing-key", or "/queue" for the default exchange.
func (d Destination) String() string { return d.Exchange + "/" + d.RoutingKey }

// ParseDestination maps a message's topic to its destination:
//
//   - "exchange/routing-key": the topic's text before its first "/" is the
//     exchange and the rest is the routing key ("orders/created.eu" goes to
//     exchange "orders" with routing key "created.eu"; "/invoices" goes to
//     the default exchange, that is to queue "invoices"; "audit/" goes to
//     exchange "audit" with the empty routing key, as a fanout exchange
//     takes it);
//   - a topic without "/" is the routing key, on defaultExchange
//     (Config.Exchange): with the default "" it names the queue.
//
// An exchange name or a routing key is at most 255 bytes of UTF-8 without
// control characters. The default exchange needs a routing key (a queue
// name). The error of an invalid topic wraps ErrInvalidDestination.
func ParseDestination(topic, defaultExchange string) (Destination, error) {
	if topic == "" {
		return Destination{}, fmt.Errorf("%w: the topic is empty", ErrInvalidDestination)
	}
	d := Destination{Exchange: defaultExchange, RoutingKey: topic}
	if exchange, key, ok := strings.Cut(topic, "/"); ok {
		d = Destination{Exchange: exchange, RoutingKey: key}
	}
	if err := validateExchange(d.Exchange); err != nil {
		return Destination{}, fmt.Errorf("%w: topic %q: %w", ErrInvalidDestination, topic, err)
	}
	if err := validateShortString("routing key", d.RoutingKey); err != nil {
		return Destination{}, fmt.Errorf("%w: topic %q: %w", ErrInvalidDestination, topic, err)
	}
	if d.Exchange == "" && d.RoutingKey == "" {
		return Destination{}, fmt.Errorf("%w: topic %q: the default exchange needs a routing key naming a queue", ErrInvalidDestination, topic)
	}
	return d, nil
}

// validateExchange checks an exchange name ("" is the default exchange).
func validateExchange(name string) error {
	return validateShortString("exchange name", name)
}

// validateShortString checks what travels as an AMQP short string: at most
// 255 bytes, here of UTF-8 without control characters.
func validateShortString(what, s string) error {
	switch {
	case len(s) > maxShortString:
		return fmt.Errorf("the %s is %d bytes, longer than %d", what, len(s), maxShortString)
	case !utf8.ValidString(s):
		return fmt.Errorf("the %s is not valid UTF-8", what)
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return fmt.Errorf("the %s holds a control character at byte %d", what, i)
	}
	return nil
}
