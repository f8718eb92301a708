//go:build !linux

package tensorops

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NewSharedMemory creates a POSIX shared-memory object through /dev/shm, which only Linux has:
// elsewhere it fails with Unimplemented.
func NewSharedMemory(key string, byteSize int64) (*SharedMemory, error) {
	return nil, status.Errorf(codes.Unimplemented, "tensorops: shared memory %s: NewSharedMemory is implemented on Linux only", key)
}

func unmapAndRemove([]byte, string) error { return nil }
