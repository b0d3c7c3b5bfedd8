package emulators

import (
	"net/http"
	"strings"
	"testing"
)

// The SQS emulator answers an SQS request of the JSON protocol, and is
// gone once closed.
func TestSQSAnswersAndStops(t *testing.T) {
	e, err := Start("sqs")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, e.Endpoint, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("ListQueues: %s", resp.Status)
	}
	e.Close()
	if resp, err := http.Get(e.Endpoint); err == nil {
		resp.Body.Close()
		t.Errorf("the emulator still answers after Close: %s", resp.Status)
	}
}
