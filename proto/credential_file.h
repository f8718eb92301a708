// ReadCredentialFile: reading a TLS certificate, key or bearer-token file, for both ends of the
// wire (the server's flags and the client's options name such files).
//
//   absl::StatusOr<std::string> pem = wire::ReadCredentialFile("tls_cert", "/etc/tls/cert.pem");
#ifndef TENSOROPS_PROTO_CREDENTIAL_FILE_H_
#define TENSOROPS_PROTO_CREDENTIAL_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tensorops::wire {

// ReadCredentialFile returns the contents of `path`, which the option or flag `field` names. The
// errno's code with the field and the path when it cannot be read; INVALID_ARGUMENT for a file
// over 1 MiB (no certificate, key or token is that large; a device such as /dev/zero would never
// end).
absl::StatusOr<std::string> ReadCredentialFile(std::string_view field, const std::string& path);

}  // namespace tensorops::wire

#endif  // TENSOROPS_PROTO_CREDENTIAL_FILE_H_
