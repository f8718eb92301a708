package tensorops

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NewSharedMemory creates the POSIX shared-memory object `key` ("/name": the file /dev/shm/name,
// as shm_open(3) with O_CREAT|O_EXCL makes it, mode 0600) of byteSize zero bytes and maps all of
// it, read-write and shared. InvalidArgument for a bad key or a byteSize below 1, AlreadyExists
// when the object exists, the status of the system's error otherwise (PermissionDenied,
// ResourceExhausted, ...). Register it with Client.RegisterSharedMemory, or let
// Client.CreateSharedMemoryRegion do both; Close unmaps and removes it.
func NewSharedMemory(key string, byteSize int64) (*SharedMemory, error) {
	if err := checkSharedMemoryKey(key); err != nil {
		return nil, err
	}
	if byteSize < 1 || byteSize != int64(int(byteSize)) {
		return nil, status.Errorf(codes.InvalidArgument, "tensorops: shared memory %s: byteSize %d is not in 1..%d", key, byteSize, int64(^uint(0)>>1))
	}
	path := "/dev/shm" + key
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, systemError("creating shared memory "+key, err)
	}
	defer file.Close()
	data, err := func() ([]byte, error) {
		if err := file.Truncate(byteSize); err != nil {
			return nil, err
		}
		// Reserve the pages now: on a /dev/shm too small for them (a container's is 64 MiB unless
		// given more) this fails with ENOSPC, where a sparse object would kill the first process
		// to touch a page without room with SIGBUS.
		if err := syscall.Fallocate(int(file.Fd()), 0, 0, byteSize); err != nil {
			return nil, err
		}
		return syscall.Mmap(int(file.Fd()), 0, int(byteSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	}()
	if err != nil {
		os.Remove(path)
		return nil, systemError("creating shared memory "+key, err)
	}
	return &SharedMemory{key: key, path: path, data: data}, nil
}

// unmapAndRemove unmaps data and removes the object's file; a file already gone is no error.
func unmapAndRemove(data []byte, path string) error {
	unmapErr := syscall.Munmap(data)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return systemError("removing shared memory", err)
	}
	if unmapErr != nil {
		return systemError("unmapping shared memory "+path, unmapErr)
	}
	return nil
}

// systemError returns err, a system call's, as a status error with the code that fits it.
func systemError(what string, err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, fs.ErrExist):
		code = codes.AlreadyExists
	case errors.Is(err, fs.ErrNotExist):
		code = codes.NotFound
	case errors.Is(err, fs.ErrPermission):
		code = codes.PermissionDenied
	case errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EFBIG):
		code = codes.ResourceExhausted
	}
	return status.Errorf(code, "tensorops: %s: %v", what, err)
}
