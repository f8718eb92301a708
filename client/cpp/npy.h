// Reading and writing NumPy `.npy` files (format versions 1.0, 2.0 and 3.0), so that the CLI and
// tests can exchange tensors with Python.
//
//   absl::StatusOr<Tensor> x = ReadNpy("x.npy");
//   if (!x.ok()) return x.status();
//   absl::Status written = WriteNpy("out.npy", x->view());
//
// dtypes map to NumPy descriptors as `|b1` bool, `|u1` uint8, `|i1` int8, `<i2` int16, `<i4`
// int32, `<i8` int64, `<f2` float16, `<f4` float32, `<f8` float64, `<c8` complex64 and `<c16`
// complex128. NumPy has no bfloat16, so bfloat16 tensors are written as `<u2` holding the raw bits
// (`np.load(...).view(ml_dtypes.bfloat16)` restores them); tensorops has no uint16, so `<u2` files
// are read only when NpyReadOptions::uint16_as_bfloat16 asks for exactly that reinterpretation.
//
// Only C-order, little-endian, numeric arrays are read; Fortran order, big-endian descriptors,
// structured and object arrays are rejected. Files are written exactly as `numpy.save` (NumPy 2.x)
// writes them, header padding included.
#ifndef TENSOROPS_CLIENT_CPP_NPY_H_
#define TENSOROPS_CLIENT_CPP_NPY_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace tensorops {

// NpyReadOptions change how ParseNpy and ReadNpy interpret a file.
struct NpyReadOptions {
  // Read `<u2` arrays as bfloat16 raw bits (what WriteNpy writes for bfloat16). When false, `<u2`
  // is rejected like every other dtype tensorops does not have.
  bool uint16_as_bfloat16 = false;
  // How the caller asks for that, named in the error for a `<u2` array read without it (the CLI
  // says "--bfloat16").
  std::string_view uint16_as_bfloat16_option = "NpyReadOptions::uint16_as_bfloat16";
};

// ParseNpy decodes the contents of a `.npy` file. `name` only labels error messages (a path, or
// "<memory>"). Returns INVALID_ARGUMENT, naming `name` and the offending field, for a bad magic
// string, an unsupported version, a truncated file, a header that is not the dict NumPy writes, an
// unsupported or big-endian `descr`, `fortran_order: True`, a shape whose size overflows or whose
// rank exceeds kMaxRank, or data whose length differs from what the shape needs. Never reads past
// `bytes` and never allocates more than the data it was given.
absl::StatusOr<Tensor> ParseNpy(std::string_view bytes, std::string_view name = "<memory>",
                                const NpyReadOptions& options = {});

// ReadNpy reads and parses the file at `path`. Returns NOT_FOUND or PERMISSION_DENIED (or another
// code matching errno) when the file cannot be read, otherwise as ParseNpy.
absl::StatusOr<Tensor> ReadNpy(const std::string& path, const NpyReadOptions& options = {});

// SerializeNpy returns the bytes of a version 1.0 `.npy` file holding `view`'s elements in
// row-major order; strided views are written contiguously.
std::string SerializeNpy(const TensorView& view);

// WriteNpy writes SerializeNpy(view) to `path`, replacing the file: through a file beside it
// (`path`.tmp-PID) renamed over it, so that a failed write leaves the old file as it was (a path
// that is no regular file, /dev/stdout say, is written directly). Returns an error with a code
// matching errno when the file cannot be written.
absl::Status WriteNpy(const std::string& path, const TensorView& view);

}  // namespace tensorops

#endif  // TENSOROPS_CLIENT_CPP_NPY_H_
