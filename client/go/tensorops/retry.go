package tensorops

import (
	"context"
	"math/rand"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The service's full name, as gRPC method names start: "/tensorops.v1.TensorOps/Gather".
const serviceName = "tensorops.v1.TensorOps"

// neverRetried are the methods that change the store or the server's regions without an update
// id, which no retry policy covers (ServiceConfig).
var neverRetried = []string{"PutTensor", "DeleteTensor", "RegisterSharedMemory", "UnregisterSharedMemory"}

// The backoff of ServiceConfig's retry policy: attempt n+1 starts after a random share of
// min(retryInitialBackoff * retryBackoffMultiplier^(n-1), retryMaxBackoff), as gRPC waits.
const (
	retryInitialBackoff    = 50 * time.Millisecond
	retryMaxBackoff        = time.Second
	retryBackoffMultiplier = 2
)

// retrier makes the retries of ServiceConfig's retry policy for a Client from Dial, in the
// client itself: gRPC-Go before 1.40 (Debian 12 has 1.33) applies a service config's retry
// policy only when the program started with GRPC_GO_RETRY=on, which a library cannot set, so Dial
// turns gRPC's own retries off (grpc.WithDisableRetry, which leaves its transparent retries of
// calls that never reached a server) and retries here, the same on every gRPC-Go version. Unary
// calls are retried by its interceptor, Get by Get itself; the streams of Put and RunStream are
// not retried.
type retrier struct {
	// Attempts a call gets, the first included: 1 to MaxAttemptsCap.
	maxAttempts int
	// jitter returns a number in [0, 1): the share of the backoff to wait. Tests fix it.
	jitter func() float64
}

// retryableCode reports whether ServiceConfig's retry policy retries a call that failed with code.
func retryableCode(code codes.Code) bool {
	return code == codes.Unavailable || code == codes.Canceled || code == codes.Aborted
}

// retriedMethod reports whether ServiceConfig's retry policy covers the gRPC method
// ("/tensorops.v1.TensorOps/Gather"): every method of the service but neverRetried.
func retriedMethod(method string) bool {
	name := strings.TrimPrefix(method, "/"+serviceName+"/")
	if name == method {
		return false
	}
	for _, never := range neverRetried {
		if name == never {
			return false
		}
	}
	return true
}

// again reports whether a call whose attempt `attempt` (1: the first) failed with err gets
// another attempt, once it has waited the backoff, which again does. It does not when r is nil
// (a Client from NewClient), the code is not retryable, the attempts are used up, ctx has ended
// (a Canceled of the caller's own is not the server's), ctx's deadline comes before the wait
// would end, or ctx ends while it waits: the call then fails with err, its last attempt's error.
func (r *retrier) again(ctx context.Context, attempt int, err error) bool {
	if r == nil || attempt >= r.maxAttempts || ctx.Err() != nil || !retryableCode(status.Code(err)) {
		return false
	}
	backoff := retryInitialBackoff
	for i := 1; i < attempt && backoff < retryMaxBackoff; i++ {
		backoff *= retryBackoffMultiplier
	}
	if backoff > retryMaxBackoff {
		backoff = retryMaxBackoff
	}
	wait := time.Duration(r.jitter() * float64(backoff))
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
		return false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unary is the interceptor that retries the unary calls of the methods the policy covers.
func (r *retrier) unary(ctx context.Context, method string, request, reply interface{}, conn *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !retriedMethod(method) {
		return invoker(ctx, method, request, reply, conn, opts...)
	}
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, request, reply, conn, opts...)
		if err == nil || !r.again(ctx, attempt, err) {
			return err
		}
	}
}

func newRetrier(maxAttempts int) *retrier {
	return &retrier{maxAttempts: maxAttempts, jitter: rand.Float64}
}
