package rabbitmq

import (
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// An event's content-type header, in any case, is also the message's
// content_type property (the AMQP binding's datacontenttype); without one
// the property is empty.
func TestContentTypeProperty(t *testing.T) {
	m := outbox.Message{ID: uuid.New(), Topic: "t", Headers: map[string]string{"Content-Type": "application/cloudevents+json"}}
	p, err := toPublishing(&m)
	if err != nil || p.ContentType != "application/cloudevents+json" || p.Headers["Content-Type"] != "application/cloudevents+json" {
		t.Errorf("ContentType %q, headers %v, %v", p.ContentType, p.Headers, err)
	}
	m.Headers = nil
	if p, _ := toPublishing(&m); p.ContentType != "" {
		t.Errorf("ContentType %q without a header", p.ContentType)
	}
}
