package tensorops_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tensorops/client/go/tensorops"
)

var (
	metricsPattern    = regexp.MustCompile(`metrics: (http://127\.0\.0\.1:\d+/metrics)`)
	gathersOkPattern  = regexp.MustCompile(`tensorops_requests_total\{code="OK",device="cpu",op="gather"\} (\S+)`)
	stoppedLinePrefix = "tensorops-server stopped"
)

// metricsGathers reads, from the metrics endpoint a replica's output names, its count of gathers
// that ended OK.
func metricsGathers(t *testing.T, log string) int {
	t.Helper()
	url := metricsPattern.FindStringSubmatch(log)
	if url == nil {
		t.Fatalf("no metrics URL in the server's output:\n%s", log)
	}
	response, err := http.Get(url[1])
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		t.Fatal(err)
	}
	match := gathersOkPattern.FindSubmatch(body)
	if match == nil {
		return 0
	}
	value, err := strconv.ParseFloat(string(match[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return int(value)
}

// TestRoundRobinOverReplicas: one Client over two replicas (an ipv4: target) spreads its calls
// over both, and no call fails while one of them shuts down (the Client's own retries, with no
// GRPC_GO_RETRY=on).
func TestRoundRobinOverReplicas(t *testing.T) {
	replicas := []*server{
		startServer(t, "--metrics_port=0", "--metrics_host=127.0.0.1"),
		startServer(t, "--metrics_port=0", "--metrics_host=127.0.0.1"),
	}
	client, err := tensorops.Dial("ipv4:" + replicas[0].address + "," + replicas[1].address)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	input := tensorops.FromInt64([]int64{1, 2, 3, 4, 5, 6}, 2, 3)
	index := tensorops.FromInt64([]int64{2, 0, 1, 1}, 2, 2)
	const calls = 200
	for i := 0; i < calls; i++ {
		if _, err := client.Gather(ctx, input, 1, index); err != nil {
			t.Fatal(err)
		}
	}
	var served [2]int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		served[0], served[1] = metricsGathers(t, replicas[0].output()), metricsGathers(t, replicas[1].output())
		if served[0]+served[1] == calls {
			break
		}
	}
	if served[0]+served[1] != calls || served[0] < calls/10 || served[1] < calls/10 {
		t.Fatalf("replicas served %v of %d gathers; want every one counted and a share each", served, calls)
	}

	var (
		mu       sync.Mutex
		failures []string
		done     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := client.Gather(ctx, input, 1, index); err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	// The cleanup's stop reaps it and checks its exit status.
	_ = replicas[0].cmd.Process.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(replicas[0].output(), stoppedLinePrefix); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replica 0 did not stop after SIGTERM:\n%s", replicas[0].output())
		}
	}
	time.Sleep(500 * time.Millisecond)
	close(done)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d calls failed while a replica stopped, first: %s", len(failures), failures[0])
	}
}
