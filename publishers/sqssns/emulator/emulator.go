// Package emulator is a small in-memory Amazon SQS and SNS for tests and
// relay demo: the SQS AWS JSON 1.0 protocol the current SDK speaks and the
// SNS query protocol, for the operations the sqs and sns sinks and their
// readers use. goaws v0.4.5, the emulator issue 43 named, answers only
// SQS's older query protocol, which no served SDK version speaks.
//
// It emulates: queues and topics (standard and .fifo), SendMessageBatch
// and PublishBatch (at most 10 entries, 1 MiB and 256 KiB a request), a
// FIFO queue's or topic's 5-minute deduplication window, message
// attributes (at most 10), SNS subscriptions of SQS queues with raw
// message delivery. It does not emulate: signatures (any credentials
// pass), visibility timeouts (ReceiveMessage hands a message out once and
// forgets it; DeleteMessageBatch is accepted and does nothing), delays,
// FIFO group locking, non-raw SNS delivery, IAM, throttling.
package emulator

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Limits the emulator enforces, as AWS does.
const (
	MaxBatchEntries   = 10
	MaxAttributes     = 10
	MaxSQSBatchBytes  = 1 << 20
	MaxSNSBatchBytes  = 256 << 10
	DedupWindow       = 5 * time.Minute
	account, region   = "000000000000", "us-east-1"
	sqsARNPrefix      = "arn:aws:sqs:" + region + ":" + account + ":"
	snsARNPrefix      = "arn:aws:sns:" + region + ":" + account + ":"
	maxWait           = 2 * time.Second // the longest long poll it keeps
	receiveMaxDefault = 1
)

// TopicARNPrefix is what the emulator's topic ARNs start with: a topic
// named n has the ARN TopicARNPrefix+n.
const TopicARNPrefix = snsARNPrefix

// Attribute is a message attribute: DataType "String" with StringValue,
// or "Binary" with BinaryValue.
type Attribute struct {
	DataType    string
	StringValue string `json:",omitempty"`
	BinaryValue []byte `json:",omitempty"`
}

// message is one stored message.
type message struct {
	id, body, group string
	attrs           map[string]Attribute
	sent            time.Time
}

// queue is an SQS queue.
type queue struct {
	name  string
	fifo  bool
	msgs  []message
	dedup map[string]time.Time
}

// topic is an SNS topic and its raw SQS subscribers.
type topic struct {
	fifo   bool
	queues []string // queue names
	dedup  map[string]time.Time
}

// Server is a running emulator.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	mu   sync.Mutex
	wake chan struct{} // closed and replaced whenever a message arrives
	qs   map[string]*queue
	ts   map[string]*topic
}

// Start starts an emulator on addr ("127.0.0.1:0" for any free port).
func Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("emulator: listen: %w", err)
	}
	s := &Server{ln: ln, wake: make(chan struct{}), qs: map[string]*queue{}, ts: map[string]*topic{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the endpoint to give the SDK: http://host:port.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is the host:port the emulator listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the emulator and closes its connections.
func (s *Server) Close() error { return s.srv.Close() }

// ServeHTTP answers SQS JSON requests (X-Amz-Target: AmazonSQS.*) and SNS
// query requests (form Action=...).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if target := r.Header.Get("X-Amz-Target"); strings.HasPrefix(target, "AmazonSQS.") {
		s.serveSQS(w, r, strings.TrimPrefix(target, "AmazonSQS."))
		return
	}
	s.serveSNS(w, r)
}

// queueURL is the URL of queue name.
func (s *Server) queueURL(name string) string { return s.URL() + "/" + account + "/" + name }

// queueNamed returns the queue a URL or ARN names; s.mu is held.
func (s *Server) queueNamed(ref string) *queue {
	return s.qs[ref[strings.LastIndexAny(ref, "/:")+1:]]
}

// enqueue appends m to q unless its dedup id was seen within the window;
// s.mu is held. It reports whether m was appended.
func (s *Server) enqueue(q *queue, m message, dedupID string) {
	if q.fifo && seen(q.dedup, dedupID, m.sent) {
		return
	}
	q.msgs = append(q.msgs, m)
	close(s.wake)
	s.wake = make(chan struct{})
}

// seen reports whether id is in the dedup window, and records it.
func seen(window map[string]time.Time, id string, now time.Time) bool {
	if at, ok := window[id]; ok && now.Sub(at) < DedupWindow {
		return true
	}
	window[id] = now
	return false
}

// newMessage builds a stored message.
func newMessage(body, group string, attrs map[string]Attribute) message {
	return message{id: uuid.NewString(), body: body, group: group, attrs: attrs, sent: time.Now()}
}

// md5Hex is the MD5 of s in hex, as SQS reports a body's.
func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// validName reports whether n is a valid queue or topic name: 1-80 (queue)
// or 1-256 (topic) letters, digits, '-' and '_', with an optional .fifo.
func validName(n string, max int) bool {
	base := strings.TrimSuffix(n, ".fifo")
	if base == "" || len(n) > max {
		return false
	}
	for _, c := range base {
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
