// durable_bench: what keeping the tensor store on disk (--store_dir, issue 40) costs, against the
// in-memory store measured in the same run, from the C++ client at concurrency 1.
//
//   1. Push: IndexReduce SUM of --batch_rows x --cols float32 updates (1 MiB by default) into a
//      stored table in place, as store_bench's gradient push.
//   2. Put: PutTensor of --put_bytes (1 MiB by default), overwriting one name.
// Each in four servers in this process: no --store_dir (the baseline), and --store_sync=none,
// interval (100 ms) and always. Repetitions rotate the servers' order; the table reports medians
// and each mode's median ratio of calls/s to the baseline's in the same repetition.
//
//   3. Recovery: a --recovery_rows x --cols table (1 GiB by default) is put and snapshotted, then
//      --recovery_pushes in-place pushes of --recovery_push_rows rows each are logged; a copy of
//      the directory (as a crash would leave it) is recovered by a new server, --repetitions
//      times, each on a fresh copy. It reports the recovery time (tensorops_store_recovery_seconds)
//      and the start-up's wall time. The files are in the page cache, written just before.
//
//   build/release/bench/store/durable_bench            # full run, about 3-5 minutes
//   build/release/bench/store/durable_bench --quick    # smoke run, a few seconds
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/latency_stats.h"
#include "client/cpp/client.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(bool, quick, false, "Smoke run: small tensors, 100 recovery pushes, 0.2 s cells.");
ABSL_FLAG(std::string, dir, "",
          "Where the stores' directories go (removed at the end); empty: a new directory under "
          "$TMPDIR or /tmp.");
ABSL_FLAG(int64_t, rows, int64_t{256} << 10, "Rows of the pushed table.");
ABSL_FLAG(int64_t, cols, 64, "Columns (float32) of the tables.");
ABSL_FLAG(int64_t, batch_rows, 4096, "Rows each push updates.");
ABSL_FLAG(int64_t, put_bytes, int64_t{1} << 20, "Bytes of each put.");
ABSL_FLAG(int64_t, recovery_rows, int64_t{4} << 20, "Rows of the recovered table (1 GiB).");
ABSL_FLAG(int64_t, recovery_pushes, 10000, "In-place pushes logged after its snapshot.");
ABSL_FLAG(int64_t, recovery_push_rows, 256, "Rows of each logged push.");
ABSL_FLAG(double, seconds_per_cell, 2.0, "How long each cell calls, one call after another.");
ABSL_FLAG(int, repetitions, 3, "Repetitions of every cell; the tables report medians.");

namespace tensorops::durable_bench {
namespace {

namespace fs = std::filesystem;
using ::tensorops::bench::CellResult;
using ::tensorops::bench::Drive;
using ::tensorops::bench::Median;
using ::tensorops::bench::Summarize;
using ::tensorops::bench::Summary;

constexpr char kTable[] = "bench/durable/table";
constexpr char kPut[] = "bench/durable/put";

[[noreturn]] void Fail(std::string_view what, const absl::Status& status) {
  absl::FPrintF(stderr, "durable_bench: %s: %s\n", what, status.ToString());
  std::exit(1);
}

// Mode is one server configuration.
struct Mode {
  std::string name;
  std::optional<StoreSync> sync;  // nullopt: no --store_dir
};

std::unique_ptr<Server> StartServer(const std::string& dir, std::optional<StoreSync> sync) {
  ServerOptions options;
  options.port = 0;
  options.store.memory_bytes = int64_t{6} << 30;
  options.store.snapshot_interval = absl::ZeroDuration();
  if (sync.has_value()) {
    options.store.dir = dir;
    options.store.sync = *sync;
  }
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  if (!server.ok()) Fail("Server::Start", server.status());
  return *std::move(server);
}

std::unique_ptr<Client> Connect(const Server& server) {
  ClientOptions options;
  options.default_timeout = absl::Minutes(5);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(absl::StrFormat("127.0.0.1:%d", server.port()), options);
  if (!client.ok()) Fail("Client::Create", client.status());
  return *std::move(client);
}

Tensor Filled(DataType dtype, Shape shape, float value) {
  Tensor tensor(dtype, std::move(shape));
  if (dtype == DataType::kFloat32) {
    std::fill_n(tensor.data_as<float>(), tensor.view().numel(), value);
  } else {
    std::memset(tensor.data(), 0, static_cast<size_t>(tensor.nbytes()));
  }
  return tensor;
}

Tensor RandomRows(int64_t batch, int64_t rows, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> row(0, rows - 1);
  Tensor index(DataType::kInt64, Shape{batch});
  for (int64_t i = 0; i < batch; ++i) index.data_as<int64_t>()[i] = row(random);
  return index;
}

// PushRequest is an in-place IndexReduce SUM of `updates` into the stored table at `index`.
v1::OpRequest PushRequest(const Tensor& index, const Tensor& updates) {
  v1::OpRequest request;
  v1::IndexReduceRequest* push = request.mutable_index_reduce();
  push->mutable_input()->mutable_stored()->set_name(kTable);
  wire::EncodeTensor(index.view(), push->mutable_index());
  wire::EncodeTensor(updates.view(), push->mutable_src());
  push->set_reduce(v1::REDUCTION_SUM);
  push->mutable_result_options()->set_in_place(true);
  return request;
}

// ScrapeValue is the value of metric `name` (no labels) in a Prometheus text scrape.
double ScrapeValue(const std::string& scrape, std::string_view name) {
  const size_t at = scrape.find("\n" + std::string(name) + " ");
  double value = 0;
  if (at == std::string::npos) return value;
  const size_t begin = at + name.size() + 2;
  (void)absl::SimpleAtod(scrape.substr(begin, scrape.find('\n', begin) - begin), &value);
  return value;
}

void CostTable(const std::string& root, bool quick) {
  const int64_t cols = absl::GetFlag(FLAGS_cols);
  const int64_t rows = quick ? 4096 : absl::GetFlag(FLAGS_rows);
  const int64_t batch_rows = quick ? 256 : absl::GetFlag(FLAGS_batch_rows);
  const int64_t put_bytes = quick ? 64 << 10 : absl::GetFlag(FLAGS_put_bytes);
  const absl::Duration cell = absl::Seconds(quick ? 0.2 : absl::GetFlag(FLAGS_seconds_per_cell));
  const int repetitions = quick ? 1 : absl::GetFlag(FLAGS_repetitions);
  const std::vector<Mode> modes = {{"in memory (no --store_dir)", std::nullopt},
                                   {"--store_sync=none", StoreSync::kNone},
                                   {"--store_sync=interval (100 ms)", StoreSync::kInterval},
                                   {"--store_sync=always", StoreSync::kAlways}};
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<Client>> clients;
  const Tensor table = Filled(DataType::kFloat32, {rows, cols}, 0.0f);
  const Tensor updates = Filled(DataType::kFloat32, {batch_rows, cols}, 0.5f);
  const Tensor put = Filled(DataType::kUInt8, {put_bytes}, 0.0f);
  std::vector<Tensor> indexes;
  for (int i = 0; i < 16; ++i) indexes.push_back(RandomRows(batch_rows, rows, 7 + i));
  for (size_t m = 0; m < modes.size(); ++m) {
    servers.push_back(StartServer(absl::StrFormat("%s/cost-%d", root, m), modes[m].sync));
    clients.push_back(Connect(*servers.back()));
    if (absl::StatusOr<v1::TensorInfo> stored = clients.back()->PutTensor(kTable, table.view());
        !stored.ok()) {
      Fail("PutTensor", stored.status());
    }
  }
  std::vector<std::vector<CellResult>> push(modes.size()), puts(modes.size());
  std::vector<std::vector<double>> push_ratio(modes.size()), put_ratio(modes.size());
  for (int rep = 0; rep < repetitions; ++rep) {
    std::vector<CellResult> push_rep(modes.size()), put_rep(modes.size());
    for (size_t k = 0; k < modes.size(); ++k) {
      const size_t m = (k + rep) % modes.size();  // rotate who goes first
      Client& client = *clients[m];
      int64_t i = 0;
      const auto push_call = [&](int64_t) -> absl::Status {
        return client.RunStored(PushRequest(indexes[i++ % indexes.size()], updates)).status();
      };
      const auto put_call = [&](int64_t) -> absl::Status {
        return client.PutTensor(kPut, put.view(), {.overwrite = true}).status();
      };
      Drive(push_call, absl::Milliseconds(200));  // warm-up
      push_rep[m] = Drive(push_call, cell);
      Drive(put_call, absl::Milliseconds(200));
      put_rep[m] = Drive(put_call, cell);
      if (!push_rep[m].error.empty()) Fail("push", absl::UnknownError(push_rep[m].error));
      if (!put_rep[m].error.empty()) Fail("put", absl::UnknownError(put_rep[m].error));
    }
    for (size_t m = 0; m < modes.size(); ++m) {
      push[m].push_back(push_rep[m]);
      puts[m].push_back(put_rep[m]);
      push_ratio[m].push_back(push_rep[m].calls_per_s / push_rep[0].calls_per_s);
      put_ratio[m].push_back(put_rep[m].calls_per_s / put_rep[0].calls_per_s);
    }
  }
  absl::PrintF("\n### What durability costs (concurrency 1, medians of %d)\n\n", repetitions);
  absl::PrintF("Push: IndexReduce SUM of %d x %d float32 (%s) in place; put: PutTensor of %s.\n\n",
               batch_rows, cols, absl::StrFormat("%d KiB", batch_rows * cols * 4 >> 10),
               absl::StrFormat("%d KiB", put_bytes >> 10));
  absl::PrintF(
      "| store | push p50 ms | push calls/s | vs memory | put p50 ms | put calls/s | put GB/s | "
      "vs memory |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t m = 0; m < modes.size(); ++m) {
    const Summary p = Summarize(push[m]);
    const Summary u = Summarize(puts[m]);
    absl::PrintF("| %s | %.3f | %.0f | %.2fx | %.3f | %.0f | %.2f | %.2fx |\n", modes[m].name,
                 p.p50_ms, p.calls_per_s, Median(push_ratio[m]), u.p50_ms, u.calls_per_s,
                 u.calls_per_s * static_cast<double>(put_bytes) / 1e9, Median(put_ratio[m]));
  }
  std::fflush(stdout);
}

void RecoveryTable(const std::string& root, bool quick) {
  const int64_t cols = absl::GetFlag(FLAGS_cols);
  const int64_t rows = quick ? 16384 : absl::GetFlag(FLAGS_recovery_rows);
  const int64_t pushes = quick ? 100 : absl::GetFlag(FLAGS_recovery_pushes);
  const int64_t push_rows = absl::GetFlag(FLAGS_recovery_push_rows);
  const int repetitions = quick ? 1 : absl::GetFlag(FLAGS_repetitions);
  const std::string dir = root + "/recovery";
  const std::string pristine = root + "/recovery-pristine";
  absl::Duration snapshot_time;
  int64_t log_bytes = 0;
  {
    std::unique_ptr<Server> server = StartServer(dir, StoreSync::kNone);
    std::unique_ptr<Client> client = Connect(*server);
    if (absl::StatusOr<v1::TensorInfo> stored =
            client->PutTensor(kTable, Filled(DataType::kFloat32, {rows, cols}, 0.0f).view());
        !stored.ok()) {
      Fail("PutTensor", stored.status());
    }
    absl::StatusOr<v1::SnapshotStoreResponse> snapshot = client->SnapshotStore();
    if (!snapshot.ok()) Fail("SnapshotStore", snapshot.status());
    snapshot_time = absl::Microseconds(snapshot->duration_micros());
    const Tensor updates = Filled(DataType::kFloat32, {push_rows, cols}, 0.25f);
    std::vector<Tensor> indexes;
    for (int i = 0; i < 16; ++i) indexes.push_back(RandomRows(push_rows, rows, 100 + i));
    for (int64_t i = 0; i < pushes; ++i) {
      if (absl::Status pushed =
              client->RunStored(PushRequest(indexes[i % indexes.size()], updates)).status();
          !pushed.ok()) {
        Fail("push", pushed);
      }
    }
    log_bytes =
        static_cast<int64_t>(ScrapeValue(server->metrics().Scrape(), "tensorops_store_log_bytes"));
    // As a crash leaves it: the server's stop would write a snapshot first.
    fs::remove_all(pristine);
    fs::copy(dir, pristine, fs::copy_options::recursive);
  }
  std::vector<double> recovery_s, start_s;
  for (int rep = 0; rep < repetitions; ++rep) {
    fs::remove_all(dir);
    fs::copy(pristine, dir, fs::copy_options::recursive);
    const absl::Time start = absl::Now();
    std::unique_ptr<Server> server = StartServer(dir, StoreSync::kNone);
    start_s.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    recovery_s.push_back(
        ScrapeValue(server->metrics().Scrape(), "tensorops_store_recovery_seconds"));
  }
  absl::PrintF("\n### Recovery (medians of %d)\n\n", repetitions);
  absl::PrintF(
      "| table | logged pushes | log | snapshot written in | recovery | start-up (all) |\n"
      "|---|---|---|---|---|---|\n");
  absl::PrintF(
      "| %d x %d float32 (%.2f GB) | %d of %d rows | %.2f GB | %.2f s | %.2f s | %.2f s |\n", rows,
      cols, static_cast<double>(rows * cols * 4) / 1e9, pushes, push_rows,
      static_cast<double>(log_bytes) / 1e9, absl::ToDoubleSeconds(snapshot_time),
      Median(recovery_s), Median(start_s));
}

}  // namespace
}  // namespace tensorops::durable_bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  namespace fs = std::filesystem;
  const bool quick = absl::GetFlag(FLAGS_quick);
  std::string root = absl::GetFlag(FLAGS_dir);
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        (fs::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") / "durable_bench_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      tensorops::durable_bench::Fail("mkdtemp", absl::UnavailableError(pattern));
    }
    root = pattern;
  }
  absl::PrintF("durable_bench: stores in %s (%s)\n", root, quick ? "quick" : "full run");
  tensorops::durable_bench::CostTable(root, quick);
  tensorops::durable_bench::RecoveryTable(root, quick);
  fs::remove_all(root);
  return 0;
}
