package tensorops

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A stream the server's gRPC reset under its resource quota carries no message of the server's:
// the error names the flag that sizes the quota and keeps the code and gRPC's words.
func TestAResetUnderTheMemoryLimitNamesTheFlag(t *testing.T) {
	reset := status.Error(codes.ResourceExhausted, "stream terminated by RST_STREAM with error code: ENHANCE_YOUR_CALM")
	err := unreachable{target: "127.0.0.1:1"}.rewrite(reset)
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "--max_memory_bytes") ||
		!strings.HasSuffix(st.Message(), "[gRPC: stream terminated by RST_STREAM with error code: ENHANCE_YOUR_CALM]") {
		t.Fatalf("rewrite(reset) = %v", err)
	}
	// Anything else is left alone.
	other := status.Error(codes.ResourceExhausted, "gather: more than --max_memory_bytes=1000 allows at all")
	if got := (unreachable{target: "127.0.0.1:1"}).rewrite(other); !errors.Is(got, other) && got.Error() != other.Error() {
		t.Fatalf("rewrite(other) = %v", got)
	}
}
