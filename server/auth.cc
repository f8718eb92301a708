#include "server/auth.h"

#include <cstddef>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "proto/credential_file.h"

namespace tensorops {
namespace {

constexpr absl::string_view kScheme = "Bearer ";

// ConstantTimeEquals compares `presented` with `expected` (not empty) without stopping at the
// first difference, so that the time a wrong token takes does not tell an attacker how much of
// it was right. The time does depend on the presented length, which the attacker knows anyway.
bool ConstantTimeEquals(absl::string_view presented, absl::string_view expected) {
  unsigned char difference = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    difference |= static_cast<unsigned char>(presented[i] ^ expected[i % expected.size()]);
  }
  return difference == 0;
}

// IsMetadataSafe tells whether `token` can be sent as (part of) a gRPC metadata value: printable
// ASCII. Spaces are excluded too, since "Bearer a b" would be ambiguous.
bool IsMetadataSafe(absl::string_view token) {
  for (char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(
    const std::string& path) {
  absl::StatusOr<std::string> contents = wire::ReadCredentialFile("auth_token_file", path);
  if (!contents.ok()) return contents.status();
  const absl::string_view token = absl::StripAsciiWhitespace(*contents);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth_token_file: %s holds no token (it is empty or only whitespace)", path));
  }
  if (!IsMetadataSafe(token)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth_token_file: the token in %s has a character that gRPC metadata cannot carry "
        "(expected printable ASCII without spaces)",
        path));
  }
  return std::unique_ptr<TokenAuthenticator>(new TokenAuthenticator(std::string(token)));
}

TokenAuthenticator::TokenAuthenticator(std::string token) : token_(std::move(token)) {}

absl::Status TokenAuthenticator::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& client_metadata) const {
  const auto entry = client_metadata.find(kMetadataKey);
  if (entry == client_metadata.end()) {
    return absl::UnauthenticatedError(
        "missing authorization metadata (expected \"authorization: Bearer <token>\")");
  }
  const absl::string_view value(entry->second.data(), entry->second.size());
  if (value.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError(
        "authorization metadata is not a bearer token (expected \"authorization: Bearer "
        "<token>\")");
  }
  if (!ConstantTimeEquals(value.substr(kScheme.size()), token_)) {
    return absl::UnauthenticatedError("wrong bearer token");
  }
  return absl::OkStatus();
}

}  // namespace tensorops
