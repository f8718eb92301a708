package tensorops_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tensorops/client/go/tensorops"
)

// Gather through a server on 127.0.0.1:50051 (compiled, not run: it needs the server).
func ExampleClient_Gather() {
	client, err := tensorops.Dial("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	input := tensorops.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	index := tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2)
	out, err := client.Gather(ctx, input, 1, index)
	if status.Code(err) == codes.InvalidArgument {
		log.Fatalf("bad request: %v", status.Convert(err).Message())
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Shape(), out.Float32s()) // [2 2] [1 1 4 3]
}

// A pipeline of ops over one stream; results come back in completion order with their ids.
func ExampleClient_RunStream() {
	client, err := tensorops.Dial("127.0.0.1:50051", tensorops.WithBearerToken("TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	stream, err := client.RunStream(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	input := tensorops.FromInt64([]int64{10, 20, 30})
	go func() {
		for id := uint64(0); id < 3; id++ {
			if stream.Send(id, tensorops.IndexSelectOp(input, 0, tensorops.FromInt64([]int64{int64(id)}))) != nil {
				break
			}
		}
		stream.CloseSend()
	}()
	for {
		result, err := stream.Recv()
		if err != nil { // io.EOF once every result has come.
			break
		}
		fmt.Println(result.RequestID, result.Result.Int64s(), result.Err)
	}
}

// A lookup whose ids and result stay in shared memory (compiled, not run: it needs a server on
// this host, with the table "emb" stored).
func ExampleClient_CreateSharedMemoryRegion() {
	client, err := tensorops.Dial("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	shm, err := client.CreateSharedMemoryRegion(ctx, "io", 1<<20)
	if err != nil {
		log.Fatal(err)
	}
	defer client.DestroySharedMemoryRegion(ctx, shm)
	ids, err := shm.Write(0, tensorops.FromInt64([]int64{7, 3, 7}))
	if err != nil {
		log.Fatal(err)
	}
	out, err := client.IndexSelect(ctx, tensorops.Ref("emb"), 0, ids, tensorops.IndexSelectOptions{
		Result: tensorops.ResultOptions{SharedMemory: shm.Ref(4096, 1<<20-4096)}})
	if err != nil {
		log.Fatal(err)
	}
	rows, err := shm.Read(out) // Or shm.Bytes()[4096:], read in place.
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out, rows.Float32s()[:4])
}
