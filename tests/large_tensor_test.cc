// Tensors past the 32-bit limits, which no message can carry but the store can: a round trip of
// more than 2 GiB through PutTensor/GetTensor, and ops on a stored tensor of more than 2^31
// elements (every offset past int32, as the kernels' 64-bit indexing promises). Each test holds a
// few GiB of memory for some seconds.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/service_test_util.h"

namespace tensorops {
namespace {

using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::StartServer;

// Past int32 by a little: 2 GiB + 1 KiB of int8.
constexpr int64_t kBigElements = (int64_t{1} << 31) + 1024;
// A position past 2^31 whose value the tests check.
constexpr int64_t kFarPosition = (int64_t{1} << 31) + 5;

// Pattern is the byte at `i` of the round-tripped tensor: cheap to make and to check, and not
// periodic in any power of two (a chunk at the wrong offset shows).
int8_t Pattern(int64_t i) { return static_cast<int8_t>(i % 251); }

// PatternBlock is the pattern's first whole periods, about 1 MiB: a copy of it at any multiple of
// its size continues the pattern, so the 2 GiB are made and checked with memcpy and memcmp
// (the suite compiles at -O0, where a loop over 2 GiB takes seconds per pass).
const std::vector<int8_t>& PatternBlock() {
  static const std::vector<int8_t> block = [] {
    std::vector<int8_t> values(251 * 4096);
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) values[i] = Pattern(i);
    return values;
  }();
  return block;
}

// FillWithPattern writes Pattern(0..size) to `data`.
void FillWithPattern(int8_t* data, int64_t size) {
  const std::vector<int8_t>& block = PatternBlock();
  const int64_t block_size = static_cast<int64_t>(block.size());
  for (int64_t at = 0; at < size; at += block_size) {
    std::memcpy(data + at, block.data(), std::min(block_size, size - at));
  }
}

// FirstNotPattern is the first position of `data` whose byte is not Pattern's, or -1.
int64_t FirstNotPattern(const int8_t* data, int64_t size) {
  const std::vector<int8_t>& block = PatternBlock();
  const int64_t block_size = static_cast<int64_t>(block.size());
  for (int64_t at = 0; at < size; at += block_size) {
    const int64_t length = std::min(block_size, size - at);
    if (std::memcmp(data + at, block.data(), length) == 0) continue;
    for (int64_t i = 0; i < length; ++i) {
      if (data[at + i] != block[i]) return at + i;
    }
  }
  return -1;
}

class LargeTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.store.memory_bytes = int64_t{3} << 30;
    server_ = StartServer(std::move(options));
    ASSERT_NE(server_, nullptr);
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(absl::StrFormat("127.0.0.1:%d", server_->port()));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(LargeTensorTest, ATensorOfMoreThanTwoGibibytesRoundTrips) {
  {
    std::vector<int8_t> values(kBigElements);
    FillWithPattern(values.data(), kBigElements);
    absl::StatusOr<v1::TensorInfo> info =
        client_->PutTensor("big", TensorView(DataType::kInt8, {kBigElements}, values.data()),
                           {.chunk_bytes = int64_t{64} << 20});
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->bytes(), kBigElements);
  }  // the client's copy goes before the download arrives
  absl::StatusOr<Tensor> got = client_->GetTensor("big");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->shape(), (Shape{kBigElements}));
  const int64_t first_wrong =
      FirstNotPattern(static_cast<const int8_t*>(got->data()), kBigElements);
  EXPECT_EQ(first_wrong, -1) << "byte " << first_wrong << " differs";
}

TEST_F(LargeTensorTest, OpsOnAStoredTensorOfMoreThanTwoToTheThirtyOneElements) {
  // The tensor is made on the server (ScatterNd's zeros form, kept with store_as), so nothing of
  // its 2 GiB crosses the wire: zeros but 7 at kFarPosition.
  v1::OpRequest make;
  v1::ScatterNdRequest* zeros = make.mutable_scatter_nd();
  zeros->add_shape(kBigElements);
  *zeros->mutable_index() = MakeTensor<int64_t>({1, 1}, {kFarPosition});
  *zeros->mutable_src() = [] {
    v1::Tensor src;
    src.set_dtype(v1::DATA_TYPE_INT8);
    src.add_shape(1);
    src.set_data(std::string(1, '\x07'));
    return src;
  }();
  zeros->mutable_result_options()->set_store_as("far");
  absl::StatusOr<StoredResult> made = client_->RunStored(make);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->shape, (Shape{kBigElements}));

  // Reads past 2^31: IndexSelect and Gather, with a negative index for the same place too.
  const std::vector<int64_t> positions = {kFarPosition, kFarPosition + 1,
                                          kFarPosition - kBigElements, 0};
  v1::OpRequest select;
  select.mutable_index_select()->mutable_input()->mutable_stored()->set_name("far");
  *select.mutable_index_select()->mutable_index() = MakeTensor<int64_t>({4}, positions);
  auto read = [&]() -> std::vector<int8_t> {
    absl::StatusOr<Tensor> rows = client_->Run(select);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return {};
    const auto* data = static_cast<const int8_t*>(rows->data());
    return std::vector<int8_t>(data, data + rows->numel());
  };
  EXPECT_EQ(read(), (std::vector<int8_t>{7, 0, 7, 0}));
  v1::OpRequest gather;
  gather.mutable_gather()->mutable_input()->mutable_stored()->set_name("far");
  *gather.mutable_gather()->mutable_index() = MakeTensor<int64_t>({2}, {kFarPosition, -1});
  absl::StatusOr<Tensor> gathered = client_->Run(gather);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(static_cast<const int8_t*>(gathered->data())[0], 7);
  EXPECT_EQ(static_cast<const int8_t*>(gathered->data())[1], 0);

  // Writes past 2^31, in place: Scatter SUM adds 5 next to the 7.
  v1::OpRequest add;
  v1::ScatterRequest* scatter = add.mutable_scatter();
  scatter->mutable_input()->mutable_stored()->set_name("far");
  *scatter->mutable_index() = MakeTensor<int64_t>({2}, {kFarPosition + 1, kFarPosition + 1});
  scatter->mutable_src()->set_dtype(v1::DATA_TYPE_INT8);
  scatter->mutable_src()->add_shape(2);
  scatter->mutable_src()->set_data(std::string("\x02\x03", 2));
  scatter->set_reduce(v1::REDUCTION_SUM);
  scatter->mutable_result_options()->set_in_place(true);
  absl::StatusOr<StoredResult> added = client_->RunStored(add);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->version, 2);
  EXPECT_EQ(read(), (std::vector<int8_t>{7, 5, 7, 0}));

  // An index one past the end is refused, naming it, and changes nothing.
  *scatter->mutable_index() = MakeTensor<int64_t>({2}, {kFarPosition, kBigElements});
  absl::StatusOr<StoredResult> past = client_->RunStored(add);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.status().message(),
              ::testing::HasSubstr(absl::StrFormat("index[1] = %d is out of range", kBigElements)));
  EXPECT_EQ(read(), (std::vector<int8_t>{7, 5, 7, 0}));
}

}  // namespace
}  // namespace tensorops
