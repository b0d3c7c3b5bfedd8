package kinesissink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// Defaults of Config.
const (
	DefaultTimeout = 30 * time.Second
	// maxRecordBytes is Kinesis's limit on a record's data and partition
	// key; maxRequestRecords and maxRequestBytes its limits on PutRecords.
	maxRecordBytes    = 1 << 20
	maxRequestRecords = 500
	maxRequestBytes   = 5 << 20
)

// ErrInvalidConfig is wrapped by the errors of an invalid Config.
var ErrInvalidConfig = errors.New("kinesissink: invalid configuration")

// Config configures a Publisher; zero values select the defaults.
// Credentials come from the SDK's standard chain and are never logged.
type Config struct {
	// Region is the AWS region. Defaults to the SDK's chain (AWS_REGION,
	// the shared config file).
	Region string
	// Endpoint replaces AWS's, http://host:port of an emulator.
	Endpoint string
	// Source is the CloudEvents source attribute; defaults to the
	// cloudevents package's.
	Source string
	// Timeout bounds one request. Defaults to 30 s.
	Timeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports an invalid Config.
func (c Config) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("%w: Timeout must be positive", ErrInvalidConfig)
	}
	return nil
}

// String describes c; it holds no secret.
func (c Config) String() string {
	return fmt.Sprintf("region=%q endpoint=%q source=%q timeout=%v", c.Region, c.Endpoint, c.Source, c.Timeout)
}

// awsConfig loads the SDK's configuration: the standard chain, without
// the SDK's retries (the relay retries), Timeout on each request, the
// SDK's transport (with AWS_CA_BUNDLE's roots, when set).
func (c Config) awsConfig() (aws.Config, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRetryMaxAttempts(1)}
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	ac, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("%w: load the AWS configuration: %w", ErrInvalidConfig, err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if bc, ok := ac.HTTPClient.(*awshttp.BuildableClient); ok {
		tr = bc.GetTransport()
	}
	tr.MaxIdleConnsPerHost = 64
	ac.HTTPClient = &http.Client{Transport: tr, Timeout: c.Timeout}
	return ac, nil
}
