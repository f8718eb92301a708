#include "server/rpc/auth.h"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "openssl/evp.h"
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

// IsTenantName tells whether `name` follows TokenAuthenticator::kTenantNameRule.
bool IsTenantName(absl::string_view name) {
  if (name.empty() || name.size() > 64 || !absl::ascii_isalnum(name.front()) ||
      absl::StartsWith(name, "token-")) {
    return false;
  }
  return absl::c_all_of(
      name, [](char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-'; });
}

// UnnamedTenantNamespace is the namespace of a token without a tenant name: "token:" and the
// first 8 bytes of the token's SHA-256 in hex. Stable across restarts and edits of the file's
// other lines; a store file shows it, never the token. 64 bits keep an accidental collision of
// two tokens out of reach (FromFile refuses one anyway).
absl::StatusOr<std::string> UnnamedTenantNamespace(absl::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  if (EVP_Digest(token.data(), token.size(), digest, &digest_size, EVP_sha256(), nullptr) != 1 ||
      digest_size < 8) {
    return absl::InternalError("auth_token_file: OpenSSL cannot compute a SHA-256");
  }
  return absl::StrCat("token:", absl::BytesToHexString(
                                    absl::string_view(reinterpret_cast<const char*>(digest), 8)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(
    const std::string& path) {
  absl::StatusOr<std::string> contents = wire::ReadCredentialFile("auth_token_file", path);
  if (!contents.ok()) return contents.status();
  std::vector<Token> tokens;
  // The line of each named tenant's token (tokens[i] is named when tenant_lines[i] > 0).
  std::vector<int> tenant_lines;
  int line_number = 0;
  for (const absl::string_view line : absl::StrSplit(*contents, '\n')) {
    ++line_number;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    // A word that starts with '#' starts a comment: no token starts with one.
    words.erase(absl::c_find_if(words, [](absl::string_view word) { return word.front() == '#'; }),
                words.end());
    if (words.empty()) continue;
    const auto is_tenant = [](absl::string_view word) { return word.back() == ':'; };
    const int tenant_words = static_cast<int>(absl::c_count_if(words, is_tenant));
    if (words.size() > 2 || tenant_words != static_cast<int>(words.size()) - 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth_token_file: line %d of %s is not TOKEN or TENANT: TOKEN (it has %d words, %d of "
          "them a tenant name ending in ':'; a comment starts with '#')",
          line_number, path, words.size(), tenant_words));
    }
    const absl::string_view token = is_tenant(words.front()) ? words.back() : words.front();
    if (!IsMetadataSafe(token)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth_token_file: the token on line %d of %s has a character that gRPC metadata "
          "cannot carry (expected printable ASCII without spaces)",
          line_number, path));
    }
    if (absl::c_any_of(tokens, [&](const Token& earlier) { return earlier.token == token; })) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth_token_file: line %d of %s repeats an earlier token (a token belongs to one "
          "tenant)",
          line_number, path));
    }
    std::string ns;
    if (words.size() == 2) {
      const absl::string_view tenant =
          absl::StripSuffix(is_tenant(words.front()) ? words.front() : words.back(), ":");
      if (!IsTenantName(tenant)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "auth_token_file: the tenant name on line %d of %s breaks the rule for tenant names "
            "(%s)",
            line_number, path, kTenantNameRule));
      }
      ns = std::string(tenant);
    } else {
      absl::StatusOr<std::string> unnamed = UnnamedTenantNamespace(token);
      if (!unnamed.ok()) return unnamed.status();
      if (absl::c_any_of(tokens, [&](const Token& earlier) { return earlier.ns == *unnamed; })) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "auth_token_file: the token on line %d of %s has the namespace of an earlier token "
            "(the first 64 bits of their SHA-256 agree): give one of them a tenant name",
            line_number, path));
      }
      ns = *std::move(unnamed);
    }
    tokens.push_back({.token = std::string(token), .ns = std::move(ns)});
    tenant_lines.push_back(words.size() == 2 ? line_number : 0);
  }
  // A tenant's name shows in store files and logs: it must not be a token too (a line written
  // as TOKEN: NAME, say).
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tenant_lines[i] == 0) continue;
    if (absl::c_any_of(tokens, [&](const Token& other) { return other.token == tokens[i].ns; })) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "auth_token_file: the tenant name on line %d of %s is also a token of the file; a "
          "tenant's name shows in store files and logs, a token must not",
          tenant_lines[i], path));
    }
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth_token_file: %s holds no token (it is empty, only whitespace or comments)", path));
  }
  return std::unique_ptr<TokenAuthenticator>(new TokenAuthenticator(std::move(tokens)));
}

TokenAuthenticator::TokenAuthenticator(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

std::vector<std::string> TokenAuthenticator::Namespaces() const {
  std::vector<std::string> namespaces;
  for (const Token& token : tokens_) {
    if (!absl::c_linear_search(namespaces, token.ns)) namespaces.push_back(token.ns);
  }
  return namespaces;
}

absl::flat_hash_map<std::string, std::string> TokenAuthenticator::LegacyNamespaces() const {
  absl::flat_hash_map<std::string, std::string> legacy;
  std::vector<std::string_view> mapped;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    // Two earlier tenants merged into one: only the first is mapped, so that recovery never
    // writes one's tensors over the other's (the second's stay apart, warned of).
    if (absl::c_linear_search(mapped, tokens_[i].ns)) continue;
    mapped.push_back(tokens_[i].ns);
    legacy.emplace(absl::StrFormat("token-%d", i + 1), tokens_[i].ns);
  }
  return legacy;
}

absl::StatusOr<std::string_view> TokenAuthenticator::Identify(
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
  const Token* match = nullptr;
  for (const Token& token : tokens_) {
    if (ConstantTimeEquals(presented, token.token)) match = &token;
  }
  if (match == nullptr) return absl::UnauthenticatedError("wrong bearer token");
  return std::string_view(match->ns);
}

}  // namespace tensorops
