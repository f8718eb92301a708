package tensorops_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tensorops/client/go/tensorops"
	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// TestUnixSocketTargets: a server started with --unix_socket answers calls dialed as
// "unix:PATH" and "unix:///PATH" (gRPC-Go dials both itself), and still serves TCP.
func TestUnixSocketTargets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tensorops.sock")
	s := startServer(t, "--unix_socket="+path)
	if info, err := os.Lstat(path); err != nil || info.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is not a socket while the server runs: %v, %v", path, info, err)
	}
	ctx := testContext(t)
	x := tensorops.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	index := tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2)
	for _, target := range []string{"unix:" + path, "unix://" + path, s.address} {
		client, err := tensorops.Dial(target)
		if err != nil {
			t.Fatalf("Dial(%s): %v", target, err)
		}
		out, err := client.Gather(ctx, x, 1, index)
		expectTensor(t, "Gather through "+target, out, err, tensorops.Float32, []int64{2, 2}, []float32{1, 1, 4, 3})
		client.Close()
	}

	// A socket nobody listens on is named as given.
	missing := "unix:" + filepath.Join(t.TempDir(), "none.sock")
	client, err := tensorops.Dial(missing)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.Gather(ctx, x, 1, index)
	expectStatus(t, "Gather through a missing socket", err, codes.Unavailable, "no tensorops server answers at "+missing+" (is it running?)")
}

// TestUnixAbstractTarget: "unix-abstract:NAME", which gRPC-Go 1.33 has no resolver for, reaches
// the socket NAME in Linux's abstract namespace (here a Go gRPC server whose TensorOps methods are
// all unimplemented: the call's Unimplemented shows that it got there).
func TestUnixAbstractTarget(t *testing.T) {
	name := fmt.Sprintf("tensorops-go-test-%d", os.Getpid())
	listener, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Skipf("no abstract Unix sockets here: %v", err)
	}
	server := grpc.NewServer()
	tensoropsv1.RegisterTensorOpsServer(server, tensoropsv1.UnimplementedTensorOpsServer{})
	go server.Serve(listener)
	defer server.Stop()

	client, err := tensorops.Dial("unix-abstract:" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	input := tensorops.FromInt64([]int64{1, 2})
	_, err = client.Gather(testContext(t), input, 0, input)
	expectStatus(t, "Gather through unix-abstract:"+name, err, codes.Unimplemented)

	if _, err := tensorops.Dial("unix-abstract:"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Dial(unix-abstract:) = %v, want InvalidArgument", err)
	}
}
