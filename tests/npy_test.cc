// Tests of the .npy reader and writer: round trips of every dtype, headers byte-identical to what
// numpy.save writes, and malformed files rejected with messages naming the file and the field.
#include "client/cpp/npy.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace tensorops {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr NpyReadOptions kBFloat16Options{.uint16_as_bfloat16 = true};

// NpyFile builds a version-`major` file around a header dict written verbatim, padded as NumPy
// pads (to a multiple of 64 bytes, ending in '\n'), followed by `data`.
std::string NpyFile(std::string_view dict, std::string_view data, int major = 1) {
  const size_t length_width = major == 1 ? 2 : 4;
  std::string header(dict);
  const size_t prefix = 8 + length_width;
  header.append(64 - (prefix + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  std::string file =
      absl::StrCat("\x93NUMPY", std::string(1, static_cast<char>(major)), std::string(1, '\0'));
  for (size_t i = 0; i < length_width; ++i) {
    file.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  return absl::StrCat(file, header, std::string(data));
}

std::string_view Bytes(const Tensor& tensor) {
  return std::string_view(static_cast<const char*>(tensor.data()),
                          static_cast<size_t>(tensor.nbytes()));
}

// Random bytes that are valid elements of `dtype` (bool bytes must be 0 or 1; any bit pattern is a
// valid element of the other dtypes, NaNs included, and round trips compare bytes).
Tensor RandomBytesTensor(DataType dtype, const Shape& shape, absl::BitGen& gen) {
  Tensor tensor(dtype, shape);
  auto* bytes = static_cast<unsigned char*>(tensor.data());
  for (int64_t i = 0; i < tensor.nbytes(); ++i) {
    bytes[i] =
        dtype == DataType::kBool ? absl::Uniform<int>(gen, 0, 2) : absl::Uniform<int>(gen, 0, 256);
  }
  return tensor;
}

class NpyRoundTripTest : public ::testing::TestWithParam<DataType> {};

TEST_P(NpyRoundTripTest, EveryShapeRoundTrips) {
  const DataType dtype = GetParam();
  absl::BitGen gen;
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{3, 0, 2},
                             Shape{1, 2, 3, 4}, Shape(16, 1)}) {
    SCOPED_TRACE(ShapeToString(shape));
    const Tensor original = RandomBytesTensor(dtype, shape, gen);
    const std::string file = SerializeNpy(original.view());
    EXPECT_EQ(file.size() % 64, static_cast<size_t>(original.nbytes()) % 64);
    absl::StatusOr<Tensor> parsed = ParseNpy(file, "round trip", kBFloat16Options);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->dtype(), dtype);
    EXPECT_EQ(parsed->shape(), shape);
    EXPECT_EQ(Bytes(*parsed), Bytes(original));
  }
}

TEST_P(NpyRoundTripTest, ThroughAFile) {
  const DataType dtype = GetParam();
  absl::BitGen gen;
  const Tensor original = RandomBytesTensor(dtype, {3, 4}, gen);
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            absl::StrCat("npy_test_", std::string(DataTypeName(dtype)), ".npy"))
                               .string();
  ASSERT_TRUE(WriteNpy(path, original.view()).ok());
  absl::StatusOr<Tensor> read = ReadNpy(path, kBFloat16Options);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->dtype(), dtype);
  EXPECT_EQ(read->shape(), original.shape());
  EXPECT_EQ(Bytes(*read), Bytes(original));
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(AllDataTypes, NpyRoundTripTest, ::testing::ValuesIn(kAllDataTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(DataTypeName(info.param));
                         });

// The expected files below are what numpy.save (NumPy 2.4) writes for the same arrays, byte for
// byte: the dict, 21 minus the digits of the first size in spaces (room for the first dimension to
// grow), then spaces up to a 64-byte boundary and '\n'.
TEST(NpyFormatTest, Float32HeaderMatchesNumPy) {
  Tensor tensor = Tensor::Zeros(DataType::kFloat32, {2, 3});
  const std::string expected_header = absl::StrCat(
      std::string("\x93NUMPY\x01\x00\x76\x00", 10),
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", std::string(58, ' '), "\n");
  ASSERT_EQ(expected_header.size(), 128u);
  const std::string file = SerializeNpy(tensor.view());
  EXPECT_EQ(file, absl::StrCat(expected_header, std::string(24, '\0')));
}

TEST(NpyFormatTest, ScalarBoolHeaderMatchesNumPy) {
  Tensor tensor = Tensor::Zeros(DataType::kBool, {});
  tensor.data_as<bool>()[0] = true;
  const std::string expected = absl::StrCat(
      std::string("\x93NUMPY\x01\x00\x76\x00", 10),
      "{'descr': '|b1', 'fortran_order': False, 'shape': (), }", std::string(62, ' '), "\n\x01");
  EXPECT_EQ(SerializeNpy(tensor.view()), expected);
}

TEST(NpyFormatTest, DescrOfEveryDataType) {
  const std::pair<DataType, std::string_view> descrs[] = {
      {DataType::kBool, "'|b1'"},      {DataType::kUInt8, "'|u1'"},
      {DataType::kInt8, "'|i1'"},      {DataType::kInt16, "'<i2'"},
      {DataType::kInt32, "'<i4'"},     {DataType::kInt64, "'<i8'"},
      {DataType::kFloat16, "'<f2'"},   {DataType::kBFloat16, "'<u2'"},
      {DataType::kFloat32, "'<f4'"},   {DataType::kFloat64, "'<f8'"},
      {DataType::kComplex64, "'<c8'"}, {DataType::kComplex128, "'<c16'"},
  };
  for (const auto& [dtype, descr] : descrs) {
    const std::string file = SerializeNpy(Tensor::Zeros(dtype, {7}).view());
    EXPECT_THAT(file, HasSubstr(absl::StrCat("{'descr': ", std::string(descr),
                                             ", 'fortran_order': False, 'shape': (7,), }")))
        << DataTypeName(dtype);
  }
}

TEST(NpyFormatTest, StridedViewIsWrittenInRowMajorOrder) {
  Tensor tensor(DataType::kInt32, {2, 3});
  for (int32_t i = 0; i < 6; ++i) tensor.data_as<int32_t>()[i] = i;
  // The transpose: shape [3, 2], strides [1, 3].
  const TensorView transposed(DataType::kInt32, Shape{3, 2}, Shape{1, 3}, tensor.data());
  absl::StatusOr<Tensor> parsed = ParseNpy(SerializeNpy(transposed));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->shape(), (Shape{3, 2}));
  const int32_t expected[] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(parsed->data_as<int32_t>()[i], expected[i]) << i;
}

TEST(NpyParseTest, ReadsOlderAndOtherWriters) {
  const std::string data(24, '\0');
  const std::string_view dicts[] = {
      // NumPy < 1.23: no growth padding.
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      // Other key order, double quotes, no spaces, no trailing comma.
      R"({"shape":(2,3),"fortran_order":False,"descr":"<f4"})",
      // Python 2 longs.
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
  };
  for (std::string_view dict : dicts) {
    for (int major : {1, 2, 3}) {
      absl::StatusOr<Tensor> parsed = ParseNpy(NpyFile(dict, data, major));
      ASSERT_TRUE(parsed.ok()) << dict << " v" << major << ": " << parsed.status();
      EXPECT_EQ(parsed->dtype(), DataType::kFloat32);
      EXPECT_EQ(parsed->shape(), (Shape{2, 3}));
    }
  }
}

// fuzz/npy_fuzzer's first finding: an empty array whose other sizes overflow int64 together. It is
// a valid, empty tensor; counting its elements overflowed before the zero (undefined behaviour,
// which the sanitize tree's UBSan reports).
TEST(NpyParseTest, EmptyShapeWhoseOtherSizesOverflowTogetherIsEmpty) {
  for (const std::string_view dict :
       {"{'descr': '<f4', 'fortran_order': False, 'shape': (555, 55555, 5550, 1110, 5053, 5552, "
        "0), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1099511627776, 1099511627776), "
        "}"}) {
    absl::StatusOr<Tensor> parsed = ParseNpy(NpyFile(dict, "", 1));
    ASSERT_TRUE(parsed.ok()) << dict << ": " << parsed.status();
    EXPECT_EQ(parsed->numel(), 0);
    EXPECT_EQ(parsed->nbytes(), 0);
    EXPECT_EQ(SerializeNpy(parsed->view()).size() % 64, 0u);
  }
}

TEST(NpyParseTest, NonZeroBoolBytesReadAsTrue) {
  absl::StatusOr<Tensor> parsed = ParseNpy(NpyFile(
      "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x02\x01", 3)));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto* bytes = static_cast<const unsigned char*>(parsed->data());
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[1], 1);
  EXPECT_EQ(bytes[2], 1);
}

TEST(NpyParseTest, Uint16NeedsTheBFloat16Option) {
  const std::string file =
      NpyFile("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }", std::string(2, '\0'));
  absl::StatusOr<Tensor> rejected = ParseNpy(file, "bits.npy");
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rejected.status().message(),
              AllOf(HasSubstr("bits.npy"), HasSubstr("descr"), HasSubstr("uint16")));
  absl::StatusOr<Tensor> accepted = ParseNpy(file, "bits.npy", kBFloat16Options);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(accepted->dtype(), DataType::kBFloat16);
}

struct MalformedCase {
  std::string name;
  std::string file;
  // Substrings the error message must contain besides the file's name.
  std::vector<std::string> message_parts;
};

std::vector<MalformedCase> MalformedCases() {
  const std::string f4x6(24, '\0');
  auto f4_file = [&](std::string_view dict) { return NpyFile(dict, f4x6); };
  std::string huge_length =
      NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", f4x6);
  huge_length[8] = '\xff';
  huge_length[9] = '\xff';
  std::string bad_version =
      NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", f4x6);
  bad_version[6] = '\x04';
  return {
      {"empty", "", {"not an npy file"}},
      {"bad magic", "\x93NUMPZ\x01\x00\x00\x00", {"not an npy file"}},
      {"bad version", bad_version, {"version 4.0"}},
      {"no header length", std::string("\x93NUMPY\x02\x00\x10", 9), {"truncated"}},
      {"header longer than file", huge_length, {"truncated"}},
      {"unsupported descr",
       f4_file("{'descr': '<f3', 'fortran_order': False, 'shape': (6,), }"),
       {"descr", "<f3"}},
      {"string descr",
       f4_file("{'descr': '<U1', 'fortran_order': False, 'shape': (6,), }"),
       {"descr", "<U1"}},
      {"object descr",
       f4_file("{'descr': '|O', 'fortran_order': False, 'shape': (6,), }"),
       {"descr", "object"}},
      {"big-endian",
       f4_file("{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }"),
       {"descr", "big-endian"}},
      {"structured",
       f4_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }"),
       {"descr", "structured"}},
      {"descr not a string",
       f4_file("{'descr': 4, 'fortran_order': False, 'shape': (6,), }"),
       {"descr"}},
      {"fortran order",
       f4_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"),
       {"fortran_order"}},
      {"fortran order not bool",
       f4_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }"),
       {"fortran_order"}},
      {"missing shape",
       f4_file("{'descr': '<f4', 'fortran_order': False, }"),
       {"shape", "missing"}},
      {"missing descr", f4_file("{'fortran_order': False, 'shape': (6,), }"), {"descr", "missing"}},
      {"extra key",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1, }"),
       {"extra"}},
      {"duplicate key",
       f4_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,), }"),
       {"descr", "twice"}},
      {"shape not a tuple",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': [6], }"),
       {"shape"}},
      {"negative size",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }"),
       {"shape", "negative"}},
      {"non-integer size",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (6.0,), }"),
       {"shape"}},
      {"size beyond int64",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
       {"shape", "int64"}},
      {"element count overflow",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
       {"int64"}},
      {"byte size overflow",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }"),
       {"needs 4611686018427387904 elements"}},
      {"rank above 16",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': "
               "(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6), }"),
       {"shape", "16"}},
      {"too little data",
       NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }", f4x6),
       {"24 bytes", "(7,)"}},
      {"too much data",
       NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", f4x6),
       {"24 bytes", "(5,)"}},
      {"not a dict", f4_file("['descr', '<f4']"), {"header"}},
      {"unterminated",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)"),
       {"header"}},
      {"trailing text",
       f4_file("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x"),
       {"after"}},
  };
}

TEST(NpyParseTest, MalformedFilesAreRejected) {
  for (const MalformedCase& test_case : MalformedCases()) {
    SCOPED_TRACE(test_case.name);
    absl::StatusOr<Tensor> parsed = ParseNpy(test_case.file, "bad.npy");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("bad.npy"));
    for (const std::string& part : test_case.message_parts) {
      EXPECT_THAT(parsed.status().message(), HasSubstr(part));
    }
  }
}

TEST(NpyParseTest, EveryTruncationIsRejected) {
  const std::string file = SerializeNpy(Tensor::Zeros(DataType::kComplex128, {2, 2}).view());
  for (size_t length = 0; length < file.size(); ++length) {
    EXPECT_FALSE(ParseNpy(std::string_view(file).substr(0, length)).ok()) << length;
  }
}

// Random corruption of a valid file must give a status (either outcome is fine), never a crash,
// a hang or a huge allocation; the sanitizer builds make this test meaningful.
TEST(NpyParseTest, RandomCorruptionNeverCrashes) {
  absl::BitGen gen;
  const std::string valid = SerializeNpy(Tensor::Zeros(DataType::kFloat64, {3, 5}).view());
  const size_t header_end = valid.size() - 3 * 5 * 8;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string file = valid;
    const int edits = absl::Uniform<int>(gen, 1, 6);
    for (int e = 0; e < edits; ++e) {
      if (file.empty()) break;
      const size_t position = absl::Uniform<size_t>(gen, 0, std::min(header_end, file.size()));
      switch (absl::Uniform<int>(gen, 0, 3)) {
        case 0:  // Replace a byte, biased towards the characters the grammar cares about.
          file[position] = absl::Bernoulli(gen, 0.5)
                               ? "{}()[],:'\"-0123456789L TF\n"[absl::Uniform<int>(gen, 0, 26)]
                               : static_cast<char>(absl::Uniform<int>(gen, 0, 256));
          break;
        case 1:
          file.erase(position, 1);
          break;
        default:
          file.resize(absl::Uniform<size_t>(gen, 0, file.size()));
          break;
      }
    }
    absl::StatusOr<Tensor> parsed = ParseNpy(file);
    if (parsed.ok()) {
      EXPECT_LE(parsed->nbytes(), static_cast<int64_t>(file.size()));
    }
  }
}

TEST(NpyFileTest, MissingFileIsNotFound) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "npy_test_does_not_exist.npy").string();
  absl::StatusOr<Tensor> read = ReadNpy(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(path));
}

TEST(NpyFileTest, ErrorsNameThePath) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "npy_test_fortran.npy").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << NpyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                   std::string(24, '\0'));
  }
  absl::StatusOr<Tensor> read = ReadNpy(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), AllOf(HasSubstr(path), HasSubstr("fortran_order")));
  std::filesystem::remove(path);
}

TEST(NpyFileTest, UnwritablePathIsAnError) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "no_such_dir" / "x.npy").string();
  absl::Status status = WriteNpy(path, Tensor::Zeros(DataType::kInt8, {1}).view());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path));
}

}  // namespace
}  // namespace tensorops
