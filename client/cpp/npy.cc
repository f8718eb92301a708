#include "client/cpp/npy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"

namespace tensorops {

namespace {

// The file's bytes are the tensor's bytes, which the rest of tensorops holds little-endian.
static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
// Magic, two version bytes, then a 2-byte (v1) or 4-byte (v2, v3) little-endian header length.
constexpr size_t kVersionEnd = 8;
// numpy.lib.format.ARRAY_ALIGN: the data starts at a multiple of this offset.
constexpr size_t kArrayAlign = 64;
// numpy.lib.format.GROWTH_AXIS_MAX_DIGITS: NumPy reserves room in the header for the first
// dimension to grow to this many digits; writing the same spaces keeps our files byte-identical.
constexpr size_t kGrowthAxisMaxDigits = 21;

struct DescrEntry {
  DataType dtype;
  // As NumPy's dtype.str writes it.
  std::string_view descr;
};

constexpr DescrEntry kDescrs[] = {
    {DataType::kBool, "|b1"},    {DataType::kUInt8, "|u1"},     {DataType::kInt8, "|i1"},
    {DataType::kInt16, "<i2"},   {DataType::kInt32, "<i4"},     {DataType::kInt64, "<i8"},
    {DataType::kFloat16, "<f2"}, {DataType::kBFloat16, "<u2"},  {DataType::kFloat32, "<f4"},
    {DataType::kFloat64, "<f8"}, {DataType::kComplex64, "<c8"}, {DataType::kComplex128, "<c16"},
};

std::string_view DescrOf(DataType dtype) {
  for (const DescrEntry& entry : kDescrs) {
    if (entry.dtype == dtype) return entry.descr;
  }
  return "";
}

// Maps a descr string to a dtype; on failure returns the reason, for the caller to prefix.
absl::StatusOr<DataType> DataTypeOfDescr(std::string_view descr, const NpyReadOptions& options) {
  if (descr.empty()) return absl::InvalidArgumentError("is empty");
  const char byte_order = descr.front();
  std::string_view type_code = descr;
  if (byte_order == '<' || byte_order == '>' || byte_order == '|' || byte_order == '=') {
    type_code.remove_prefix(1);
  }
  if (!type_code.empty() && type_code.front() == 'O') {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is an object array, which cannot be read without pickle", descr));
  }
  for (const DescrEntry& entry : kDescrs) {
    if (entry.descr.substr(1) != type_code) continue;
    if (entry.dtype == DataType::kBFloat16 && !options.uint16_as_bfloat16) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'%s' (uint16) is not a tensorops dtype; it is read as bfloat16 bits only on request "
          "(%s)",
          descr, options.uint16_as_bfloat16_option));
    }
    // One-byte types have no byte order; every other type must be little-endian.
    if (byte_order == '>' && ItemSize(entry.dtype) > 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'%s' is big-endian, which is not supported; convert it with arr.astype('%s')", descr,
          entry.descr));
    }
    return entry.dtype;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "'%s' is not a supported dtype (supported: |b1 |u1 |i1 <i2 <i4 <i8 <f2 <f4 <f8 <c8 <c16)",
      descr));
}

// NpyHeader is what the header dict says.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// HeaderParser reads the Python dict literal of an npy header: string keys `descr`, `fortran_order`
// and `shape`, each exactly once, with a string, True/False and a tuple of non-negative ints.
// Anything else, including constructs Python would accept but NumPy never writes, is an error.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool seen_descr = false, seen_fortran_order = false, seen_shape = false;
    if (!Consume('{')) return Error("", "does not start with '{'");
    while (!Consume('}')) {
      std::string key;
      if (!ParseString(&key)) return Error("", "is not a dict with string keys");
      if (!Consume(':')) return Error(key, "is not followed by ':'");
      if (key == "descr") {
        if (seen_descr) return Error(key, "appears twice");
        seen_descr = true;
        SkipSpace();
        if (Peek() == '[') return Error(key, "is a structured dtype, which is not supported");
        if (!ParseString(&header.descr)) return Error(key, "is not a string");
      } else if (key == "fortran_order") {
        if (seen_fortran_order) return Error(key, "appears twice");
        seen_fortran_order = true;
        if (!ParseBool(&header.fortran_order)) return Error(key, "is not True or False");
      } else if (key == "shape") {
        if (seen_shape) return Error(key, "appears twice");
        seen_shape = true;
        absl::Status shape_status = ParseShape(&header.shape);
        if (!shape_status.ok()) return shape_status;
      } else {
        return Error("", absl::StrFormat("has an unexpected key '%s'", key));
      }
      // A comma separates entries; after the last one it is optional.
      if (!Consume(',')) {
        if (!Consume('}')) return Error(key, "is not followed by ',' or '}'");
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("", "has text after the closing '}'");
    if (!seen_descr) return Error("descr", "is missing");
    if (!seen_fortran_order) return Error("fortran_order", "is missing");
    if (!seen_shape) return Error("shape", "is missing");
    return header;
  }

 private:
  // An empty `field` blames the header as a whole.
  absl::Status Error(std::string_view field, std::string_view detail) const {
    if (field.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: npy header %s", name_, detail));
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: npy header field '%s' %s", name_, field, detail));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  // Skips whitespace, then consumes `c` if it comes next.
  bool Consume(char c) {
    SkipSpace();
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  // A quoted string without escapes (no descr or key NumPy writes needs one).
  bool ParseString(std::string* out) {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return false;
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return false;
    std::string_view body = text_.substr(pos_ + 1, end - pos_ - 1);
    if (body.find('\\') != std::string_view::npos) return false;
    out->assign(body);
    pos_ = end + 1;
    return true;
  }

  bool ParseBool(bool* out) {
    SkipSpace();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view literal(word);
      if (text_.substr(pos_, literal.size()) == literal) {
        pos_ += literal.size();
        *out = value;
        return true;
      }
    }
    return false;
  }

  // A Python tuple of ints: "()", "(3,)", "(2, 3)"; Python 2 writers appended 'L' to longs.
  absl::Status ParseShape(Shape* shape) {
    if (!Consume('(')) return Error("shape", "is not a tuple");
    while (!Consume(')')) {
      SkipSpace();
      const size_t start = pos_;
      if (Peek() == '-') ++pos_;
      while (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) ++pos_;
      const std::string_view digits = text_.substr(start, pos_ - start);
      int64_t size = 0;
      if (digits.empty() || digits == "-") {
        return Error("shape", absl::StrFormat("has a non-integer entry %d", shape->size()));
      }
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), size);
      if (error != std::errc() || end != digits.data() + digits.size()) {
        return Error("shape",
                     absl::StrFormat("entry %d = %s does not fit in int64", shape->size(), digits));
      }
      if (size < 0) {
        return Error("shape", absl::StrFormat("entry %d = %d is negative", shape->size(), size));
      }
      if (shape->size() == static_cast<size_t>(kMaxRank)) {
        return Error("shape", absl::StrFormat("has more than %d dimensions", kMaxRank));
      }
      shape->push_back(size);
      if (Peek() == 'L') ++pos_;
      if (!Consume(',')) {
        if (!Consume(')')) return Error("shape", "is not a tuple of ints");
        break;
      }
    }
    return absl::OkStatus();
  }

  std::string_view text_;
  std::string_view name_;
  size_t pos_ = 0;
};

uint32_t ReadLittleEndian(std::string_view bytes, size_t offset, size_t width) {
  uint32_t value = 0;
  for (size_t i = 0; i < width; ++i) {
    value |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return value;
}

// Formats a shape as Python's repr of a tuple: "()", "(3,)", "(2, 3)".
std::string PythonTuple(ShapeSpan shape) {
  if (shape.size() == 1) return absl::StrFormat("(%d,)", shape[0]);
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace

absl::StatusOr<Tensor> ParseNpy(std::string_view bytes, std::string_view name,
                                const NpyReadOptions& options) {
  if (bytes.size() < kVersionEnd || bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not an npy file (it does not start with \"\\x93NUMPY\")", name));
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: npy format version %d.%d is not supported (expected 1.0, 2.0 or 3.0)",
                        name, major, minor));
  }
  const size_t length_width = major == 1 ? 2 : 4;
  const size_t header_start = kVersionEnd + length_width;
  if (bytes.size() < header_start) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated npy file (%d bytes end inside the header length)", name, bytes.size()));
  }
  const size_t header_length = ReadLittleEndian(bytes, kVersionEnd, length_width);
  if (header_length > bytes.size() - header_start) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated npy file (the header length is %d bytes but only %d follow)",
                        name, header_length, bytes.size() - header_start));
  }
  absl::StatusOr<NpyHeader> header =
      HeaderParser(bytes.substr(header_start, header_length), name).Parse();
  if (!header.ok()) return header.status();

  absl::StatusOr<DataType> dtype = DataTypeOfDescr(header->descr, options);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: npy header field 'descr' %s", name, dtype.status().message()));
  }
  if (header->fortran_order) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: npy header field 'fortran_order' is True; only C-order arrays are supported (save "
        "np.ascontiguousarray(arr))",
        name));
  }
  absl::StatusOr<int64_t> numel = CheckedNumElements(header->shape, name);
  if (!numel.ok()) return numel.status();
  const int64_t itemsize = ItemSize(*dtype);
  const std::string_view data = bytes.substr(header_start + header_length);
  // Compare element counts rather than byte counts so that a huge shape cannot overflow.
  if (*numel > static_cast<int64_t>(data.size()) / itemsize ||
      *numel * itemsize != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: npy data is %d bytes, but shape %s of %s needs %d elements of %d bytes", name,
        data.size(), PythonTuple(header->shape), header->descr, *numel, itemsize));
  }

  Tensor tensor(*dtype, header->shape);
  std::memcpy(tensor.data(), data.data(), data.size());
  if (*dtype == DataType::kBool) {
    // NumPy reads any non-zero byte as True, while the wire accepts only 0 and 1.
    auto* values = static_cast<unsigned char*>(tensor.data());
    for (size_t i = 0; i < data.size(); ++i) values[i] = values[i] != 0;
  }
  return tensor;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path, const NpyReadOptions& options) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("cannot open %s", path));
  }
  std::string bytes;
  char buffer[1 << 16];
  size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    bytes.append(buffer, read);
  }
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("cannot read %s", path));
  }
  return ParseNpy(bytes, path, options);
}

std::string SerializeNpy(const TensorView& view) {
  std::string header = absl::StrFormat("{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                                       DescrOf(view.dtype()), PythonTuple(view.shape()));
  if (view.rank() > 0) {
    header.append(kGrowthAxisMaxDigits - absl::StrCat(view.shape()[0]).size(), ' ');
  }
  // Version 1.0's 16-bit length always suffices: kMaxRank sizes of at most 19 digits each.
  const size_t prefix_length = kVersionEnd + 2;
  const size_t padding = kArrayAlign - (prefix_length + header.size() + 1) % kArrayAlign;
  header.append(padding, ' ');
  header.push_back('\n');

  const int64_t data_length = view.numel() * view.itemsize();
  std::string bytes;
  bytes.reserve(prefix_length + header.size() + static_cast<size_t>(data_length));
  bytes.append(kMagic);
  bytes.push_back('\x01');
  bytes.push_back('\x00');
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes.append(header);
  const size_t data_start = bytes.size();
  bytes.resize(data_start + static_cast<size_t>(data_length));
  CopyElements(view, MutableTensorView(view.dtype(), view.shape(), bytes.data() + data_start));
  return bytes;
}

namespace {

// WriteWhole writes `bytes` to `path`, created or truncated.
absl::Status WriteWhole(const std::string& path, std::string_view bytes,
                        std::string_view shown_path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("cannot create %s", shown_path));
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("cannot write %s", shown_path));
  }
  // fclose flushes; a full disk may only show up here.
  if (std::fclose(file.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("cannot write %s", shown_path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteNpy(const std::string& path, const TensorView& view) {
  const std::string bytes = SerializeNpy(view);
  // A regular file (or a new one) is written beside it and renamed over it, so that a failed
  // write (a full disk) leaves the old file whole rather than a truncated one. Anything else
  // (/dev/stdout, a pipe) is written as it is.
  struct stat existing = {};
  if (stat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode)) {
    return WriteWhole(path, bytes, path);
  }
  const std::string temporary = absl::StrFormat("%s.tmp-%d", path, getpid());
  if (absl::Status written = WriteWhole(temporary, bytes, path); !written.ok()) {
    std::remove(temporary.c_str());
    return written;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const absl::Status renamed =
        absl::ErrnoToStatus(errno, absl::StrFormat("cannot write %s", path));
    std::remove(temporary.c_str());
    return renamed;
  }
  return absl::OkStatus();
}

}  // namespace tensorops
