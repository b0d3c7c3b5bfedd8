package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdk "go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/tracing"
)

// relay run traces what it publishes when the standard OpenTelemetry
// variables ask for it (see tracingFromEnv); there is no flag. With none of
// them set, no SDK is built and no sink is wrapped.
const (
	envSDKDisabled         = "OTEL_SDK_DISABLED"
	envTracesExporter      = "OTEL_TRACES_EXPORTER"
	envEndpoint            = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint      = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol            = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol      = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envServiceName         = "OTEL_SERVICE_NAME"
	envResourceAttributes  = "OTEL_RESOURCE_ATTRIBUTES"
	envTracesSampler       = "OTEL_TRACES_SAMPLER"
	envTracesSamplerArg    = "OTEL_TRACES_SAMPLER_ARG"
	defaultServiceName     = "outbox-relay"
	defaultTracesEndpoint  = "http://localhost:4318/v1/traces"
	tracingErrorLogPeriod  = time.Minute // at most one log line of export errors per period
	tracingShutdownTimeout = closeBound
)

// tracingSettings is what the OTEL_* variables ask of relay run's tracing.
type tracingSettings struct {
	endpoint    string // the OTLP/HTTP traces URL
	shown       string // endpoint without user information, for the log
	serviceName string
	attrs       []attribute.KeyValue // OTEL_RESOURCE_ATTRIBUTES
	sampler     sdktrace.Sampler
}

// tracingFromEnv reads the OTEL_* variables. It returns nil when tracing
// is off: OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none, or neither
// OTEL_TRACES_EXPORTER=otlp nor an OTLP endpoint variable set. Every bad
// value is a usage error naming its variable. It neither logs nor
// connects.
func tracingFromEnv(getenv func(string) string) (*tracingSettings, error) {
	var errs problems
	switch v := strings.ToLower(strings.TrimSpace(getenv(envSDKDisabled))); v {
	case "true":
		return nil, nil
	case "", "false":
	default:
		return nil, usageError("invalid value for %s: %q; use true or false", envSDKDisabled, getenv(envSDKDisabled))
	}
	tracesEndpoint, endpoint := strings.TrimSpace(getenv(envTracesEndpoint)), strings.TrimSpace(getenv(envEndpoint))
	switch v := strings.TrimSpace(getenv(envTracesExporter)); v {
	case "none":
		return nil, nil
	case "":
		if tracesEndpoint == "" && endpoint == "" {
			return nil, nil // off by default
		}
	case "otlp":
	default:
		return nil, usageError("invalid value for %s: %q; relay run exports traces with otlp (OTLP over HTTP), or none", envTracesExporter, v)
	}

	s := &tracingSettings{}
	protoVar := envTracesProtocol
	proto := strings.TrimSpace(getenv(envTracesProtocol))
	if proto == "" {
		protoVar, proto = envProtocol, strings.TrimSpace(getenv(envProtocol))
	}
	switch proto {
	case "", "http/protobuf":
	case "grpc":
		errs.add(usageError("invalid value for %s: grpc is not built into relay run; use http/protobuf (an OpenTelemetry Collector listens for it on port 4318)", protoVar))
	default:
		errs.add(usageError("invalid value for %s: %q; relay run exports http/protobuf", protoVar, proto))
	}

	endpointVar := envTracesEndpoint
	switch {
	case tracesEndpoint != "":
		s.endpoint = tracesEndpoint // used as given
	case endpoint != "":
		endpointVar, s.endpoint = envEndpoint, strings.TrimSuffix(endpoint, "/")+"/v1/traces"
	default:
		endpointVar, s.endpoint = envTracesExporter, defaultTracesEndpoint
	}
	u, err := url.Parse(s.endpoint)
	switch {
	case err != nil:
		errs.add(usageError("invalid value for %s: not a URL", endpointVar)) // url's error would repeat a password
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		errs.add(usageError("invalid value for %s: %q; want an http or https URL such as http://collector:4318", endpointVar, u.Redacted()))
	default:
		s.shown = u.Redacted()
	}

	s.attrs, err = parseResourceAttributes(getenv(envResourceAttributes))
	errs.add(err)
	s.serviceName = strings.TrimSpace(getenv(envServiceName))
	if s.serviceName == "" {
		s.serviceName = defaultServiceName
		for _, a := range s.attrs {
			if a.Key == semconv.ServiceNameKey {
				s.serviceName = a.Value.AsString()
			}
		}
	}
	s.sampler, err = samplerFromEnv(getenv(envTracesSampler), getenv(envTracesSamplerArg))
	errs.add(err)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// parseResourceAttributes reads OTEL_RESOURCE_ATTRIBUTES: key=value pairs
// separated by commas, values percent-encoded.
func parseResourceAttributes(v string) ([]attribute.KeyValue, error) {
	var attrs []attribute.KeyValue
	for pair := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		key, value, ok := strings.Cut(pair, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return nil, usageError("invalid value for %s: %q is not key=value", envResourceAttributes, pair)
		}
		decoded, err := url.PathUnescape(strings.TrimSpace(value))
		if err != nil {
			return nil, usageError("invalid value for %s: the value of %q is not percent-encoded correctly", envResourceAttributes, key)
		}
		attrs = append(attrs, attribute.String(key, decoded))
	}
	return attrs, nil
}

// samplerFromEnv returns the sampler OTEL_TRACES_SAMPLER names, with
// OTEL_TRACES_SAMPLER_ARG as the ratio of the traceidratio ones (default
// 1.0). The default is parentbased_always_on: a message is traced when its
// writer's span was sampled, and always when it has none.
func samplerFromEnv(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg = strings.TrimSpace(arg); arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, usageError("invalid value for %s: %q; want a ratio from 0 to 1", envTracesSamplerArg, arg)
		}
		ratio = r
	}
	switch strings.TrimSpace(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	default:
		return nil, usageError("invalid value for %s: %q; use always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", envTracesSampler, name)
	}
}

// relayTracing is the tracer provider of a relay run with tracing on. A nil
// *relayTracing is tracing off: wrap returns the sink as it is, and the
// shutdown methods do nothing.
type relayTracing struct {
	tp       *sdktrace.TracerProvider
	once     sync.Once
	done     chan struct{} // closed when the provider has shut down
	deadline time.Time     // when awaitShutdown stops waiting
	// within is how long the shutdown may take: tracingShutdownTimeout.
	within time.Duration
}

// start builds the exporter and the tracer provider; s nil returns nil.
// Spans are exported in batches in the background (the OTEL_BSP_*
// variables tune the batches); the other OTEL_EXPORTER_OTLP_* variables
// (headers, timeout, compression, certificates) are read by the exporter
// itself. Nothing connects before the first export, and an export that
// fails never slows the relay: spans that do not fit the queue are dropped.
// Export errors are logged at most once a minute.
func (s *tracingSettings) start(ctx context.Context, logger *slog.Logger) (*relayTracing, error) {
	if s == nil {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(s.endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	attrs := append([]attribute.KeyValue{}, s.attrs...)
	attrs = append(attrs, semconv.ServiceName(s.serviceName), semconv.ServiceVersion(serviceVersion()))
	if host, err := os.Hostname(); err == nil {
		attrs = append(attrs, semconv.HostName(host))
	}
	attrs = append(attrs, semconv.TelemetrySDKName("opentelemetry"), semconv.TelemetrySDKLanguageGo, semconv.TelemetrySDKVersion(sdk.Version()))
	res := resource.NewWithAttributes(semconv.SchemaURL, attrs...)
	otel.SetErrorHandler(&tracingErrorLog{logger: logger})
	logger.Info("tracing", "endpoint", s.shown, "service", s.serviceName, "sampler", s.sampler.Description())
	return &relayTracing{tp: sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(s.sampler),
	), within: tracingShutdownTimeout}, nil
}

// serviceVersion is service.version: the version relay version prints.
func serviceVersion() string {
	info, ok := debug.ReadBuildInfo()
	v, _, _ := strings.Cut(versionText(version, info, ok), "\n")
	return strings.TrimPrefix(v, "relay ")
}

// wrap returns pub with a span per published message (publishers/tracing),
// messaging.system being the sink's name; with tracing off, pub itself.
func (t *relayTracing) wrap(sink string, pub publishers.Publisher) publishers.Publisher {
	if t == nil || pub == nil {
		return pub
	}
	w, err := tracing.Wrap(pub, tracing.Config{System: sink, TracerProvider: t.tp})
	if err != nil {
		panic(err) // unreachable: pub is not nil and every sink has a name
	}
	return w
}

// startShutdown begins, in the background, exporting the spans still
// queued and stopping the provider, with within (tracingShutdownTimeout)
// to do it.
// relay run calls it once Run has returned (every span has ended), so
// that the export overlaps the closing of the sink and the pool instead of
// adding to the time the process takes to exit. It is idempotent.
func (t *relayTracing) startShutdown() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		t.done = make(chan struct{})
		t.deadline = time.Now().Add(t.within)
		go func() {
			defer close(t.done)
			ctx, cancel := context.WithDeadline(context.Background(), t.deadline)
			defer cancel()
			_ = t.tp.Shutdown(ctx)
		}()
	})
}

// awaitShutdown starts the shutdown if startShutdown did not, and waits for
// it until its deadline; spans not exported by then are lost (logged).
func (t *relayTracing) awaitShutdown(logger *slog.Logger) {
	if t == nil {
		return
	}
	t.startShutdown()
	wait := time.NewTimer(time.Until(t.deadline))
	defer wait.Stop()
	select {
	case <-t.done:
	case <-wait.C:
		logger.Warn("tracing: the last spans were not exported in time; exiting anyway", "waited", t.within)
	}
}

// tracingErrorLog logs the SDK's errors (failed exports, mostly) as
// warnings, at most once per tracingErrorLogPeriod with the number of
// errors since the last line, so that a collector that is down does not
// flood the log.
type tracingErrorLog struct {
	logger *slog.Logger
	mu     sync.Mutex
	last   time.Time
	quiet  int // errors not logged since last
}

// Handle implements otel.ErrorHandler.
func (h *tracingErrorLog) Handle(err error) {
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < tracingErrorLogPeriod {
		h.quiet++
		h.mu.Unlock()
		return
	}
	skipped := h.quiet
	h.last, h.quiet = now, 0
	h.mu.Unlock()
	h.logger.Warn("tracing: exporting spans failed; spans are dropped while the collector does not answer", "error", err, "errors_not_logged", skipped)
}
