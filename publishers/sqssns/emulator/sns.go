package emulator

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// snsError is an SNS query error.
type snsError struct {
	status    int
	code, msg string
}

func (e *snsError) Error() string { return e.code + ": " + e.msg }

var errNoTopic = &snsError{http.StatusNotFound, "NotFound", "Topic does not exist"}

// serveSNS answers one SNS query request with its XML.
func (s *Server) serveSNS(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	action := r.PostForm.Get("Action")
	result, err := s.sns(action, r.PostForm.Get)
	w.Header().Set("Content-Type", "text/xml")
	if err != nil {
		e, ok := err.(*snsError)
		if !ok {
			e = &snsError{http.StatusInternalServerError, "InternalError", err.Error()}
		}
		w.WriteHeader(e.status)
		fmt.Fprintf(w, "<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>0</RequestId></ErrorResponse>", e.code, esc(e.msg))
		return
	}
	fmt.Fprintf(w, "<%[1]sResponse><%[1]sResult>%[2]s</%[1]sResult><ResponseMetadata><RequestId>0</RequestId></ResponseMetadata></%[1]sResponse>", action, result)
}

// sns runs one SNS action; form reads its parameters.
func (s *Server) sns(action string, form func(string) string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch action {
	case "CreateTopic":
		name, attrs := form("Name"), entries(form, "Attributes.entry.%d.key", "Attributes.entry.%d.value")
		if !validName(name, 256) || strings.HasSuffix(name, ".fifo") != (attrs["FifoTopic"] == "true") {
			return "", &snsError{http.StatusBadRequest, "InvalidParameter", "invalid topic name " + name}
		}
		if s.ts[name] == nil {
			s.ts[name] = &topic{fifo: strings.HasSuffix(name, ".fifo"), dedup: map[string]time.Time{}}
		}
		return "<TopicArn>" + snsARNPrefix + esc(name) + "</TopicArn>", nil
	case "DeleteTopic":
		delete(s.ts, strings.TrimPrefix(form("TopicArn"), snsARNPrefix))
		return "", nil
	case "ListTopics":
		var b strings.Builder
		for name := range s.ts {
			b.WriteString("<member><TopicArn>" + snsARNPrefix + esc(name) + "</TopicArn></member>")
		}
		return "<Topics>" + b.String() + "</Topics>", nil
	case "Subscribe":
		t, q := s.ts[strings.TrimPrefix(form("TopicArn"), snsARNPrefix)], s.queueNamed(form("Endpoint"))
		raw := entries(form, "Attributes.entry.%d.key", "Attributes.entry.%d.value")["RawMessageDelivery"] == "true"
		switch {
		case t == nil:
			return "", errNoTopic
		case form("Protocol") != "sqs" || q == nil || !raw:
			return "", &snsError{http.StatusBadRequest, "InvalidParameter", "the emulator subscribes existing SQS queues with RawMessageDelivery only"}
		}
		t.queues = append(t.queues, q.name)
		return "<SubscriptionArn>" + form("TopicArn") + ":" + q.name + "</SubscriptionArn>", nil
	case "PublishBatch":
		return s.publishBatch(form)
	}
	return "", &snsError{http.StatusBadRequest, "InvalidAction", "the emulator does not answer " + action}
}

// publishBatch delivers a PublishBatch's entries to the topic's queues.
func (s *Server) publishBatch(form func(string) string) (string, error) {
	t := s.ts[strings.TrimPrefix(form("TopicArn"), snsARNPrefix)]
	if t == nil {
		return "", errNoTopic
	}
	type entry struct {
		id, body, group, dedup string
		attrs                  map[string]Attribute
	}
	var list []entry
	size := 0
	for i := 1; form(fmt.Sprintf("PublishBatchRequestEntries.member.%d.Id", i)) != ""; i++ {
		p := fmt.Sprintf("PublishBatchRequestEntries.member.%d.", i)
		e := entry{id: form(p + "Id"), body: form(p + "Message"), group: form(p + "MessageGroupId"),
			dedup: form(p + "MessageDeduplicationId"), attrs: map[string]Attribute{}}
		for j := 1; form(fmt.Sprintf(p+"MessageAttributes.entry.%d.Name", j)) != ""; j++ {
			a := fmt.Sprintf(p+"MessageAttributes.entry.%d.", j)
			bin, err := base64.StdEncoding.DecodeString(form(a + "Value.BinaryValue"))
			if err != nil {
				return "", &snsError{http.StatusBadRequest, "InvalidParameter", "binary attribute: " + err.Error()}
			}
			e.attrs[form(a+"Name")] = Attribute{DataType: form(a + "Value.DataType"), StringValue: form(a + "Value.StringValue"), BinaryValue: bin}
		}
		size += len(e.body) + attrSize(e.attrs)
		list = append(list, e)
	}
	switch {
	case len(list) == 0 || len(list) > MaxBatchEntries:
		return "", &snsError{http.StatusBadRequest, "TooManyEntriesInBatchRequest", fmt.Sprintf("%d entries", len(list))}
	case size > MaxSNSBatchBytes:
		return "", &snsError{http.StatusBadRequest, "BatchRequestTooLong", fmt.Sprintf("%d bytes", size)}
	}
	var ok, failed strings.Builder
	for _, e := range list {
		if reason := checkEntry(t.fifo, e.group, e.dedup, e.attrs); reason != "" {
			fmt.Fprintf(&failed, "<member><Id>%s</Id><Code>InvalidParameter</Code><Message>%s</Message><SenderFault>true</SenderFault></member>", esc(e.id), esc(reason))
			continue
		}
		m := newMessage(e.body, e.group, e.attrs)
		if !t.fifo || !seen(t.dedup, e.dedup, m.sent) {
			for _, name := range t.queues {
				if q := s.qs[name]; q != nil {
					s.enqueue(q, m, e.dedup)
				}
			}
		}
		fmt.Fprintf(&ok, "<member><Id>%s</Id><MessageId>%s</MessageId></member>", esc(e.id), m.id)
	}
	return "<Successful>" + ok.String() + "</Successful><Failed>" + failed.String() + "</Failed>", nil
}

// entries reads a query map (Attributes.entry.N.key/value) into a map.
func entries(form func(string) string, keyFmt, valueFmt string) map[string]string {
	out := map[string]string{}
	for i := 1; form(fmt.Sprintf(keyFmt, i)) != ""; i++ {
		out[form(fmt.Sprintf(keyFmt, i))] = form(fmt.Sprintf(valueFmt, i))
	}
	return out
}

// esc escapes s for XML text.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
