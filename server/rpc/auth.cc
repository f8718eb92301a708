#include "server/rpc/auth.h"

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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
  std::vector<std::string> tokens;
  int line_number = 0;
  for (const absl::string_view line : absl::StrSplit(*contents, '\n')) {
    ++line_number;
    const absl::string_view token = absl::StripAsciiWhitespace(line);
    if (token.empty() || token.front() == '#') continue;
    if (!IsMetadataSafe(token)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth_token_file: the token on line %d of %s has a character that gRPC metadata "
          "cannot carry (expected printable ASCII without spaces)",
          line_number, path));
    }
    if (absl::c_linear_search(tokens, token)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth_token_file: line %d of %s repeats an earlier token (each token is one tenant)",
          line_number, path));
    }
    tokens.emplace_back(token);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth_token_file: %s holds no token (it is empty, only whitespace or comments)", path));
  }
  return std::unique_ptr<TokenAuthenticator>(new TokenAuthenticator(std::move(tokens)));
}

TokenAuthenticator::TokenAuthenticator(std::vector<std::string> tokens)
    : tokens_(std::move(tokens)) {}

absl::StatusOr<int> TokenAuthenticator::Identify(
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
  // Every token is compared, whichever matches, so that the time says nothing about which.
  const absl::string_view presented = value.substr(kScheme.size());
  int match = 0;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (ConstantTimeEquals(presented, tokens_[i])) match = static_cast<int>(i) + 1;
  }
  if (match == 0) return absl::UnauthenticatedError("wrong bearer token");
  return match;
}

}  // namespace tensorops
