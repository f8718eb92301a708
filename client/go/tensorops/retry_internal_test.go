package tensorops

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The Client retries what ServiceConfig's policy retries, with its backoff, and never past the
// caller's deadline or cancellation.
func TestRetryFollowsThePolicyWithinTheDeadline(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "the server shuts down")
	instant := &retrier{maxAttempts: MaxAttemptsCap, jitter: func() float64 { return 0 }}
	background := context.Background()
	for code, want := range map[codes.Code]bool{
		codes.Unavailable: true, codes.Canceled: true, codes.Aborted: true,
		codes.InvalidArgument: false, codes.DeadlineExceeded: false, codes.FailedPrecondition: false, codes.Internal: false,
	} {
		if got := instant.again(background, 1, status.Error(code, "")); got != want {
			t.Errorf("again after %v: %v, want %v", code, got, want)
		}
	}
	if instant.again(background, MaxAttemptsCap, unavailable) {
		t.Errorf("again after the last of %d attempts", MaxAttemptsCap)
	}
	if (*retrier)(nil).again(background, 1, unavailable) {
		t.Error("a Client from NewClient retries")
	}
	cancelled, cancel := context.WithCancel(background)
	cancel()
	if instant.again(cancelled, 1, status.Error(codes.Canceled, "context canceled")) {
		t.Error("again after the caller cancelled")
	}

	// The whole backoff: 50 ms, then 100, 200, 400, at most 1 s.
	full := &retrier{maxAttempts: 10, jitter: func() float64 { return 1 }}
	start := time.Now()
	if !full.again(background, 1, unavailable) || time.Since(start) < retryInitialBackoff {
		t.Errorf("the first retry came after %v, want %v", time.Since(start), retryInitialBackoff)
	}
	// A deadline before the backoff's end: no wait, no retry.
	ctx, cancel := context.WithTimeout(background, 150*time.Millisecond)
	defer cancel()
	start = time.Now()
	if full.again(ctx, 3, unavailable) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("a retry due after 200 ms, with a deadline in 150 ms: waited %v", time.Since(start))
	}
	// Cancelled while it waits: no retry, and no more waiting.
	ctx, cancel = context.WithCancel(background)
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	if full.again(ctx, 9, unavailable) || time.Since(start) > 500*time.Millisecond {
		t.Errorf("a retry due after 1 s, cancelled after 20 ms: waited %v", time.Since(start))
	}
}

func TestRetriedMethodsAreThoseOfTheServiceConfig(t *testing.T) {
	for method, want := range map[string]bool{
		"/tensorops.v1.TensorOps/Gather": true, "/tensorops.v1.TensorOps/Run": true,
		"/tensorops.v1.TensorOps/ListTensors": true, "/tensorops.v1.TensorOps/GetTensor": true,
		"/tensorops.v1.TensorOps/PutTensor": false, "/tensorops.v1.TensorOps/DeleteTensor": false,
		"/tensorops.v1.TensorOps/RegisterSharedMemory": false, "/tensorops.v1.TensorOps/UnregisterSharedMemory": false,
		"/other.Service/Gather": false,
	} {
		if got := retriedMethod(method); got != want {
			t.Errorf("retriedMethod(%q) = %v, want %v", method, got, want)
		}
	}
	// The config the C++ and Python clients use too, unchanged.
	config, err := ServiceConfig(true, 5)
	want := `{"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{"name":[{"service":"tensorops.v1.TensorOps"}],` +
		`"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.05s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","CANCELLED","ABORTED"]}},` +
		`{"name":[{"service":"tensorops.v1.TensorOps","method":"PutTensor"},{"service":"tensorops.v1.TensorOps","method":"DeleteTensor"},` +
		`{"service":"tensorops.v1.TensorOps","method":"RegisterSharedMemory"},{"service":"tensorops.v1.TensorOps","method":"UnregisterSharedMemory"}]}]}`
	if err != nil || config != want {
		t.Errorf("ServiceConfig(true, 5) = %s, %v\nwant %s", config, err, want)
	}
}
