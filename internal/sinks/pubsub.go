package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	pubsubsink "github.com/outboxrelay/outboxrelay/publishers/pubsub"
	"github.com/outboxrelay/outboxrelay/relay"
)

// pubsubSink publishes to Google Cloud Pub/Sub (publishers/pubsub); its
// flags are --pubsub-*.
func init() { register(pubsubSink) }

var pubsubSink = Sink{
	Name:        "pubsub",
	About:       "Google Cloud Pub/Sub, ordering key = event key",
	CloudEvents: cloudevents.PubSub,
	Flags: func(f Flags) Settings {
		p := &pubsubFlags{}
		p.register(f)
		return p
	},
}

// pubsubDemoProject is the project the Reader gives an emulator when no
// --pubsub-project is set: an emulator takes any.
const pubsubDemoProject = "outboxrelay-demo"

// pubsubFlags are the Pub/Sub sink's flags.
type pubsubFlags struct {
	cfg pubsubsink.Config // built by Check

	project, endpoint string
	publishTimeout    time.Duration
	maxMessageBytes   int
}

func (p *pubsubFlags) register(f Flags) {
	f.String(&p.project, "pubsub-project", "", "Google Cloud project of the topics (required)")
	f.String(&p.endpoint, "pubsub-endpoint", "", "host:port of a Pub/Sub emulator or fake, plain gRPC without credentials (default: $"+pubsubsink.EmulatorHostEnv+", else Google with Application Default Credentials)")
	f.Duration(&p.publishTimeout, "pubsub-publish-timeout", pubsubsink.DefaultPublishTimeout, "bound on one publish request")
	f.Int(&p.maxMessageBytes, "pubsub-max-message-bytes", pubsubsink.DefaultMaxMessageBytes, "largest message sent (payload, attributes, ordering key); a larger event fails permanently")
}

// pubsubConfigFlag maps pubsubsink.Config fields to the flags that set them.
var pubsubConfigFlag = map[string]string{
	"Project": "pubsub-project", "PublishTimeout": "pubsub-publish-timeout", "MaxMessageBytes": "pubsub-max-message-bytes",
}

// Check builds the pubsubsink.Config and reports every problem of the
// flags, naming each flag. A zero the user gave is refused by name: to
// pubsubsink it would mean the default.
func (p *pubsubFlags) Check(relay.Config) error {
	var errs problems
	p.cfg = pubsubsink.Config{Project: p.project, Endpoint: p.endpoint, PublishTimeout: p.publishTimeout, MaxMessageBytes: p.maxMessageBytes}
	reported := map[string]bool{}
	if p.project == "" {
		errs.add(usage("--pubsub-project (%s) is required with --sink pubsub", EnvName("pubsub-project")))
		reported["Project"] = true
	}
	if p.publishTimeout <= 0 {
		errs.add(invalid("pubsub-publish-timeout", "must be positive"))
		reported["PublishTimeout"] = true
	}
	if p.maxMessageBytes <= 0 {
		errs.add(invalid("pubsub-max-message-bytes", "must be positive"))
		reported["MaxMessageBytes"] = true
	}
	for _, err := range joined(p.cfg.Validate()) {
		var ce *pubsubsink.ConfigError
		switch {
		case !errors.As(err, &ce) || pubsubConfigFlag[ce.Field] == "":
			errs.add(usage("invalid Pub/Sub configuration: %v", err))
		case !reported[ce.Field]:
			errs.add(invalid(pubsubConfigFlag[ce.Field], ce.Reason))
		}
	}
	return errs.err()
}

// Open returns the Pub/Sub publisher and logs its configuration (which
// holds no secret: credentials stay with the Google client).
func (p *pubsubFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	cfg := p.cfg
	cfg.Logger = logger
	pub, err := pubsubsink.New(cfg)
	if err != nil {
		return nil, err
	}
	logger.Info("pubsub sink", "config", pub.Config())
	return pub, nil
}

// Embed starts the Google client's in-process fake (pstest) on 127.0.0.1
// and points --pubsub-endpoint at it, and --pubsub-project when unset.
func (p *pubsubFlags) Embed() (func(), error) {
	srv := pstest.NewServerWithAddress("127.0.0.1:0")
	p.endpoint = srv.Addr
	if p.project == "" {
		p.project = pubsubDemoProject
	}
	return func() { _ = srv.Close() }, nil
}

// Reader returns a Reader of --pubsub-endpoint (or PUBSUB_EMULATOR_HOST);
// without either it embeds the fake (Embed).
func (p *pubsubFlags) Reader() (Reader, error) {
	r := &pubsubReader{log: map[string][]Record{}, pulls: map[string]*sync.Mutex{}}
	if p.endpoint == "" && os.Getenv(pubsubsink.EmulatorHostEnv) == "" {
		var err error
		if r.stop, err = p.Embed(); err != nil {
			return nil, err
		}
	}
	if p.project == "" {
		p.project = pubsubDemoProject
	}
	var opts []option.ClientOption
	if p.endpoint != "" {
		opts = append(opts, option.WithEndpoint(p.endpoint), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	}
	c, err := pubsub.NewClient(context.Background(), p.project, opts...)
	if err != nil {
		if r.stop != nil {
			r.stop()
		}
		return nil, fmt.Errorf("pubsub: reader client: %w", err)
	}
	r.client, r.project, r.endpoint = c, p.project, p.endpoint
	return r, nil
}
