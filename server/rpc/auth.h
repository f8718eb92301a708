// TokenAuthenticator: the bearer-token check of the TensorOps service. Callers send
//
//   authorization: Bearer <token>
//
// as call metadata; the token is one of those in the server's --auth_token_file, one per line.
// Each token is a tenant of its own: its stored tensors are invisible to every other token
// (StoreNamespace, server/core/op_call.h).
//
//   absl::StatusOr<std::unique_ptr<TokenAuthenticator>> authenticator =
//       TokenAuthenticator::FromFile("/etc/tensorops/token");
//   if (!authenticator.ok()) return authenticator.status();
//   absl::Status allowed = (*authenticator)->Check(context->client_metadata());
//   if (!allowed.ok()) return allowed;  // UNAUTHENTICATED
//
// Why not a grpc::AuthMetadataProcessor: gRPC C++ runs those only on secure ports, and the token
// must also guard plaintext ones (behind a TLS-terminating proxy, say). So TensorOpsService calls
// Check first thing in every handler, and gRPC's own services (health, reflection) stay open.
#ifndef TENSOROPS_SERVER_RPC_AUTH_H_
#define TENSOROPS_SERVER_RPC_AUTH_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/string_ref.h"

namespace tensorops {

// TokenAuthenticator holds the accepted bearer tokens and checks calls' metadata against them.
// Immutable after construction, so any number of threads may call Check. Not copyable.
class TokenAuthenticator {
 public:
  // kMetadataKey is the metadata key the token travels under (gRPC lower-cases keys).
  static constexpr char kMetadataKey[] = "authorization";

  // FromFile reads the tokens from `path`, one per line, ignoring whitespace around each, blank
  // lines and lines starting with '#'. The file's error (NOT_FOUND, PERMISSION_DENIED, ...)
  // naming the path when it cannot be read; INVALID_ARGUMENT naming the path (and the line) for
  // a file without a token, a token with characters that cannot travel in gRPC metadata
  // (anything but printable ASCII other than space) and a token given twice. No message
  // contains a token.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(const std::string& path);

  TokenAuthenticator(const TokenAuthenticator&) = delete;
  TokenAuthenticator& operator=(const TokenAuthenticator&) = delete;

  // Check returns OK when `client_metadata` has an "authorization" entry of "Bearer <token>"
  // (the scheme's case does not matter; with several entries, the first counts), and
  // UNAUTHENTICATED otherwise: "missing authorization metadata ..." without the entry,
  // "authorization metadata is not a bearer token ..." for another scheme, "wrong bearer token"
  // for another token. No message repeats what the caller sent or the expected token. The
  // comparison takes the same time wherever the tokens differ.
  absl::Status Check(
      const std::multimap<grpc::string_ref, grpc::string_ref>& client_metadata) const {
    return Identify(client_metadata).status();
  }

  // Identify is Check that also says which token the call sent: its position among the file's
  // tokens, from 1. The comparison takes the same time whichever token matches, if any.
  absl::StatusOr<int> Identify(
      const std::multimap<grpc::string_ref, grpc::string_ref>& client_metadata) const;

  int token_count() const { return static_cast<int>(tokens_.size()); }

 private:
  explicit TokenAuthenticator(std::vector<std::string> tokens);

  const std::vector<std::string> tokens_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_RPC_AUTH_H_
