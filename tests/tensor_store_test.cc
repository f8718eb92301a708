// Tests of the tensor store (server/store/tensor_store.h): names, chunked uploads and their
// visibility, the replace and version rules, the memory limit, namespace isolation, and the
// handles' locking under concurrent in-place updates, overwrites and deletes.
#include "server/store/tensor_store.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "kernels/tensor.h"
#include "tests/fake_device.h"
#include "tests/wait_for.h"

namespace tensorops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Options = TensorStore::UploadOptions;

#define STORE_TEST_CONCAT_INNER(a, b) a##b
#define STORE_TEST_CONCAT(a, b) STORE_TEST_CONCAT_INNER(a, b)
// ASSERT_OK_AND_ASSIGN(lhs, expr): asserts that the StatusOr `expr` is OK and moves its value
// into `lhs`.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(STORE_TEST_CONCAT(status_or_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(status_or, lhs, expr) \
  auto status_or = (expr);                              \
  ASSERT_TRUE(status_or.ok()) << status_or.status();    \
  lhs = *std::move(status_or)

// HasError is true when `status` has `code` and its message contains every one of `parts`.
::testing::AssertionResult HasError(const absl::Status& status, absl::StatusCode code,
                                    std::initializer_list<std::string_view> parts = {}) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "expected code " << absl::StatusCodeToString(code) << ", got " << status;
  }
  for (std::string_view part : parts) {
    if (std::string_view(status.message().data(), status.message().size()).find(part) ==
        std::string_view::npos) {
      return ::testing::AssertionFailure()
             << "message of " << status << " lacks \"" << part << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult HasError(const absl::StatusOr<T>& result, absl::StatusCode code,
                                    std::initializer_list<std::string_view> parts = {}) {
  return HasError(result.status(), code, parts);
}

// Put stores `values` with `shape` (their count must match) and returns the new version.
template <typename T>
absl::StatusOr<int64_t> Put(TensorStore& store, std::string_view ns, std::string_view name,
                            const Shape& shape, const std::vector<T>& values,
                            const Options& options = {}) {
  return store.Put(ns, name, TensorView(DataTypeOf<T>, shape, values.data()), options);
}

// Values copies a handle's elements out.
template <typename T, typename Handle>
std::vector<T> Values(const Handle& handle) {
  const TensorView view = handle.view();
  const T* data = view.template data_as<T>();
  return std::vector<T>(data, data + view.numel());
}

std::string AsBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// Names.

TEST(TensorNameTest, AcceptsValidNames) {
  for (const std::string& name :
       {std::string("w"), std::string("A.b_c-d/e0"), std::string("layer/0/weight.bias"),
        std::string("a..b"), std::string("x/"), std::string("-dash"), std::string("_u"),
        std::string(kMaxTensorNameBytes, 'n')}) {
    EXPECT_TRUE(ValidateTensorName(name).ok()) << name << ": " << ValidateTensorName(name);
  }
}

TEST(TensorNameTest, RejectsEachInvalidClassNamingTheRule) {
  constexpr std::string_view kRule = "[A-Za-z0-9._/-]";
  EXPECT_TRUE(
      HasError(ValidateTensorName(""), absl::StatusCode::kInvalidArgument, {"empty", kRule}));
  EXPECT_TRUE(HasError(ValidateTensorName(std::string(kMaxTensorNameBytes + 1, 'n')),
                       absl::StatusCode::kInvalidArgument, {"too long", "(257 bytes)", kRule}));
  EXPECT_TRUE(HasError(ValidateTensorName("a b"), absl::StatusCode::kInvalidArgument,
                       {"\"a b\"", "offset 1", kRule}));
  EXPECT_TRUE(HasError(ValidateTensorName("w:0"), absl::StatusCode::kInvalidArgument,
                       {"\"w:0\"", "offset 1"}));
  EXPECT_TRUE(HasError(ValidateTensorName("caf\xc3\xa9"), absl::StatusCode::kInvalidArgument,
                       {"\"caf\\xc3\\xa9\"", "offset 3"}));
  EXPECT_TRUE(HasError(ValidateTensorName(std::string("a\0b", 3)),
                       absl::StatusCode::kInvalidArgument,
                       {"\"a\\x00b\"", "offset 1", "('\\x00')"}));
  EXPECT_TRUE(HasError(ValidateTensorName("/abs"), absl::StatusCode::kInvalidArgument,
                       {"\"/abs\"", "starts with '/'", "not starting with '/' or '.'"}));
  EXPECT_TRUE(HasError(ValidateTensorName(".hidden"), absl::StatusCode::kInvalidArgument,
                       {"starts with '.'"}));
  EXPECT_TRUE(
      HasError(ValidateTensorName(".."), absl::StatusCode::kInvalidArgument, {"starts with '.'"}));
}

TEST(TensorNameTest, LongAndBinaryNamesAreShortenedAndEscaped) {
  std::string name(1000, '\xff');
  const absl::Status status = ValidateTensorName(name);
  ASSERT_TRUE(HasError(status, absl::StatusCode::kInvalidArgument, {"(1000 bytes)", "\\xff"}));
  // 64 bytes shown, 4 characters each, plus the rule: far less than the name's 4000 escaped.
  EXPECT_LT(status.message().size(), 500u) << status;
}

TEST(TensorNameTest, EveryOperationChecksTheName) {
  TensorStore store(1 << 20);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_TRUE(HasError(store.BeginUpload("", "/x", DataType::kFloat32, {1}), kInvalid));
  EXPECT_TRUE(HasError(store.Read("", "/x"), kInvalid));
  EXPECT_TRUE(HasError(store.Update("", "/x"), kInvalid));
  EXPECT_TRUE(HasError(store.Delete("", "/x"), kInvalid));
  EXPECT_TRUE(HasError(store.Info("", "/x"), kInvalid));
}

// ---------------------------------------------------------------------------------------------
// Uploads.

TEST(TensorStoreTest, ChunkedUploadRoundTrip) {
  TensorStore store(1 << 20);
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  const std::string bytes = AsBytes(values);
  const absl::Time before = absl::Now();
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                       store.BeginUpload("", "w", DataType::kFloat32, {2, 3}));
  EXPECT_EQ(upload.bytes(), 24);
  EXPECT_EQ(upload.name(), "w");
  ASSERT_TRUE(upload.Write(0, std::string_view(bytes).substr(0, 10)).ok());
  ASSERT_TRUE(upload.Write(10, std::string_view(bytes).substr(10, 0)).ok());
  ASSERT_TRUE(upload.Write(10, std::string_view(bytes).substr(10)).ok());
  EXPECT_EQ(upload.bytes_received(), 24);
  ASSERT_OK_AND_ASSIGN(const int64_t version, upload.Commit());
  EXPECT_EQ(version, 1);
  EXPECT_TRUE(upload.committed());

  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
  EXPECT_EQ(read.version(), 1);
  EXPECT_EQ(read.dtype(), DataType::kFloat32);
  EXPECT_THAT(read.shape(), ElementsAre(2, 3));
  EXPECT_EQ(read.bytes(), 24);
  EXPECT_EQ(read.name(), "w");
  EXPECT_TRUE(read.view().is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(read.view().data()) % 64, 0u);
  EXPECT_EQ(Values<float>(read), values);

  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata info, store.Info("", "w"));
  EXPECT_EQ(info.name, "w");
  EXPECT_EQ(info.dtype, DataType::kFloat32);
  EXPECT_THAT(info.shape, ElementsAre(2, 3));
  EXPECT_EQ(info.bytes, 24);
  EXPECT_EQ(info.version, 1);
  EXPECT_EQ(info.device, "cpu");
  EXPECT_GE(info.created, before);
  EXPECT_EQ(info.created, info.updated);
  EXPECT_EQ(store.tensor_count(), 1);
  EXPECT_EQ(store.used_bytes(), 24);
}

TEST(TensorStoreTest, MutableChunkWritesInPlace) {
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                       store.BeginUpload("", "i", DataType::kInt64, {3}));
  ASSERT_OK_AND_ASSIGN(absl::Span<char> first, upload.MutableChunk(0, 8));
  ASSERT_OK_AND_ASSIGN(absl::Span<char> rest, upload.MutableChunk(8, 16));
  const int64_t values[3] = {7, -8, int64_t{1} << 40};
  std::memcpy(first.data(), &values[0], 8);
  std::memcpy(rest.data(), &values[1], 16);
  ASSERT_TRUE(upload.Commit().ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "i"));
  EXPECT_THAT(Values<int64_t>(read), ElementsAre(7, -8, int64_t{1} << 40));
}

TEST(TensorStoreTest, PutCopiesAStridedViewContiguously) {
  TensorStore store(1 << 20);
  const std::vector<int32_t> values = {1, 2, 3, 4, 5, 6};  // [2, 3]
  // Its transpose, [3, 2]: strides {1, 3}.
  const TensorView transposed(DataType::kInt32, Shape{3, 2}, Shape{1, 3}, values.data());
  ASSERT_TRUE(store.Put("", "t", transposed).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "t"));
  EXPECT_THAT(read.shape(), ElementsAre(3, 2));
  EXPECT_THAT(Values<int32_t>(read), ElementsAre(1, 4, 2, 5, 3, 6));
}

// A store in device memory (here a fake one the CPU cannot touch: tests/fake_device.h) takes its
// bytes through copies only, and checks bools as they arrive rather than at Commit.
TEST(TensorStoreTest, DeviceMemoryIsFilledAndReadThroughCopies) {
  testing::FakeDeviceMemory memory;
  TensorStore store(1 << 20, &memory);
  EXPECT_EQ(store.device(), "fakegpu:0");
  const std::vector<int32_t> values = {1, 2, 3, 4, 5, 6};
  const TensorView transposed(DataType::kInt32, Shape{3, 2}, Shape{1, 3}, values.data());
  ASSERT_TRUE(store.Put("", "t", transposed).ok());
  EXPECT_EQ(memory.copied_in(), 24);
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "t"));
  EXPECT_FALSE(read.memory().host_accessible());
  EXPECT_TRUE(memory.Contains(read.view().data(), 24));
  std::vector<int32_t> back(6);
  ASSERT_TRUE(read.CopyToHost(0, 24, back.data()).ok());
  EXPECT_THAT(back, ElementsAre(1, 4, 2, 5, 3, 6));
  int32_t last = 0;
  ASSERT_TRUE(read.CopyToHost(20, 4, &last).ok());
  EXPECT_EQ(last, 6);
  ASSERT_OK_AND_ASSIGN(TensorStore::Metadata info, store.Info("", "t"));
  EXPECT_EQ(info.device, "fakegpu:0");

  ASSERT_OK_AND_ASSIGN(TensorStore::Upload flags,
                       store.BeginUpload("", "flags", DataType::kBool, {4}));
  ASSERT_TRUE(flags.Write(0, std::string("\x01\x00", 2)).ok());
  const absl::Status bad = flags.Write(2, std::string("\x01\x07", 2));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("data[3] = 7 is not a valid bool"));
  EXPECT_EQ(flags.bytes_received(), 2);  // the bad chunk counted nothing
  ASSERT_TRUE(flags.Write(2, std::string("\x01\x01", 2)).ok());
  EXPECT_TRUE(flags.Commit().ok());
}

TEST(TensorStoreTest, ScalarsAndEmptyTensors) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<double>(store, "", "scalar", {}, {2.5}).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle scalar, store.Read("", "scalar"));
  EXPECT_EQ(scalar.bytes(), 8);
  EXPECT_THAT(Values<double>(scalar), ElementsAre(2.5));

  ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                       store.BeginUpload("", "empty", DataType::kFloat32, {0, 5}));
  EXPECT_EQ(upload.bytes(), 0);
  ASSERT_OK_AND_ASSIGN(const int64_t version, upload.Commit());  // nothing to write
  EXPECT_EQ(version, 1);
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle empty, store.Read("", "empty"));
  EXPECT_EQ(empty.view().numel(), 0);
  EXPECT_NE(empty.view().data(), nullptr);
  EXPECT_EQ(store.used_bytes(), 8);
}

TEST(TensorStoreTest, ChunksMustArriveInOrderAndCover) {
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                       store.BeginUpload("", "w", DataType::kFloat32, {6}));
  const std::string bytes(24, 'x');
  EXPECT_TRUE(HasError(upload.Write(4, bytes.substr(0, 4)), absl::StatusCode::kInvalidArgument,
                       {"offset 4", "0 bytes were received", "in order"}));
  ASSERT_TRUE(upload.Write(0, bytes.substr(0, 4)).ok());
  EXPECT_TRUE(HasError(upload.Write(0, bytes.substr(0, 4)), absl::StatusCode::kInvalidArgument,
                       {"offset 0", "4 bytes were received"}));
  EXPECT_TRUE(HasError(upload.Write(4, bytes), absl::StatusCode::kInvalidArgument,
                       {"24 bytes at offset 4", "24 bytes"}));
  EXPECT_TRUE(HasError(upload.MutableChunk(4, -1), absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(upload.bytes_received(), 4);  // the failed chunks counted nothing
  EXPECT_TRUE(HasError(upload.Commit(), absl::StatusCode::kInvalidArgument,
                       {"\"w\"", "incomplete", "received 4 of its 24 bytes"}));
  EXPECT_TRUE(HasError(store.Read("", "w"), absl::StatusCode::kNotFound));
  ASSERT_TRUE(upload.Write(4, bytes.substr(4)).ok());
  ASSERT_TRUE(upload.Commit().ok());
  EXPECT_TRUE(HasError(upload.Commit(), absl::StatusCode::kFailedPrecondition, {"committed"}));
  EXPECT_TRUE(HasError(upload.Write(24, ""), absl::StatusCode::kFailedPrecondition, {"committed"}));
}

TEST(TensorStoreTest, VisibleOnlyAtCommit) {
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                       store.BeginUpload("", "w", DataType::kFloat32, {2}));
  ASSERT_TRUE(upload.Write(0, AsBytes({1, 2})).ok());
  EXPECT_TRUE(HasError(store.Read("", "w"), absl::StatusCode::kNotFound, {"\"w\"", "not found"}));
  EXPECT_TRUE(HasError(store.Info("", "w"), absl::StatusCode::kNotFound));
  EXPECT_TRUE(HasError(store.Update("", "w"), absl::StatusCode::kNotFound));
  EXPECT_TRUE(HasError(store.Delete("", "w"), absl::StatusCode::kNotFound));
  EXPECT_TRUE(store.List("").empty());
  EXPECT_EQ(store.tensor_count(), 0);
  EXPECT_EQ(store.used_bytes(), 8);  // the reservation counts from the start
  ASSERT_TRUE(upload.Commit().ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
  EXPECT_THAT(Values<float>(read), ElementsAre(1, 2));
  EXPECT_EQ(store.List("").size(), 1u);
  EXPECT_EQ(store.tensor_count(), 1);
}

// A host tensor of 2 MiB or more takes whole 2 MiB huge pages, and the limit counts them: thirty
// tensors of 2 MiB + 1 byte under a 64 MiB limit fit 16 times (4 MiB each), not 30 (which would
// take 120 MiB of memory under a 64 MiB flag). Smaller tensors count their size rounded to 4.
TEST(TensorStoreTest, TheLimitCountsTheMemoryTensorsReallyTake) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  TensorStore store(64 * kMiB);
  int admitted = 0;
  absl::Status refused;
  for (int i = 0; i < 30; ++i) {
    absl::StatusOr<int64_t> put = Put<uint8_t>(store, "", absl::StrCat("t", i), {2 * kMiB + 1},
                                               std::vector<uint8_t>(2 * kMiB + 1, 7));
    if (put.ok()) {
      ++admitted;
    } else {
      refused = put.status();
    }
  }
  EXPECT_EQ(admitted, 16);
  EXPECT_EQ(store.used_bytes(), 64 * kMiB);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(),
              HasSubstr("needs 2097153 bytes (4194304 in memory, allocated in whole 2 MiB huge "
                        "pages)"));
  ASSERT_TRUE(store.Delete("", "t0").ok());
  EXPECT_EQ(store.used_bytes(), 60 * kMiB);
  // Below a huge page: the size rounded up to a multiple of 4.
  ASSERT_TRUE(Put<uint8_t>(store, "", "small", {5}, std::vector<uint8_t>(5, 1)).ok());
  EXPECT_EQ(store.used_bytes(), 60 * kMiB + 8);
}

TEST(TensorStoreTest, AbandonedUploadLeavesNothingAndFreesItsReservation) {
  TensorStore store(100);
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                         store.BeginUpload("", "w", DataType::kUInt8, {100}));
    ASSERT_TRUE(upload.Write(0, std::string(50, 'a')).ok());
    EXPECT_EQ(store.used_bytes(), 100);
  }
  EXPECT_EQ(store.used_bytes(), 0);
  EXPECT_EQ(store.tensor_count(), 0);
  EXPECT_TRUE(HasError(store.Read("", "w"), absl::StatusCode::kNotFound));
  EXPECT_TRUE(store.List("").empty());
  // The whole limit is free again.
  ASSERT_TRUE(Put<uint8_t>(store, "", "w", {100}, std::vector<uint8_t>(100, 1)).ok());
}

TEST(TensorStoreTest, AbandonedOverwriteLeavesTheOldValue) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<float>(store, "", "w", {2}, {1, 2}).ok());
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                         store.BeginUpload("", "w", DataType::kFloat32, {2}, {.overwrite = true}));
    ASSERT_TRUE(upload.Write(0, AsBytes({9, 9})).ok());
    // Written but not committed: readers still see the old value.
    ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
    EXPECT_THAT(Values<float>(read), ElementsAre(1, 2));
  }
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
  EXPECT_EQ(read.version(), 1);
  EXPECT_THAT(Values<float>(read), ElementsAre(1, 2));
  EXPECT_EQ(store.used_bytes(), 8);
}

// ---------------------------------------------------------------------------------------------
// Replace rules and versions.

TEST(TensorStoreTest, ReplaceRulesAndMessages) {
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(const int64_t v1, Put<float>(store, "", "w", {1}, {1}));
  EXPECT_EQ(v1, 1);

  // Without overwrite or expected_version: refused at BeginUpload already.
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kFloat32, {1}),
                       absl::StatusCode::kFailedPrecondition,
                       {"\"w\" exists at version 1; pass overwrite or expected_version=1"}));
  ASSERT_OK_AND_ASSIGN(const int64_t v2, Put<float>(store, "", "w", {1}, {2}, {.overwrite = true}));
  EXPECT_EQ(v2, 2);
  ASSERT_OK_AND_ASSIGN(const int64_t v3,
                       Put<float>(store, "", "w", {1}, {3}, {.expected_version = 2}));
  EXPECT_EQ(v3, 3);
  // A stale expected_version fails even with overwrite.
  EXPECT_TRUE(HasError(Put<float>(store, "", "w", {1}, {4}, {.expected_version = 2}),
                       absl::StatusCode::kFailedPrecondition,
                       {"\"w\" exists at version 3, not expected_version=2"}));
  EXPECT_TRUE(
      HasError(Put<float>(store, "", "w", {1}, {4}, {.overwrite = true, .expected_version = 2}),
               absl::StatusCode::kFailedPrecondition, {"version 3"}));
  // expected_version for a name that does not exist.
  EXPECT_TRUE(HasError(Put<float>(store, "", "new", {1}, {1}, {.expected_version = 1}),
                       absl::StatusCode::kFailedPrecondition,
                       {"\"new\" does not exist", "expected_version=1"}));
  // Versions start at 1.
  EXPECT_TRUE(HasError(Put<float>(store, "", "w", {1}, {1}, {.expected_version = 0}),
                       absl::StatusCode::kInvalidArgument, {"expected_version = 0"}));
  // overwrite on a new name just creates it.
  ASSERT_OK_AND_ASSIGN(const int64_t fresh,
                       Put<float>(store, "", "fresh", {1}, {1}, {.overwrite = true}));
  EXPECT_EQ(fresh, 1);

  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
  EXPECT_EQ(read.version(), 3);
  EXPECT_THAT(Values<float>(read), ElementsAre(3));
}

TEST(TensorStoreTest, OverwriteMayChangeDtypeAndShapeAndKeepsCreated) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<float>(store, "", "w", {2}, {1, 2}).ok());
  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata first, store.Info("", "w"));
  absl::SleepFor(absl::Milliseconds(2));
  ASSERT_TRUE(Put<int64_t>(store, "", "w", {3, 1}, {4, 5, 6}, {.overwrite = true}).ok());
  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata second, store.Info("", "w"));
  EXPECT_EQ(second.dtype, DataType::kInt64);
  EXPECT_THAT(second.shape, ElementsAre(3, 1));
  EXPECT_EQ(second.bytes, 24);
  EXPECT_EQ(second.version, 2);
  EXPECT_EQ(second.created, first.created);
  EXPECT_GT(second.updated, first.updated);
  EXPECT_EQ(store.used_bytes(), 24);  // the old value's bytes are gone
  EXPECT_EQ(store.tensor_count(), 1);
}

TEST(TensorStoreTest, CommitRechecksTheRules) {
  TensorStore store(1 << 20);
  // Two uploads of a new name: the first commit wins.
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload a, store.BeginUpload("", "w", DataType::kFloat32, {1}));
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload b, store.BeginUpload("", "w", DataType::kFloat32, {1}));
  ASSERT_TRUE(a.Write(0, AsBytes({1})).ok());
  ASSERT_TRUE(b.Write(0, AsBytes({2})).ok());
  ASSERT_TRUE(a.Commit().ok());
  EXPECT_TRUE(HasError(b.Commit(), absl::StatusCode::kFailedPrecondition,
                       {"exists at version 1; pass overwrite or expected_version=1"}));
  EXPECT_FALSE(b.committed());

  // An upload expecting version 1 while someone else overwrites meanwhile.
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload c, store.BeginUpload("", "w", DataType::kFloat32, {1},
                                                                {.expected_version = 1}));
  ASSERT_TRUE(c.Write(0, AsBytes({3})).ok());
  ASSERT_TRUE(Put<float>(store, "", "w", {1}, {4}, {.overwrite = true}).ok());
  EXPECT_TRUE(HasError(c.Commit(), absl::StatusCode::kFailedPrecondition,
                       {"exists at version 2, not expected_version=1"}));

  // An upload expecting version 2 of a name deleted meanwhile.
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload d, store.BeginUpload("", "w", DataType::kFloat32, {1},
                                                                {.expected_version = 2}));
  ASSERT_TRUE(d.Write(0, AsBytes({5})).ok());
  ASSERT_TRUE(store.Delete("", "w").ok());
  EXPECT_TRUE(HasError(d.Commit(), absl::StatusCode::kFailedPrecondition, {"does not exist"}));
  EXPECT_EQ(store.tensor_count(), 0);
  EXPECT_TRUE(store.List("").empty());
}

TEST(TensorStoreTest, VersionsBumpOnOverwriteAndUpdate) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int64_t>(store, "", "c", {2}, {0, 0}).ok());
  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata created, store.Info("", "c"));
  absl::SleepFor(absl::Milliseconds(2));
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("", "c"));
    EXPECT_EQ(update.version(), 1);
    EXPECT_TRUE(update.held());
    update.view().data_as<int64_t>()[0] = 5;
    ASSERT_OK_AND_ASSIGN(const int64_t version, update.Commit());
    EXPECT_EQ(version, 2);
    EXPECT_EQ(update.version(), 2);
    EXPECT_FALSE(update.held());
    EXPECT_TRUE(HasError(update.Commit(), absl::StatusCode::kFailedPrecondition, {"committed"}));
  }
  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata updated, store.Info("", "c"));
  EXPECT_EQ(updated.version, 2);
  EXPECT_GT(updated.updated, created.updated);
  EXPECT_EQ(updated.created, created.created);

  // An update dropped without Commit keeps the version; what it wrote stays written.
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("", "c"));
    update.view().data_as<int64_t>()[1] = 7;
  }
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "c"));
  EXPECT_EQ(read.version(), 2);
  EXPECT_THAT(Values<int64_t>(read), ElementsAre(5, 7));
  {
    TensorStore::ReadHandle released = std::move(read);  // drops the shared lock at scope end
  }

  ASSERT_OK_AND_ASSIGN(const int64_t v3,
                       Put<int64_t>(store, "", "c", {1}, {1}, {.overwrite = true}));
  EXPECT_EQ(v3, 3);
  ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("", "c", 3));
  ASSERT_OK_AND_ASSIGN(const int64_t v4, update.Commit());
  EXPECT_EQ(v4, 4);

  EXPECT_TRUE(HasError(store.Update("", "c", 3), absl::StatusCode::kFailedPrecondition,
                       {"\"c\" exists at version 4, not expected_version=3"}));
  EXPECT_TRUE(HasError(store.Read("", "c", 3), absl::StatusCode::kFailedPrecondition,
                       {"exists at version 4, not expected_version=3"}));
  EXPECT_TRUE(HasError(store.Read("", "c", 0), absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle at4, store.Read("", "c", 4));
  EXPECT_EQ(at4.version(), 4);
  {
    // Move-assigning over a live handle releases its lock first.
    ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle other, store.Read("", "c"));
    at4 = std::move(other);
    EXPECT_EQ(at4.version(), 4);
    TensorStore::ReadHandle gone = std::move(at4);
  }

  EXPECT_TRUE(HasError(store.Delete("", "c", 3), absl::StatusCode::kFailedPrecondition,
                       {"exists at version 4, not expected_version=3"}));
  EXPECT_EQ(store.tensor_count(), 1);
  ASSERT_TRUE(store.Delete("", "c", 4).ok());
  EXPECT_TRUE(HasError(store.Delete("", "c"), absl::StatusCode::kNotFound, {"\"c\""}));
  // A re-created name starts again at 1.
  ASSERT_OK_AND_ASSIGN(const int64_t again, Put<int64_t>(store, "", "c", {1}, {1}));
  EXPECT_EQ(again, 1);
}

TEST(TensorStoreTest, BoolUploadsHoldOnlyZeroAndOne) {
  TensorStore store(1 << 20);
  const std::vector<uint8_t> bad = {1, 0, 2, 1};
  EXPECT_TRUE(HasError(store.Put("", "mask", TensorView(DataType::kBool, {4}, bad.data())),
                       absl::StatusCode::kInvalidArgument,
                       {"tensor \"mask\"", "data[2] = 2 is not a valid bool (0 or 1)"}));
  EXPECT_EQ(store.tensor_count(), 0);
  EXPECT_EQ(store.used_bytes(), 0);
  const std::vector<uint8_t> good = {1, 0, 0, 1};
  EXPECT_TRUE(store.Put("", "mask", TensorView(DataType::kBool, {4}, good.data())).ok());
}

TEST(TensorStoreTest, AnUpdateIdIsAppliedOnce) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int64_t>(store, "a", "c", {1}, {0}).ok());
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("a", "c", 1, "add-1"));
    EXPECT_FALSE(update.already_applied().has_value());
    update.view().data_as<int64_t>()[0] += 1;
    ASSERT_OK_AND_ASSIGN(const int64_t version, update.Commit("add-1"));
    EXPECT_EQ(version, 2);
  }
  // The retry expects the version its first attempt started from: the id is found first.
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle retry, store.Update("a", "c", 1, "add-1"));
    ASSERT_EQ(retry.already_applied(), std::optional<int64_t>(2));
    EXPECT_TRUE(HasError(retry.Commit("add-1"), absl::StatusCode::kFailedPrecondition,
                         {"already applied"}));
  }
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("a", "c"));
  EXPECT_EQ(read.version(), 2);
  EXPECT_EQ(Values<int64_t>(read), std::vector<int64_t>{1});
  const std::optional<TensorStore::Change> change = store.FindChange("a", "add-1");
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->name, "c");
  EXPECT_EQ(change->version, 2);
  // Ids are per namespace, and an update without one is remembered by nobody.
  EXPECT_FALSE(store.FindChange("b", "add-1").has_value());
  EXPECT_FALSE(store.FindChange("a", "").has_value());
}

TEST(TensorStoreTest, AnUploadWithARememberedIdCommitsNothing) {
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload first,
                       store.BeginUpload("", "r", DataType::kInt64, {1}));
  const int64_t one = 1;
  ASSERT_TRUE(first.Write(0, std::string_view(reinterpret_cast<const char*>(&one), 8)).ok());
  ASSERT_OK_AND_ASSIGN(const int64_t version, first.Commit("store-r"));
  EXPECT_EQ(version, 1);
  // A retry that raced its first attempt: its upload began before the first one committed.
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload retry,
                       store.BeginUpload("", "r", DataType::kInt64, {1}, {.overwrite = true}));
  const int64_t two = 2;
  ASSERT_TRUE(retry.Write(0, std::string_view(reinterpret_cast<const char*>(&two), 8)).ok());
  ASSERT_OK_AND_ASSIGN(const int64_t retry_version, retry.Commit("store-r"));
  EXPECT_EQ(retry_version, 1);
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "r"));
  EXPECT_EQ(read.version(), 1);
  EXPECT_EQ(Values<int64_t>(read), std::vector<int64_t>{1});
  EXPECT_TRUE(first.stored().has_value());
  EXPECT_FALSE(retry.stored().has_value());
}

// What an upload stored stays its own to describe after the name moves on: deleted and stored
// again at version 1 with another dtype and shape, as PutTensor's answer may race it.
TEST(TensorStoreTest, AnUploadDescribesWhatItStoredAfterTheNameMovesOn) {
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                       store.BeginUpload("", "w", DataType::kFloat32, {2}));
  EXPECT_FALSE(upload.stored().has_value());
  ASSERT_TRUE(upload.Write(0, AsBytes({1.f, 2.f})).ok());
  ASSERT_OK_AND_ASSIGN(const int64_t version, upload.Commit());
  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata committed, store.Info("", "w"));
  ASSERT_TRUE(store.Delete("", "w").ok());
  ASSERT_TRUE(Put<int64_t>(store, "", "w", {3}, {7, 8, 9}).ok());
  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata successor, store.Info("", "w"));
  EXPECT_EQ(successor.version, version);

  ASSERT_TRUE(upload.stored().has_value());
  const TensorStore::Metadata& stored = *upload.stored();
  EXPECT_EQ(stored.dtype, DataType::kFloat32);
  EXPECT_EQ(stored.shape, (Shape{2}));
  EXPECT_EQ(stored.bytes, 8);
  EXPECT_EQ(stored.version, 1);
  EXPECT_EQ(stored.serial, committed.serial);
  EXPECT_NE(stored.serial, successor.serial);
  EXPECT_EQ(stored.created, committed.created);
  EXPECT_EQ(stored.updated, committed.updated);
}

TEST(TensorStoreTest, ANamespaceRemembersItsLatestChanges) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int64_t>(store, "", "c", {1}, {0}).ok());
  for (int64_t i = 0; i <= kRememberedChangesPerNamespace; ++i) {
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update,
                         store.Update("", "c", std::nullopt, absl::StrCat("id-", i)));
    ASSERT_TRUE(update.Commit(absl::StrCat("id-", i)).ok());
  }
  EXPECT_FALSE(store.FindChange("", "id-0").has_value());
  EXPECT_TRUE(store.FindChange("", "id-1").has_value());
  EXPECT_EQ(store.FindChange("", absl::StrCat("id-", kRememberedChangesPerNamespace))->version,
            kRememberedChangesPerNamespace + 2);
}

TEST(TensorStoreTest, ListIsSortedByName) {
  TensorStore store(1 << 20);
  for (const char* name : {"b", "a/x", "c", "a", "a.b"}) {
    ASSERT_TRUE(Put<uint8_t>(store, "", name, {1}, {1}).ok()) << name;
  }
  ASSERT_TRUE(Put<uint8_t>(store, "", "c", {4}, {1, 2, 3, 4}, {.overwrite = true}).ok());
  const std::vector<TensorStore::Metadata> list = store.List("");
  std::vector<std::string> names;
  for (const TensorStore::Metadata& info : list) names.push_back(info.name);
  EXPECT_THAT(names, ElementsAre("a", "a.b", "a/x", "b", "c"));
  EXPECT_EQ(list[4].version, 2);
  EXPECT_EQ(list[4].bytes, 4);
  EXPECT_EQ(list[4].device, "cpu");
  EXPECT_TRUE(store.List("elsewhere").empty());
}

// ---------------------------------------------------------------------------------------------
// Shapes and sizes.

TEST(TensorStoreTest, ShapesWhoseSizeOverflowsAreInvalid) {
  TensorStore store(int64_t{1} << 40);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  // The element count overflows int64.
  EXPECT_TRUE(
      HasError(store.BeginUpload("", "w", DataType::kInt64, {int64_t{1} << 40, int64_t{1} << 30}),
               kInvalid, {"\"w\"", "more elements than fit in int64"}));
  // The count fits but the bytes do not: 2^61 float32 elements are 2^63 bytes.
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kFloat32, {int64_t{1} << 61}), kInvalid,
                       {"\"w\"", "float32", "overflows int64"}));
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kComplex128, {int64_t{1} << 60}),
                       kInvalid, {"overflows int64"}));
  EXPECT_TRUE(
      HasError(store.BeginUpload("", "w", DataType::kFloat32, {2, -1}), kInvalid, {"negative"}));
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kFloat32, Shape(kMaxRank + 1, 1)),
                       kInvalid, {"rank 17"}));
  EXPECT_TRUE(
      HasError(store.BeginUpload("", "w", static_cast<DataType>(99), {1}), kInvalid, {"dtype"}));
  EXPECT_EQ(store.used_bytes(), 0);
  // More than 2^31 bytes is fine as far as the arithmetic goes (refused here only by the limit).
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kFloat64, {int64_t{1} << 38}),
                       absl::StatusCode::kResourceExhausted, {"2199023255552 bytes"}));
  // Near INT64_MAX bytes, where rounding up to whole words would overflow: refused by the limit
  // too, leaving nothing reserved (it once passed the limit as a negative charge).
  EXPECT_TRUE(
      HasError(store.BeginUpload("", "w", DataType::kUInt8, {std::numeric_limits<int64_t>::max()}),
               absl::StatusCode::kResourceExhausted, {"9223372036854775807 bytes"}));
  EXPECT_EQ(store.used_bytes(), 0);
}

// ---------------------------------------------------------------------------------------------
// The memory limit.

TEST(TensorStoreTest, LimitIsEnforcedWithAMessageNamingTheFlag) {
  TensorStore store(100);
  EXPECT_TRUE(store.enabled());
  EXPECT_EQ(store.limit_bytes(), 100);
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload first,
                       store.BeginUpload("", "a", DataType::kFloat32, {16}));
  EXPECT_EQ(store.used_bytes(), 64);
  EXPECT_TRUE(HasError(store.BeginUpload("", "b", DataType::kFloat32, {16}),
                       absl::StatusCode::kResourceExhausted,
                       {"--store_memory_bytes=100", "\"b\"", "needs 64 bytes", "only 36"}));
  ASSERT_TRUE(first.Write(0, std::string(64, '\0')).ok());
  ASSERT_TRUE(first.Commit().ok());
  EXPECT_EQ(store.used_bytes(), 64);
  // Exactly the rest fits.
  ASSERT_TRUE(Put<uint8_t>(store, "", "rest", {36}, std::vector<uint8_t>(36, 1)).ok());
  EXPECT_EQ(store.used_bytes(), 100);
  EXPECT_TRUE(HasError(Put<uint8_t>(store, "", "one", {1}, {1}),
                       absl::StatusCode::kResourceExhausted, {"only 0"}));
  // Overwriting needs room for both values until the commit.
  EXPECT_TRUE(HasError(Put<uint8_t>(store, "", "rest", {1}, {1}, {.overwrite = true}),
                       absl::StatusCode::kResourceExhausted));
  ASSERT_TRUE(store.Delete("", "a").ok());
  EXPECT_EQ(store.used_bytes(), 36);
  ASSERT_TRUE(Put<uint8_t>(store, "", "rest", {2}, {1, 2}, {.overwrite = true}).ok());
  EXPECT_EQ(store.used_bytes(),
            4);  // its 2 bytes take 4 (TheLimitCountsTheMemoryTensorsReallyTake)
}

TEST(TensorStoreTest, ZeroLimitTurnsTheStoreOff) {
  TensorStore store(0);
  EXPECT_FALSE(store.enabled());
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kFloat32, {1}),
                       absl::StatusCode::kResourceExhausted,
                       {"tensor store is off", "--store_memory_bytes"}));
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kFloat32, {0}),
                       absl::StatusCode::kResourceExhausted, {"off"}));
  EXPECT_TRUE(HasError(store.Read("", "w"), absl::StatusCode::kNotFound));
  EXPECT_TRUE(store.List("").empty());
  EXPECT_EQ(store.used_bytes(), 0);
}

TEST(TensorStoreTest, FailedAllocationIsResourceExhausted) {
  TensorStore store(std::numeric_limits<int64_t>::max());
  // 2^62 bytes: within the limit, beyond any machine's address space.
  EXPECT_TRUE(HasError(store.BeginUpload("", "huge", DataType::kUInt8, {int64_t{1} << 62}),
                       absl::StatusCode::kResourceExhausted, {"cannot allocate", "\"huge\""}));
  EXPECT_EQ(store.used_bytes(), 0);
}

TEST(TensorStoreTest, DeleteWhileReadingKeepsTheBytesUntilTheReaderGoes) {
  TensorStore store(100);
  ASSERT_TRUE(Put<float>(store, "", "w", {16}, std::vector<float>(16, 3)).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
  ASSERT_TRUE(store.Delete("", "w").ok());  // does not wait for the reader
  EXPECT_TRUE(HasError(store.Read("", "w"), absl::StatusCode::kNotFound));
  EXPECT_EQ(store.tensor_count(), 0);
  EXPECT_EQ(read.version(), 1);
  EXPECT_EQ(Values<float>(read), std::vector<float>(16, 3));
  // Still counted while the reader holds them, so a second 64 bytes do not fit.
  EXPECT_EQ(store.used_bytes(), 64);
  EXPECT_TRUE(HasError(store.BeginUpload("", "w", DataType::kFloat32, {16}),
                       absl::StatusCode::kResourceExhausted));
  { TensorStore::ReadHandle gone = std::move(read); }
  EXPECT_EQ(store.used_bytes(), 0);
  ASSERT_TRUE(Put<float>(store, "", "w", {16}, std::vector<float>(16, 4)).ok());
}

TEST(TensorStoreTest, OverwriteWhileReadingDoesNotWait) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<float>(store, "", "w", {2}, {1, 2}).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle old_value, store.Read("", "w"));
  // On this very thread: it would deadlock if an overwrite waited for readers.
  ASSERT_OK_AND_ASSIGN(const int64_t version,
                       Put<float>(store, "", "w", {3}, {7, 8, 9}, {.overwrite = true}));
  EXPECT_EQ(version, 2);
  EXPECT_EQ(store.used_bytes(), 8 + 12);
  EXPECT_EQ(old_value.version(), 1);
  EXPECT_THAT(Values<float>(old_value), ElementsAre(1, 2));
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle new_value, store.Read("", "w"));
  EXPECT_EQ(new_value.version(), 2);
  EXPECT_THAT(Values<float>(new_value), ElementsAre(7, 8, 9));
  { TensorStore::ReadHandle gone = std::move(old_value); }
  EXPECT_EQ(store.used_bytes(), 12);
}

TEST(TensorStoreTest, UpdateOverwrittenMeanwhileIsAborted) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<float>(store, "", "w", {2}, {1, 2}).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("", "w"));
  update.view().data_as<float>()[0] = 100;
  ASSERT_OK_AND_ASSIGN(const int64_t v2,
                       Put<float>(store, "", "w", {2}, {5, 6}, {.overwrite = true}));
  EXPECT_EQ(v2, 2);
  EXPECT_TRUE(HasError(update.Commit(), absl::StatusCode::kAborted,
                       {"\"w\"", "overwritten or deleted", "lost"}));
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
  EXPECT_EQ(read.version(), 2);
  EXPECT_THAT(Values<float>(read), ElementsAre(5, 6));

  // Deleted meanwhile: aborted as well. (The read handle goes first: an update on the thread
  // holding a read handle of the same value would wait for itself.)
  { TensorStore::ReadHandle gone = std::move(read); }
  ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle doomed, store.Update("", "w"));
  ASSERT_TRUE(store.Delete("", "w").ok());
  EXPECT_TRUE(HasError(doomed.Commit(), absl::StatusCode::kAborted));
  EXPECT_EQ(store.tensor_count(), 0);
  // The aborted handles let go of the values they held; nothing else holds them.
  EXPECT_EQ(store.used_bytes(), 0);
}

TEST(TensorStoreTest, HandlesOutliveTheStore) {
  auto store = std::make_unique<TensorStore>(1 << 20);
  ASSERT_TRUE(Put<int32_t>(*store, "", "w", {3}, {1, 2, 3}).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store->Read("", "w"));
  ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                       store->BeginUpload("", "u", DataType::kInt32, {1}));
  store.reset();
  EXPECT_THAT(Values<int32_t>(read), ElementsAre(1, 2, 3));
  ASSERT_TRUE(upload.Write(0, std::string(4, '\0')).ok());
  EXPECT_TRUE(upload.Commit().ok());
}

// ---------------------------------------------------------------------------------------------
// Namespaces.

TEST(TensorStoreTest, NamespacesAreIsolated) {
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(const int64_t a1, Put<float>(store, "tenant-a", "w", {2}, {1, 1}));
  // The same name in another namespace is a new tensor: no overwrite needed, version 1.
  ASSERT_OK_AND_ASSIGN(const int64_t b1, Put<float>(store, "tenant-b", "w", {3}, {2, 2, 2}));
  EXPECT_EQ(a1, 1);
  EXPECT_EQ(b1, 1);
  ASSERT_TRUE(Put<float>(store, "tenant-a", "w", {2}, {3, 3}, {.overwrite = true}).ok());
  ASSERT_TRUE(Put<float>(store, "tenant-a", "only-a", {1}, {5}).ok());
  ASSERT_TRUE(Put<float>(store, "", "w", {1}, {9}).ok());  // the no-auth namespace is one more
  EXPECT_EQ(store.tensor_count(), 4);

  {
    ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle a, store.Read("tenant-a", "w"));
    ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle b, store.Read("tenant-b", "w"));
    EXPECT_EQ(a.version(), 2);
    EXPECT_THAT(Values<float>(a), ElementsAre(3, 3));
    EXPECT_EQ(b.version(), 1);
    EXPECT_THAT(Values<float>(b), ElementsAre(2, 2, 2));
  }

  std::vector<std::string> names_a;
  for (const auto& info : store.List("tenant-a")) names_a.push_back(info.name);
  EXPECT_THAT(names_a, ElementsAre("only-a", "w"));
  ASSERT_EQ(store.List("tenant-b").size(), 1u);
  EXPECT_EQ(store.List("tenant-b")[0].bytes, 12);

  // Another namespace's name does not exist for tenant-b, whatever the operation; no message
  // names the namespace.
  for (const absl::Status& status :
       {store.Read("tenant-b", "only-a").status(), store.Info("tenant-b", "only-a").status(),
        store.Update("tenant-b", "only-a").status(), store.Delete("tenant-b", "only-a"),
        store.Read("tenant-b", "only-a", 1).status(), store.Delete("", "only-a")}) {
    EXPECT_TRUE(HasError(status, absl::StatusCode::kNotFound, {"\"only-a\" not found"}));
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("tenant")));
  }
  // Uploading a name another namespace has is a create, and expected_version cannot see across.
  EXPECT_TRUE(HasError(Put<float>(store, "tenant-b", "only-a", {1}, {0}, {.expected_version = 1}),
                       absl::StatusCode::kFailedPrecondition, {"does not exist"}));

  // Deleting and updating in one namespace leaves the other's.
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("tenant-b", "w"));
    update.view().data_as<float>()[0] = 42;
    ASSERT_TRUE(update.Commit().ok());
  }
  ASSERT_TRUE(store.Delete("tenant-b", "w").ok());
  EXPECT_TRUE(store.List("tenant-b").empty());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle a, store.Read("tenant-a", "w"));
  EXPECT_EQ(a.version(), 2);
  EXPECT_THAT(Values<float>(a), ElementsAre(3, 3));
  ASSERT_OK_AND_ASSIGN(TensorStore::Metadata root, store.Info("", "w"));
  EXPECT_EQ(root.version, 1);
  EXPECT_EQ(store.tensor_count(), 3);
}

// ---------------------------------------------------------------------------------------------
// Concurrency.

// Every updater adds to every element of both tensors under an UpdateHandle: the float one gets
// +1 per update, so its elements always equal its version - 1; the int64 one gets the thread's
// own amount. Readers check each value they see is one whole version. The totals must be exact.
TEST(TensorStoreConcurrencyTest, InPlaceSumUpdatesLoseNothingAndReadersSeeWholeVersions) {
  constexpr int kUpdaters = 64;
  constexpr int kReaders = 4;
  constexpr int kIterations = 40;
  constexpr int64_t kElements = 1031;
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<float>(store, "ns", "f", {kElements}, std::vector<float>(kElements, 0)).ok());
  ASSERT_TRUE(Put<int64_t>(store, "ns", "i", {kElements}, std::vector<int64_t>(kElements, 0)).ok());

  std::atomic<int> updaters_left{kUpdaters};
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kUpdaters; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kIterations; ++k) {
        {
          absl::StatusOr<TensorStore::UpdateHandle> update = store.Update("ns", "f");
          if (!update.ok()) {
            ++failures;
            continue;
          }
          float* data = update->view().data_as<float>();
          // Read-modify-write in two passes, so a lost update would show.
          const float base = data[0];
          for (int64_t e = 0; e < kElements; ++e) data[e] = base + 1;
          if (!update->Commit().ok()) ++failures;
        }
        {
          absl::StatusOr<TensorStore::UpdateHandle> update = store.Update("ns", "i");
          if (!update.ok()) {
            ++failures;
            continue;
          }
          int64_t* data = update->view().data_as<int64_t>();
          for (int64_t e = 0; e < kElements; ++e) data[e] += t + 1;
          if (!update->Commit().ok()) ++failures;
        }
      }
      --updaters_left;
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      do {
        absl::StatusOr<TensorStore::ReadHandle> f = store.Read("ns", "f");
        if (!f.ok()) {
          ++failures;
          break;
        }
        const float* fd = f->view().data_as<float>();
        for (int64_t e = 0; e < kElements; ++e) {
          if (fd[e] != static_cast<float>(f->version() - 1)) {
            ++failures;
            break;
          }
        }
        absl::StatusOr<TensorStore::ReadHandle> i = store.Read("ns", "i");
        if (!i.ok()) {
          ++failures;
          break;
        }
        const int64_t* id = i->view().data_as<int64_t>();
        for (int64_t e = 1; e < kElements; ++e) {
          if (id[e] != id[0]) {
            ++failures;
            break;
          }
        }
        ++reads;
      } while (updaters_left.load() > 0);
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads.load(), 0);
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle f, store.Read("ns", "f"));
  EXPECT_EQ(f.version(), 1 + kUpdaters * kIterations);
  EXPECT_EQ(Values<float>(f), std::vector<float>(kElements, kUpdaters * kIterations));
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle i, store.Read("ns", "i"));
  EXPECT_EQ(i.version(), 1 + kUpdaters * kIterations);
  const int64_t total = int64_t{kIterations} * kUpdaters * (kUpdaters + 1) / 2;
  EXPECT_EQ(Values<int64_t>(i), std::vector<int64_t>(kElements, total));
}

TEST(TensorStoreConcurrencyTest, ReadersBlockUpdatersAndMayBeReleasedOnAnotherThread) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int32_t>(store, "", "w", {1}, {0}).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
  std::atomic<bool> updated{false};
  std::thread updater([&] {
    absl::StatusOr<TensorStore::UpdateHandle> update = store.Update("", "w");
    ASSERT_TRUE(update.ok()) << update.status();
    update->view().data_as<int32_t>()[0] = 1;
    ASSERT_TRUE(update->Commit().ok());
    updated = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(updated.load());  // the reader holds the tensor
  EXPECT_THAT(Values<int32_t>(read), ElementsAre(0));
  // Released on a thread other than the one that took it.
  std::thread releaser(
      [handle = std::move(read)]() mutable { TensorStore::ReadHandle gone = std::move(handle); });
  releaser.join();
  updater.join();
  EXPECT_TRUE(updated.load());
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle after, store.Read("", "w"));
  EXPECT_EQ(after.version(), 2);
  EXPECT_THAT(Values<int32_t>(after), ElementsAre(1));
}

TEST(TensorStoreConcurrencyTest, UpdatesWaitForEachOtherAndReadersWaitForUpdates) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int32_t>(store, "", "w", {1}, {0}).ok());
  ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("", "w"));
  std::atomic<int> done{0};
  std::thread second_updater([&] {
    absl::StatusOr<TensorStore::UpdateHandle> second = store.Update("", "w");
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->version(), 2);
    ++done;
  });
  std::thread reader([&] {
    absl::StatusOr<TensorStore::ReadHandle> read = store.Read("", "w");
    ASSERT_TRUE(read.ok());
    EXPECT_GE(read->version(), 2);
    ++done;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(done.load(), 0);
  // Info, List and the accounting never wait for a handle.
  ASSERT_OK_AND_ASSIGN(const TensorStore::Metadata info, store.Info("", "w"));
  EXPECT_EQ(info.version, 1);
  EXPECT_EQ(store.List("").size(), 1u);
  update.view().data_as<int32_t>()[0] = 1;
  ASSERT_TRUE(update.Commit().ok());
  second_updater.join();
  reader.join();
  EXPECT_EQ(done.load(), 2);
}

// LockWait::kTry reads what Read would, but where Read would wait (an update holds the tensor, or
// waits for its readers) it answers at once with the one status IsStoreBusy recognises.
TEST(TensorStoreConcurrencyTest, ATryingReaderIsToldTheTensorIsBusyInsteadOfWaiting) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int32_t>(store, "", "w", {1}, {0}).ok());
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read,
                         store.Read("", "w", std::nullopt, LockWait::kTry));
    EXPECT_EQ(read.version(), 1);
    // Readers share: a second trying reader is not busy.
    ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle second,
                         store.Read("", "w", std::nullopt, LockWait::kTry));
  }
  absl::StatusOr<TensorStore::ReadHandle> missing =
      store.Read("", "nobody", std::nullopt, LockWait::kTry);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(IsStoreBusy(missing.status()));
  EXPECT_FALSE(IsStoreBusy(absl::UnavailableError("tensor \"w\" is being updated; retry")));

  {
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("", "w"));
    absl::StatusOr<TensorStore::ReadHandle> busy =
        store.Read("", "w", std::nullopt, LockWait::kTry);
    EXPECT_TRUE(IsStoreBusy(busy.status())) << busy.status();
    EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(busy.status().message(), HasSubstr("\"w\" is being updated"));
    ASSERT_TRUE(update.Commit().ok());
  }
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle after,
                       store.Read("", "w", std::nullopt, LockWait::kTry));
  EXPECT_EQ(after.version(), 2);

  // An updater waiting for `after` goes before any newly arriving reader, trying or not.
  std::atomic<bool> updated{false};
  std::thread updater([&] {
    absl::StatusOr<TensorStore::UpdateHandle> update = store.Update("", "w");
    ASSERT_TRUE(update.ok()) << update.status();
    ASSERT_TRUE(update->Commit().ok());
    updated = true;
  });
  EXPECT_TRUE(testing::WaitFor(
      [&] { return IsStoreBusy(store.Read("", "w", std::nullopt, LockWait::kTry).status()); },
      absl::Seconds(10)));
  EXPECT_FALSE(updated.load());
  { TensorStore::ReadHandle released = std::move(after); }
  updater.join();
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle last,
                       store.Read("", "w", std::nullopt, LockWait::kTry));
  EXPECT_EQ(last.version(), 3);
}

// An Update with LockWait::kTry takes a free tensor exclusively, and is busy where Update would
// wait: a reader holds the tensor, or another update does.
TEST(TensorStoreConcurrencyTest, ATryingUpdaterIsToldTheTensorIsBusyInsteadOfWaiting) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int32_t>(store, "", "w", {1}, {0}).ok());
  {
    ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "w"));
    absl::StatusOr<TensorStore::UpdateHandle> busy =
        store.Update("", "w", std::nullopt, "", LockWait::kTry);
    EXPECT_TRUE(IsStoreBusy(busy.status())) << busy.status();
  }
  ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update,
                       store.Update("", "w", std::nullopt, "", LockWait::kTry));
  absl::StatusOr<TensorStore::UpdateHandle> second =
      store.Update("", "w", std::nullopt, "", LockWait::kTry);
  EXPECT_TRUE(IsStoreBusy(second.status())) << second.status();
  update.view().data_as<int32_t>()[0] = 7;
  ASSERT_TRUE(update.Commit().ok());
  // A wrong expected version is still FAILED_PRECONDITION, not busy.
  absl::StatusOr<TensorStore::UpdateHandle> stale =
      store.Update("", "w", /*expected_version=*/1, "", LockWait::kTry);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle after, store.Read("", "w"));
  EXPECT_EQ(after.version(), 2);
  EXPECT_THAT(Values<int32_t>(after), ElementsAre(7));
}

// A steady stream of overlapping readers must not starve an updater.
TEST(TensorStoreConcurrencyTest, UpdaterIsNotStarvedByReaders) {
  TensorStore store(1 << 20);
  ASSERT_TRUE(Put<int32_t>(store, "", "w", {1}, {0}).ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        absl::StatusOr<TensorStore::ReadHandle> read = store.Read("", "w");
        ASSERT_TRUE(read.ok());
        absl::SleepFor(absl::Milliseconds(2));
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(20));
  std::atomic<bool> updated{false};
  std::thread updater([&] {
    absl::StatusOr<TensorStore::UpdateHandle> update = store.Update("", "w");
    ASSERT_TRUE(update.ok());
    ASSERT_TRUE(update->Commit().ok());
    updated = true;
  });
  EXPECT_TRUE(testing::WaitFor([&] { return updated.load(); }, absl::Seconds(10)));
  stop = true;
  updater.join();
  for (std::thread& reader : readers) reader.join();
}

// Overwrites, deletes and re-creates racing with readers and updaters: every handle sees a whole
// value, and when all is done the accounting matches what is stored.
TEST(TensorStoreConcurrencyTest, OverwritesAndDeletesRaceSafelyWithHandles) {
  constexpr int64_t kElements = 256;
  TensorStore store(1 << 24);
  std::atomic<int64_t> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 200; ++k) {
        const float fill = static_cast<float>(t * 1000 + k);
        switch ((t + k) % 4) {
          case 0: {
            (void)Put<float>(store, "", "w", {kElements}, std::vector<float>(kElements, fill),
                             {.overwrite = true});
            break;
          }
          case 1: {
            absl::StatusOr<TensorStore::ReadHandle> read = store.Read("", "w");
            if (!read.ok()) break;
            const float* data = read->view().data_as<float>();
            for (int64_t e = 1; e < kElements; ++e) {
              if (data[e] != data[0]) ++failures;
            }
            break;
          }
          case 2: {
            absl::StatusOr<TensorStore::UpdateHandle> update = store.Update("", "w");
            if (!update.ok()) break;
            float* data = update->view().data_as<float>();
            for (int64_t e = 0; e < kElements; ++e) data[e] = fill;
            const absl::Status committed = update->Commit().status();
            if (!committed.ok() && committed.code() != absl::StatusCode::kAborted) ++failures;
            break;
          }
          default:
            (void)store.Delete("", "w");
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  int64_t stored = 0;
  for (const TensorStore::Metadata& info : store.List("")) stored += info.bytes;
  EXPECT_EQ(store.used_bytes(), stored);
  EXPECT_EQ(store.tensor_count(), static_cast<int64_t>(store.List("").size()));
}

}  // namespace
}  // namespace tensorops
