#include "server/core/in_flight_calls.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/interceptor.h"

namespace tensorops {

// Interceptor counts its call from creation to destruction and otherwise lets every step pass.
class InFlightCalls::Interceptor final : public grpc::experimental::Interceptor {
 public:
  explicit Interceptor(InFlightCalls* calls) : calls_(calls) { calls_->Started(); }
  ~Interceptor() override { calls_->Ended(); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  InFlightCalls* const calls_;
};

class InFlightCalls::Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  Factory(InFlightCalls* calls, const std::vector<std::string>& counted_elsewhere)
      : calls_(calls), counted_elsewhere_(counted_elsewhere.begin(), counted_elsewhere.end()) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // No interceptor at all for these: gRPC then runs their calls as if it had none.
    const char* const method = info->method();
    if (method != nullptr && counted_elsewhere_.contains(absl::string_view(method))) {
      return nullptr;
    }
    return new Interceptor(calls_);
  }

 private:
  InFlightCalls* const calls_;
  const absl::flat_hash_set<std::string> counted_elsewhere_;
};

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
InFlightCalls::NewInterceptorFactory(const std::vector<std::string>& counted_elsewhere) {
  return std::make_unique<Factory>(this, counted_elsewhere);
}

int64_t InFlightCalls::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

bool InFlightCalls::AwaitNone(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(
                                   +[](const int64_t* count) { return *count == 0; }, &count_),
                               deadline);
}

void InFlightCalls::Started() {
  absl::MutexLock lock(&mu_);
  ++count_;
}

void InFlightCalls::Ended() {
  absl::MutexLock lock(&mu_);
  --count_;
}

}  // namespace tensorops
