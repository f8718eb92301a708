// write_seeds: writes the fuzzers' seed corpora (fuzz/corpus/<fuzzer>/) from the tests' op cases
// (tests/op_cases.h): every op as a tensorops.v1 request, its backward, the same calls as KServe
// v2 requests, the codec's messages and the .npy files of their tensors. The corpora are
// committed; rerun after changing the cases:
//
//   build/sanitize/fuzz/write_seeds fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cpp/npy.h"
#include "proto/codec.h"
#include "server/core/prepared_op.h"
#include "tests/op_cases.h"

namespace {

void Write(const std::filesystem::path& dir, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// CodecSeed is the codec fuzzer's input: the message kind's byte, then the message.
std::string CodecSeed(char kind, const google::protobuf::Message& message) {
  return std::string(1, kind) + message.SerializeAsString();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  std::mt19937 rng(20261125);
  int written = 0;
  for (int round = 0; round < 2; ++round) {
    const std::vector<tensorops::testing::Case> cases = tensorops::testing::Cases(rng);
    for (size_t i = 0; i < cases.size(); ++i) {
      const tensorops::testing::Case& c = cases[i];
      const std::string name = absl::StrFormat("%s_%d_%d", c.kserve.model_name(), round, i);
      Write(root / "op_fuzzer", name, c.v1.SerializeAsString());
      Write(root / "kserve_fuzzer", name, c.kserve.SerializeAsString());
      Write(root / "codec_fuzzer", name + "_op", CodecSeed(1, c.v1));
      Write(root / "codec_fuzzer", name + "_kserve", CodecSeed(5, c.kserve));
      // The backward: grad_output of the forward result's shape, found by running it.
      tensorops::v1::Tensor result;
      absl::StatusOr<tensorops::PreparedOp> op =
          tensorops::PrepareOp(c.v1, tensorops::wire::DecodeLimits{}, &result);
      if (!op.ok() || !op->run().ok()) {
        std::fprintf(stderr, "write_seeds: case %s does not run\n", name.c_str());
        return 1;
      }
      tensorops::v1::BackwardRequest backward;
      *backward.mutable_op() = c.v1;
      *backward.mutable_grad_output() = result;
      Write(root / "backward_fuzzer", name, backward.SerializeAsString());
      Write(root / "codec_fuzzer", name + "_backward", CodecSeed(2, backward));
      Write(root / "codec_fuzzer", name + "_tensor", CodecSeed(0, result));
      absl::StatusOr<tensorops::TensorView> view =
          tensorops::wire::DecodeTensor(result, "seed", "result", tensorops::wire::DecodeLimits{});
      if (view.ok()) Write(root / "npy_fuzzer", name, tensorops::SerializeNpy(*view));
      inference::ModelInferRequest backward_kserve = c.kserve;
      backward_kserve.set_model_name(c.kserve.model_name() + "_backward");
      tensorops::testing::AddInput("grad_output", result, &backward_kserve);
      Write(root / "kserve_fuzzer", name + "_backward", backward_kserve.SerializeAsString());
      written += 9;
    }
  }
  std::printf("write_seeds: %d seeds under %s\n", written, root.c_str());
  return 0;
}
