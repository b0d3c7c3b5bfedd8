package sqssns

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// Defaults of Config.
const (
	// DefaultMaxMessageBytes is the largest message (body and attributes)
	// sent: SNS's limit, and SQS's before 2025 (its queues' default
	// MaximumMessageSize is now 1 MiB).
	DefaultMaxMessageBytes = 256 << 10
	// DefaultTimeout bounds each request to AWS.
	DefaultTimeout = 30 * time.Second
)

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("sqssns: invalid configuration")

// ConfigError is one invalid field of a Config.
type ConfigError struct {
	Field, Reason string
}

// Error implements error.
func (e *ConfigError) Error() string { return "sqssns: invalid " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Config configures a Publisher. Credentials and, unless Region is set,
// the region come from the SDK's standard chain (environment, shared
// config and credentials files, SSO, web identity, ECS, IMDS).
type Config struct {
	// Endpoint replaces AWS's endpoint (an emulator's http://host:port).
	// Defaults to AWS's endpoint of the region.
	Endpoint string
	// Region overrides the region of the standard chain. Defaults to the
	// chain's (AWS_REGION, the shared config).
	Region string
	// MaxMessageBytes is the largest message sent, body and attributes;
	// a larger one fails permanently. Defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Timeout bounds each request. Defaults to DefaultTimeout.
	Timeout time.Duration
}

// validate fills the defaults and returns every invalid field, joined.
func (c *Config) validate() error {
	var errs []error
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, &ConfigError{"Endpoint", fmt.Sprintf("%q is not an http:// or https:// URL", c.Endpoint)})
		}
	}
	if c.MaxMessageBytes < 0 {
		errs = append(errs, &ConfigError{"MaxMessageBytes", "must be positive"})
	}
	if c.Timeout < 0 {
		errs = append(errs, &ConfigError{"Timeout", "must be positive"})
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return errors.Join(errs...)
}

// awsConfig loads the SDK's configuration: the standard chain, Region if
// set, no retries of the SDK's own (the relay retries), Timeout on each
// request. It reads files but does not connect.
func (c *Config) awsConfig() (aws.Config, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRetryMaxAttempts(1)}
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("%w: load AWS configuration: %w", ErrInvalidConfig, err)
	}
	// The SDK's transport (with AWS_CA_BUNDLE's roots, when set), in a
	// client of the sink's own: Timeout, and Close closes its connections.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		tr = bc.GetTransport()
	}
	tr.MaxIdleConnsPerHost = 64
	cfg.HTTPClient = &http.Client{Transport: tr, Timeout: c.Timeout}
	return cfg, nil
}

// endpoint is Endpoint as the SDK's BaseEndpoint, nil for AWS's.
func (c *Config) endpoint() *string {
	if c.Endpoint == "" {
		return nil
	}
	return aws.String(c.Endpoint)
}
