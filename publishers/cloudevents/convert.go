package cloudevents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// HeaderContentType is the message header that carries datacontenttype
// in binary mode and application/cloudevents+json in structured mode. An
// event's own content type is read from it in any case (Content-Type).
const HeaderContentType = "content-type"

// ContentTypeStructured is the content type of a structured event.
const ContentTypeStructured = "application/cloudevents+json"

// HeaderAttributePrefix starts the event headers that set an attribute:
// ce-type sets type.
const HeaderAttributePrefix = "ce-"

// relayOwned are the attributes the relay sets, which ce- headers may not.
var relayOwned = map[string]bool{"id": true, "specversion": true, "datacontenttype": true, "data": true}

// core are the names of the spec's own attributes: a plain header of one
// of these names is no extension (ce-NAME sets the attribute).
var core = map[string]bool{"id": true, "source": true, "specversion": true, "type": true, "datacontenttype": true,
	"dataschema": true, "subject": true, "time": true, "data": true}

// Convert returns m as the CloudEvent c.Mode calls for (m itself when the
// mode is off), or an error when m's headers ask for an invalid event.
// m is not changed.
func (c Config) Convert(m outbox.Message) (outbox.Message, error) {
	if !c.Mode.On() {
		return m, nil
	}
	attrs := map[string]string{"specversion": "1.0", "id": m.ID.String(), "source": c.source(), "type": m.Topic}
	if text(m.Key) {
		attrs["subject"] = string(m.Key)
	}
	if !m.CreatedAt.IsZero() {
		attrs["time"] = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	headers := make(map[string]string, len(m.Headers)+len(attrs)+2)
	contentType := ""
	for name, value := range m.Headers {
		lower := strings.ToLower(name)
		attr, isAttr := strings.CutPrefix(lower, HeaderAttributePrefix)
		switch {
		case lower == HeaderContentType:
			contentType = value
		case isAttr && (!validName(attr) || relayOwned[attr]):
			return m, fmt.Errorf("event %s: header %s: %q is not an attribute an event may set (a-z and 0-9, at most 20 characters; not id, specversion, datacontenttype)", m.ID, name, attr)
		case isAttr && value == "":
			return m, fmt.Errorf("event %s: header %s is empty: an attribute must not be", m.ID, name)
		case isAttr && attr == "time":
			if _, err := time.Parse(time.RFC3339Nano, value); err != nil {
				return m, fmt.Errorf("event %s: header %s: %q is not an RFC 3339 time", m.ID, name, value)
			}
			attrs[attr] = value
		case isAttr:
			attrs[attr] = value
		default:
			headers[name] = value
			if validName(name) && !core[name] {
				attrs[name] = value // an extension; the header stays too
			}
		}
	}
	if contentType != "" {
		attrs["datacontenttype"] = contentType
	}
	out := m
	out.Headers = headers
	if c.Mode == ModeBinary {
		for name, value := range attrs {
			if name == "datacontenttype" {
				continue
			}
			if c.Binding.PercentEncode {
				value = percentEncode(value)
			}
			headers[c.Binding.Prefix+name] = value
		}
		if contentType != "" {
			headers[HeaderContentType] = contentType
		}
		return out, nil
	}
	payload, err := envelope(attrs, m.Payload)
	if err != nil {
		return m, fmt.Errorf("event %s: %w", m.ID, err)
	}
	out.Payload = payload
	headers[HeaderContentType] = ContentTypeStructured
	return out, nil
}

// envelope returns the JSON event format of attrs and payload: payload as
// data when it is JSON, as data_base64 otherwise, neither when empty.
func envelope(attrs map[string]string, payload []byte) ([]byte, error) {
	event := make(map[string]any, len(attrs)+1)
	for name, value := range attrs {
		event[name] = value
	}
	switch {
	case len(payload) == 0:
	case isJSON(attrs["datacontenttype"]) && json.Valid(payload):
		event["data"] = json.RawMessage(payload)
	default:
		event["data_base64"] = base64.StdEncoding.EncodeToString(payload)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(event); err != nil {
		return nil, fmt.Errorf("JSON event format: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// isJSON reports whether contentType is JSON: absent (the JSON format
// then assumes application/json), application/json, or any */*+json.
func isJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json"))
}

// validName reports whether name is a valid attribute name: 1 to 20
// characters of a-z and 0-9.
func validName(name string) bool {
	if name == "" || len(name) > 20 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// text reports whether key can be the subject: non-empty valid UTF-8
// without control characters or white space at its ends, which every
// sink's headers carry intact.
func text(key []byte) bool {
	if len(key) == 0 || !utf8.Valid(key) || strings.TrimSpace(string(key)) != string(key) {
		return false
	}
	for _, r := range string(key) {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// percentEncode encodes v as the HTTP binding's header values are (3.1.3.2):
// each byte of a space, '"', '%' or outside printable ASCII as %XX.
func percentEncode(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
