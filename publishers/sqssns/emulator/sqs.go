package emulator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sqsError is an SQS JSON error: its __type and message.
type sqsError struct {
	status int
	code   string
	msg    string
}

func (e *sqsError) Error() string { return e.code + ": " + e.msg }

var errNoQueue = &sqsError{http.StatusBadRequest, "QueueDoesNotExist", "The specified queue does not exist."}

// sqsEntry is one SendMessageBatch entry.
type sqsEntry struct {
	ID                     string `json:"Id"`
	MessageBody            string
	MessageGroupID         string `json:"MessageGroupId"`
	MessageDeduplicationID string `json:"MessageDeduplicationId"`
	MessageAttributes      map[string]Attribute
}

// sqsRequest holds the fields of every SQS request the emulator answers.
type sqsRequest struct {
	QueueName           string
	QueueURL            string `json:"QueueUrl"`
	Attributes          map[string]string
	Entries             []sqsEntry
	MaxNumberOfMessages int
	WaitTimeSeconds     int
}

// serveSQS answers one SQS JSON 1.0 request.
func (s *Server) serveSQS(w http.ResponseWriter, r *http.Request, op string) {
	var req sqsRequest
	var out any
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		err = &sqsError{http.StatusBadRequest, "InvalidParameterValue", err.Error()}
	} else {
		out, err = s.sqs(r, op, &req)
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if err != nil {
		e, ok := err.(*sqsError)
		if !ok {
			e = &sqsError{http.StatusInternalServerError, "InternalError", err.Error()}
		}
		w.WriteHeader(e.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.msg})
		return
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// sqs runs one SQS operation.
func (s *Server) sqs(r *http.Request, op string, req *sqsRequest) (any, error) {
	if op == "ReceiveMessage" {
		return s.receive(r, req)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch op {
	case "CreateQueue":
		if !validName(req.QueueName, 80) || strings.HasSuffix(req.QueueName, ".fifo") != (req.Attributes["FifoQueue"] == "true") {
			return nil, &sqsError{http.StatusBadRequest, "InvalidParameterValue", "invalid queue name " + req.QueueName}
		}
		if s.qs[req.QueueName] == nil {
			s.qs[req.QueueName] = &queue{name: req.QueueName, fifo: strings.HasSuffix(req.QueueName, ".fifo"), dedup: map[string]time.Time{}}
		}
		return map[string]string{"QueueUrl": s.queueURL(req.QueueName)}, nil
	case "GetQueueUrl":
		if s.qs[req.QueueName] == nil {
			return nil, errNoQueue
		}
		return map[string]string{"QueueUrl": s.queueURL(req.QueueName)}, nil
	case "ListQueues":
		urls := []string{}
		for name := range s.qs {
			urls = append(urls, s.queueURL(name))
		}
		return map[string][]string{"QueueUrls": urls}, nil
	case "DeleteQueue":
		q := s.queueNamed(req.QueueURL)
		if q == nil {
			return nil, errNoQueue
		}
		delete(s.qs, q.name)
		return struct{}{}, nil
	case "GetQueueAttributes":
		q := s.queueNamed(req.QueueURL)
		if q == nil {
			return nil, errNoQueue
		}
		return map[string]map[string]string{"Attributes": {"QueueArn": sqsARNPrefix + q.name}}, nil
	case "DeleteMessageBatch", "DeleteMessage":
		return map[string][]any{"Successful": {}, "Failed": {}}, nil
	case "SendMessageBatch":
		return s.sendBatch(req)
	}
	return nil, &sqsError{http.StatusBadRequest, "InvalidAction", "the emulator does not answer " + op}
}

// sendBatch stores a SendMessageBatch's entries.
func (s *Server) sendBatch(req *sqsRequest) (any, error) {
	q := s.queueNamed(req.QueueURL)
	if q == nil {
		return nil, errNoQueue
	}
	if len(req.Entries) == 0 || len(req.Entries) > MaxBatchEntries {
		return nil, &sqsError{http.StatusBadRequest, "TooManyEntriesInBatchRequest", fmt.Sprintf("%d entries", len(req.Entries))}
	}
	size := 0
	for _, e := range req.Entries {
		size += len(e.MessageBody) + attrSize(e.MessageAttributes)
	}
	if size > MaxSQSBatchBytes {
		return nil, &sqsError{http.StatusBadRequest, "BatchRequestTooLong", fmt.Sprintf("%d bytes", size)}
	}
	type ok struct{ Id, MessageId, MD5OfMessageBody string }
	type failed struct {
		Id, Code, Message string
		SenderFault       bool
	}
	res := struct {
		Successful []ok
		Failed     []failed
	}{[]ok{}, []failed{}}
	for _, e := range req.Entries {
		if reason := checkEntry(q.fifo, e.MessageGroupID, e.MessageDeduplicationID, e.MessageAttributes); reason != "" {
			res.Failed = append(res.Failed, failed{e.ID, "InvalidParameterValue", reason, true})
			continue
		}
		m := newMessage(e.MessageBody, e.MessageGroupID, e.MessageAttributes)
		s.enqueue(q, m, e.MessageDeduplicationID)
		res.Successful = append(res.Successful, ok{e.ID, m.id, md5Hex(e.MessageBody)})
	}
	return res, nil
}

// checkEntry returns why an entry is refused, "" when it is not.
func checkEntry(fifo bool, group, dedup string, attrs map[string]Attribute) string {
	switch {
	case fifo && (group == "" || dedup == ""):
		return "a FIFO destination needs MessageGroupId and MessageDeduplicationId"
	case len(attrs) > MaxAttributes:
		return fmt.Sprintf("%d message attributes, more than %d", len(attrs), MaxAttributes)
	}
	return ""
}

// attrSize is the size attributes count for in a message: names, types
// and values.
func attrSize(attrs map[string]Attribute) int {
	n := 0
	for name, a := range attrs {
		n += len(name) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	return n
}

// receive answers ReceiveMessage: up to MaxNumberOfMessages (1 to 10)
// messages, waiting up to WaitTimeSeconds (at most 2s) for the first.
func (s *Server) receive(r *http.Request, req *sqsRequest) (any, error) {
	max := min(max(req.MaxNumberOfMessages, receiveMaxDefault), MaxBatchEntries)
	deadline := time.After(min(time.Duration(req.WaitTimeSeconds)*time.Second, maxWait))
	for {
		s.mu.Lock()
		q := s.queueNamed(req.QueueURL)
		if q == nil {
			s.mu.Unlock()
			return nil, errNoQueue
		}
		n := min(max, len(q.msgs))
		got, wake := q.msgs[:n:n], s.wake
		q.msgs = q.msgs[n:]
		s.mu.Unlock()
		if n > 0 {
			return map[string]any{"Messages": sqsMessages(got)}, nil
		}
		select {
		case <-wake:
		case <-deadline:
			return map[string]any{"Messages": []any{}}, nil
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
}

// sqsMessages renders messages as ReceiveMessage returns them.
func sqsMessages(msgs []message) []any {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]any{
			"MessageId": m.id, "ReceiptHandle": m.id, "Body": m.body, "MD5OfBody": md5Hex(m.body),
			"MessageAttributes": m.attrs,
			"Attributes": map[string]string{
				"SentTimestamp": fmt.Sprint(m.sent.UnixMilli()), "MessageGroupId": m.group,
			},
		}
	}
	return out
}
