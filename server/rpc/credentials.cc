#include "server/rpc/credentials.h"

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "grpcpp/security/server_credentials.h"
#include "proto/credential_file.h"

namespace tensorops {
namespace {

// ReadPem reads `path` and checks that it holds a PEM block whose label ends in `label_suffix`
// ("CERTIFICATE", "PRIVATE KEY"), so that swapped or mistyped paths fail here, naming the file,
// rather than as gRPC's vague listen failure.
absl::StatusOr<std::string> ReadPem(std::string_view field, const std::string& path,
                                    std::string_view label_suffix) {
  absl::StatusOr<std::string> contents = wire::ReadCredentialFile(field, path);
  if (!contents.ok()) return contents.status();
  if (!absl::StrContains(*contents, "-----BEGIN ") ||
      !absl::StrContains(*contents, absl::StrFormat("%s-----", label_suffix))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s holds no PEM %s (expected a \"-----BEGIN ...%s-----\" block)",
                        field, path, label_suffix, label_suffix));
  }
  return contents;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const ServerOptions::Security& security) {
  const bool has_cert = !security.tls_cert_file.empty();
  const bool has_key = !security.tls_key_file.empty();
  if (has_cert != has_key) {
    return absl::InvalidArgumentError(
        has_cert ? "--tls_cert is set but --tls_key is not (TLS needs both)"
                 : "--tls_key is set but --tls_cert is not (TLS needs both)");
  }
  if (!security.tls_client_ca_file.empty() && !has_cert) {
    return absl::InvalidArgumentError(
        "--tls_client_ca is set but --tls_cert is not (mutual TLS needs the server's own "
        "certificate and key too)");
  }
  if (!has_cert) return grpc::InsecureServerCredentials();

  grpc::SslServerCredentialsOptions::PemKeyCertPair key_cert;
  absl::StatusOr<std::string> cert = ReadPem("--tls_cert", security.tls_cert_file, "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  key_cert.cert_chain = std::move(*cert);
  absl::StatusOr<std::string> key = ReadPem("--tls_key", security.tls_key_file, "PRIVATE KEY");
  if (!key.ok()) return key.status();
  key_cert.private_key = std::move(*key);

  grpc::SslServerCredentialsOptions ssl_options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!security.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> client_ca =
        ReadPem("--tls_client_ca", security.tls_client_ca_file, "CERTIFICATE");
    if (!client_ca.ok()) return client_ca.status();
    ssl_options.pem_root_certs = std::move(*client_ca);
    ssl_options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  ssl_options.pem_key_cert_pairs.push_back(std::move(key_cert));
  return grpc::SslServerCredentials(ssl_options);
}

std::string_view TlsModeName(const ServerOptions::Security& security) {
  if (security.tls_cert_file.empty()) return "off";
  return security.tls_client_ca_file.empty() ? "on" : "mutual";
}

}  // namespace tensorops
