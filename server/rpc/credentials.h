// Server credentials: the grpc::ServerCredentials a Server listens with, built from
// ServerOptions::Security: plaintext, TLS, or mutual TLS (client certificates required).
//
//   absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
//       BuildServerCredentials(options.security);
//   if (!credentials.ok()) return credentials.status();  // names the field or the file
//   builder.AddListeningPort(address, *credentials, &selected_port);
//
// The bearer token (ServerOptions::Security::auth_token_file) is not part of these credentials:
// gRPC runs no AuthMetadataProcessor on plaintext ports, so TokenAuthenticator (server/rpc/auth.h)
// checks it inside the service instead.
#ifndef TENSOROPS_SERVER_RPC_CREDENTIALS_H_
#define TENSOROPS_SERVER_RPC_CREDENTIALS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/config/server_options.h"

namespace tensorops {

// BuildServerCredentials returns insecure credentials when no TLS file is set, TLS credentials
// with tls_cert_file and tls_key_file, and mutual-TLS credentials (a verified client certificate
// required) when tls_client_ca_file is set too. INVALID_ARGUMENT naming the field for a
// certificate without a key (or the reverse) and for a client CA without a certificate; for a file
// that cannot be read, the errno's code (NOT_FOUND, PERMISSION_DENIED, ...) with the field and the
// path; INVALID_ARGUMENT with the path for a file that holds no PEM block of the expected kind.
// Whether the certificate and key match, and are valid PEM beyond their markers, gRPC only finds
// out when the port is added (Server::Start then fails to listen).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const ServerOptions::Security& security);

// TlsModeName names the transport `security` asks for, for logs: "off", "on" or "mutual".
std::string_view TlsModeName(const ServerOptions::Security& security);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_RPC_CREDENTIALS_H_
