// Helpers for tests that call the service through the generated stub: wire tensors from values
// and back, an in-process server on a free loopback port, a stub connected to it.
#ifndef TENSOROPS_TESTS_SERVICE_TEST_UTIL_H_
#define TENSOROPS_TESTS_SERVICE_TEST_UTIL_H_

#include <complex>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tensorops/v1/service.grpc.pb.h"

namespace tensorops::testing {

template <typename T>
v1::DataType WireDtype();
template <>
inline v1::DataType WireDtype<int32_t>() {
  return v1::DATA_TYPE_INT32;
}
template <>
inline v1::DataType WireDtype<int64_t>() {
  return v1::DATA_TYPE_INT64;
}
template <>
inline v1::DataType WireDtype<float>() {
  return v1::DATA_TYPE_FLOAT32;
}
template <>
inline v1::DataType WireDtype<std::complex<double>>() {
  return v1::DATA_TYPE_COMPLEX128;
}

// MakeTensor builds a wire tensor of `shape` holding `values` (row-major).
template <typename T>
v1::Tensor MakeTensor(std::vector<int64_t> shape, const std::vector<T>& values) {
  v1::Tensor tensor;
  tensor.set_dtype(WireDtype<T>());
  for (int64_t size : shape) tensor.add_shape(size);
  tensor.set_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
  return tensor;
}

// MakeMask builds a wire BOOL tensor of `shape` holding `values` (each 0 or 1, row-major).
inline v1::Tensor MakeMask(std::vector<int64_t> shape, const std::vector<uint8_t>& values) {
  v1::Tensor tensor;
  tensor.set_dtype(v1::DATA_TYPE_BOOL);
  for (int64_t size : shape) tensor.add_shape(size);
  tensor.set_data(std::string(values.begin(), values.end()));
  return tensor;
}

// Values reads the elements of a wire tensor as T.
template <typename T>
std::vector<T> Values(const v1::Tensor& tensor) {
  EXPECT_EQ(tensor.dtype(), WireDtype<T>());
  std::vector<T> values(tensor.data().size() / sizeof(T));
  std::memcpy(values.data(), tensor.data().data(), values.size() * sizeof(T));
  return values;
}

// StartServer starts a server on a free loopback port with `options` (its host, port and
// threads are set here).
inline std::unique_ptr<Server> StartServer(ServerOptions options) {
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 2;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// StartServer starts a server on a free loopback port with `limits`.
inline std::unique_ptr<Server> StartServer(ServerOptions::Limits limits = {}) {
  ServerOptions options;
  options.limits = limits;
  return StartServer(options);
}

inline std::unique_ptr<v1::TensorOps::Stub> Connect(int port) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  return v1::TensorOps::NewStub(grpc::CreateCustomChannel(
      absl::StrFormat("127.0.0.1:%d", port), grpc::InsecureChannelCredentials(), args));
}

// ExpectStatus checks a call failed with `code` and a message containing `substring`.
inline void ExpectStatus(const grpc::Status& status, grpc::StatusCode code,
                         const std::string& substring) {
  EXPECT_EQ(status.error_code(), code) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr(substring));
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_SERVICE_TEST_UTIL_H_
