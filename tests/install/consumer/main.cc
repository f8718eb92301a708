// The outside project of ctest `install_package`: built against the installed tensorops package
// only, it asks the server at argv[1] for its ServerInfo, runs a Gather, checks the result and
// round-trips it through npy.h.
#include <cstdint>
#include <iostream>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/npy.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer HOST:PORT\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<tensorops::Client>> client =
      tensorops::Client::Create(argv[1], {.default_timeout = absl::Seconds(30)});
  if (!client.ok()) {
    std::cerr << "Create: " << client.status() << "\n";
    return 1;
  }
  absl::StatusOr<tensorops::v1::ServerInfoResponse> info = (*client)->ServerInfo();
  if (!info.ok()) {
    std::cerr << "ServerInfo: " << info.status() << "\n";
    return 1;
  }
  float x[] = {1, 2, 3, 4};
  int64_t i[] = {0, 0, 1, 0};
  tensorops::TensorView input(tensorops::DataType::kFloat32, {2, 2}, x);
  tensorops::TensorView index(tensorops::DataType::kInt64, {2, 2}, i);
  absl::StatusOr<tensorops::Tensor> out = (*client)->Gather(input, /*axis=*/1, index);
  if (!out.ok()) {
    std::cerr << "Gather: " << out.status() << "\n";
    return 1;
  }
  const float expected[] = {1, 1, 4, 3};
  if (out->dtype() != tensorops::DataType::kFloat32 || out->shape() != tensorops::Shape{2, 2}) {
    std::cerr << "Gather: wrong dtype or shape\n";
    return 1;
  }
  for (int k = 0; k < 4; ++k) {
    if (out->data_as<float>()[k] != expected[k]) {
      std::cerr << "Gather: element " << k << " is " << out->data_as<float>()[k] << ", expected "
                << expected[k] << "\n";
      return 1;
    }
  }
  // npy.h, the other installed header: the result through a .npy file's bytes and back.
  absl::StatusOr<tensorops::Tensor> parsed =
      tensorops::ParseNpy(tensorops::SerializeNpy(out->view()));
  if (!parsed.ok() || parsed->shape() != out->shape() || parsed->data_as<float>()[3] != 3) {
    std::cerr << "SerializeNpy/ParseNpy: the result did not come back\n";
    return 1;
  }
  std::cout << "consumer: server " << info->version() << ", gather [[1, 1], [4, 3]] ok\n";
  return 0;
}
