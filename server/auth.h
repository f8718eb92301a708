// TokenAuthenticator: the bearer-token check of the TensorOps service. Callers send
//
//   authorization: Bearer <token>
//
// as call metadata; the token is the one in the server's --auth_token_file.
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
#ifndef TENSOROPS_SERVER_AUTH_H_
#define TENSOROPS_SERVER_AUTH_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/string_ref.h"

namespace tensorops {

// TokenAuthenticator holds one expected bearer token and checks calls' metadata against it.
// Immutable after construction, so any number of threads may call Check. Not copyable.
class TokenAuthenticator {
 public:
  // kMetadataKey is the metadata key the token travels under (gRPC lower-cases keys).
  static constexpr char kMetadataKey[] = "authorization";

  // FromFile reads the token from `path`, ignoring whitespace around it (a trailing newline,
  // say). The file's error (NOT_FOUND, PERMISSION_DENIED, ...) naming the path when it cannot be
  // read; INVALID_ARGUMENT naming the path for an empty token and for a token with characters
  // that cannot travel in gRPC metadata (anything but printable ASCII other than space). Neither
  // message contains the token.
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
      const std::multimap<grpc::string_ref, grpc::string_ref>& client_metadata) const;

 private:
  explicit TokenAuthenticator(std::string token);

  const std::string token_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_AUTH_H_
