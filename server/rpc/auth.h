// TokenAuthenticator: the bearer-token check of the TensorOps service. Callers send
//
//   authorization: Bearer <token>
//
// as call metadata; the token is one of those in the server's --auth_token_file, one per line,
// each line either `TOKEN` or `TENANT: TOKEN`. Each tenant has a store namespace of its own: its
// stored tensors and shared-memory regions are invisible to every other tenant
// (StoreNamespace, server/core/op_call.h). A named tenant's namespace is its name, so several
// lines may name one tenant (a token being rotated: the old and the new one both work); an
// unnamed token is a tenant of its own, whose namespace is derived from the token itself
// ("token:" and 16 hex digits of its SHA-256). Either way the namespace does not depend on the
// line's position, so reordering, adding or removing other lines never hands one tenant's tensors
// to another.
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
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
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

  // FromFile reads the tokens from `path`, one per line, `TOKEN` or `TENANT: TOKEN` (the tenant's
  // name ends in ':'; either word may come first), ignoring blank lines and comments (from a word
  // that starts with '#' to the end of the line). The file's error (NOT_FOUND,
  // PERMISSION_DENIED, ...) naming the path when it cannot be read; INVALID_ARGUMENT naming the
  // path (and the line) for a file without a token, a line of another form, a token with
  // characters that cannot travel in gRPC metadata (anything but printable ASCII other than
  // space), a token given twice, a tenant name that breaks kTenantNameRule, and a tenant name
  // that is also a token. No message contains a token or a tenant name.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(const std::string& path);

  // What a tenant's name may be: its namespace, shown in store files and logs. "token-" is
  // reserved: it starts the namespaces of earlier versions (LegacyNamespaces).
  static constexpr char kTenantNameRule[] =
      "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit, and not "
      "starting with \"token-\"";

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

  // Identify is Check that also says whose token the call sent: the tenant's store namespace
  // (valid as long as this object). The comparison takes the same time whichever token matches,
  // if any.
  absl::StatusOr<std::string_view> Identify(
      const std::multimap<grpc::string_ref, grpc::string_ref>& client_metadata) const;

  int token_count() const { return static_cast<int>(tokens_.size()); }
  // The namespaces of the file's tenants, each once, in the order of their first lines.
  std::vector<std::string> Namespaces() const;

  // LegacyNamespaces maps the namespace earlier servers gave each token, "token-N" for the N-th
  // token of the file, to the namespace it has now: a store directory they wrote is recovered
  // with it (DurableStoreOptions::renamed_namespaces), assuming the file's tokens are still in
  // the order they had then. Of several lines of one tenant, only the first is mapped: the
  // earlier server's tenants of the others stay apart rather than overwrite each other.
  absl::flat_hash_map<std::string, std::string> LegacyNamespaces() const;

 private:
  // One line of the file.
  struct Token {
    std::string token;
    std::string ns;  // the tenant's namespace
  };

  explicit TokenAuthenticator(std::vector<Token> tokens);

  const std::vector<Token> tokens_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_RPC_AUTH_H_
