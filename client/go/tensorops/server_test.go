package tensorops_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverPathVariable names the tensorops-server binary the tests start; ctest sets it. Without it
// the tests that need a server skip, so that `go test` works on a machine without the C++ build.
const serverPathVariable = "TENSOROPS_SERVER_PATH"

const startupTimeout = 20 * time.Second

var listeningPattern = regexp.MustCompile(`listening on (\S+?);`)

// server is a tensorops-server child process on a free loopback port.
type server struct {
	cmd     *exec.Cmd
	address string // host:port from its start-up line.

	mu  sync.Mutex
	log strings.Builder // Everything it printed, for failure messages.
	// Closed when both its output streams have closed.
	drained chan struct{}
}

// startServer runs the server binary with --host=127.0.0.1 --port=0 and `flags`, and returns once
// it has printed the address it listens on. It skips the test when serverPathVariable is unset.
func startServer(t testing.TB, flags ...string) *server {
	t.Helper()
	path := os.Getenv(serverPathVariable)
	if path == "" {
		t.Skipf("%s is not set: these tests need the tensorops-server binary (ctest sets it)", serverPathVariable)
	}
	reader, writer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--host=127.0.0.1", "--port=0"}, flags...)
	s := &server{cmd: exec.Command(path, args...), drained: make(chan struct{})}
	s.cmd.Stdout = writer
	s.cmd.Stderr = writer
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	writer.Close()

	addresses := make(chan string, 1)
	go func() {
		defer close(s.drained)
		defer reader.Close()
		lines := bufio.NewScanner(reader)
		lines.Buffer(make([]byte, 64*1024), 1024*1024)
		for lines.Scan() {
			s.mu.Lock()
			s.log.WriteString(lines.Text() + "\n")
			s.mu.Unlock()
			if match := listeningPattern.FindStringSubmatch(lines.Text()); match != nil {
				select {
				case addresses <- match[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { s.stop(t) })

	select {
	case s.address = <-addresses:
	case <-s.drained:
		t.Fatalf("tensorops-server exited before listening:\n%s", s.output())
	case <-time.After(startupTimeout):
		t.Fatalf("tensorops-server printed no \"listening on\" line in %v:\n%s", startupTimeout, s.output())
	}
	return s
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop sends SIGTERM, waits for a clean exit (SIGKILL after a while) and fails the test if the
// server did not exit with status 0.
func (s *server) stop(t testing.TB) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	select {
	case err := <-exited:
		<-s.drained
		if err != nil {
			t.Errorf("tensorops-server: %v\n%s", err, s.output())
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-exited
		t.Errorf("tensorops-server did not exit within 30s of SIGTERM\n%s", s.output())
	}
}

func (s *server) String() string { return fmt.Sprintf("tensorops-server at %s", s.address) }
