package chaos

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
)

// setup is what the harness adds to a sink of the registry for its faults,
// by sink name; a sink without one runs on its flags' defaults, behind a
// proxy of the server its --<sink>-url names, without broker-errors.
type setup struct {
	// args are the sink's flags that name the broker: a variable's, or
	// this machine's.
	args []string
	// flags are more relay flags: the sink's bounds on a publish.
	flags []string
	// broker starts the sink's broker itself, behind the fault proxy it
	// returns with the sink's flags that point at it, refusing r's share
	// of publishes during broker-errors.
	broker func(t *testing.T, r *refuser) (*faultproxy.Proxy, []string)
	// front stands before the server at addr, refusing r's share of its
	// requests during broker-errors, and returns its own address, where
	// the fault proxy then points.
	front func(t *testing.T, addr string, r *refuser) string
}

var setups = map[string]setup{
	"kafka": {broker: kafkaBroker},
	// kinesis: the kinesalite its Reader embeds.
	"kinesis": {flags: []string{"--kinesis-timeout", publishTimeout.String()}},
	// mqtt: the private Mosquitto its Reader embeds (no queue limit).
	"mqtt": {flags: []string{"--mqtt-publish-timeout", publishTimeout.String()}},
	"nats": {
		args:  []string{"--nats-url", envOr("OUTBOX_TEST_NATS_URL", "nats://127.0.0.1:4222")},
		flags: []string{"--nats-publish-timeout", publishTimeout.String()},
	},
	"rabbitmq": {
		args:  []string{"--rabbitmq-url", envOr("OUTBOX_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")},
		flags: []string{"--rabbitmq-publish-timeout", publishTimeout.String(), "--rabbitmq-dial-timeout", "2s"},
	},
	"pubsub": {broker: pubsubBroker, flags: []string{"--pubsub-publish-timeout", publishTimeout.String()}},
	"redis": {
		args:  []string{"--redis-url", "redis://" + envOr("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379") + "/0"},
		flags: []string{"--redis-timeout", publishTimeout.String(), "--redis-dial-timeout", "2s"},
	},
	// sqs: the emulator its Reader embeds, direct for the
	// reader, behind the front and the proxy for the relays.
	"sqs":     {front: refusingFront, flags: []string{"--sqs-timeout", publishTimeout.String()}},
	"webhook": {front: refusingFront, flags: []string{"--webhook-timeout", publishTimeout.String()}},
}

// refuser draws, while broker-errors gives it a share, whether the broker
// refuses a publish, and counts the refusals.
type refuser struct {
	share atomic.Pointer[float64]
	n     atomic.Int64
	mu    sync.Mutex
	rng   *rand.Rand
}

func newRefuser(seed uint64) *refuser { return &refuser{rng: rand.New(rand.NewPCG(seed, 7))} }

func (r *refuser) refuse() bool {
	share := r.share.Load()
	if share == nil {
		return false
	}
	r.mu.Lock()
	refuse := r.rng.Float64() < *share
	r.mu.Unlock()
	if refuse {
		r.n.Add(1)
	}
	return refuse
}

// kafkaBroker is a kfake broker of the run's own that advertises its fault
// proxy's address, so that every client connection, including those
// metadata leads to, goes through it. It refuses r's share of produce
// requests with NOT_LEADER_FOR_PARTITION.
func kafkaBroker(t *testing.T, r *refuser) (*faultproxy.Proxy, []string) {
	var proxy *faultproxy.Proxy
	b, err := kfakebroker.Start(kfakebroker.Options{
		Listen: faultproxy.ListenTo(&proxy),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		proxy.Close()
	})
	b.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		if !r.refuse() {
			return nil, nil, false
		}
		return kfakebroker.ProduceErrorResponse(req.(*kmsg.ProduceRequest), kerr.NotLeaderForPartition.Code), nil, true
	})
	return proxy, []string{"--kafka-brokers", strings.Join(b.Addrs(), ",")}
}

// refusingFront stands before the webhook receiver at addr: it answers r's
// share of the requests 503, the transient refusal of a webhook endpoint
// (as NOT_LEADER_FOR_PARTITION is Kafka's), and passes the others on.
func refusingFront(t *testing.T, addr string, r *refuser) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("webhook front: %v", err)
	}
	pass := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
	tr := &http.Transport{}
	pass.Transport = tr
	// A request the relay gave up on (a fault) ends here too, unlogged.
	pass.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.refuse() {
			http.Error(w, "refused by the chaos harness (broker-errors)", http.StatusServiceUnavailable)
			return
		}
		pass.ServeHTTP(w, req)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // until Shutdown
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
		tr.CloseIdleConnections()
	})
	return ln.Addr().String()
}

// pubsubBroker is the Google client's fake (pstest) in the test process,
// behind the fault proxy, refusing r's share of publish requests with
// ResourceExhausted (a quota: transient) during broker-errors.
func pubsubBroker(t *testing.T, r *refuser) (*faultproxy.Proxy, []string) {
	srv := pstest.NewServerWithAddress("127.0.0.1:0", pstest.ServerReactorOption{FuncName: "Publish", Reactor: pubsubRefusal{r}})
	proxy, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.Close()
		_ = srv.Close()
	})
	return proxy, []string{"--pubsub-endpoint", proxy.Addr(), "--pubsub-project", "outboxrelay-chaos"}
}

// pubsubRefusal is a pstest reactor that refuses r's share of publishes.
type pubsubRefusal struct{ r *refuser }

func (p pubsubRefusal) React(any) (bool, any, error) {
	if !p.r.refuse() {
		return false, nil, nil
	}
	return true, nil, status.Error(codes.ResourceExhausted, "refused by the chaos harness (broker-errors)")
}
