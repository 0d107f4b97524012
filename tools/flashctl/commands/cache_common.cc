#include "tools/flashctl/commands/cache_common.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/strings.h"

namespace flashserve::flashctl {

absl::StatusOr<std::unique_ptr<cache::CacheClient>> ConnectCache(
    const CacheConnectionOptions& options) {
  cache::CacheClientOptions o;
  o.address = options.address;
  o.admin_token = options.token;
  if (o.admin_token.empty()) {
    if (const char* env = std::getenv("FLASHSERVE_ADMIN_TOKEN"); env != nullptr) {
      o.admin_token = env;
    }
  }
  if (!(options.timeout_s > 0)) return absl::InvalidArgumentError("--timeout must be positive");
  o.timeout = absl::Seconds(options.timeout_s);
  o.compact_timeout = std::max(o.compact_timeout, o.timeout);
  return cache::CacheClient::Connect(std::move(o));
}

absl::StatusOr<cache::Sha256Digest> ParseHexDigest(std::string_view hex, std::string_view what) {
  absl::StatusOr<cache::Sha256Digest> d = cache::DigestFromHex(hex);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(what), " must be 64 hex digits, got \"", ToAbsl(hex), "\""));
  }
  return d;
}

absl::StatusOr<std::vector<cache::EntryRef>> ParseEntryRefs(const std::vector<std::string>& keys,
                                                            std::string_view kind) {
  if (kind != "block" && kind != "swa") {
    return absl::InvalidArgumentError("--kind must be block or swa");
  }
  if (keys.empty()) return absl::InvalidArgumentError("give at least one key");
  std::vector<cache::EntryRef> refs;
  for (const std::string& k : keys) {
    absl::StatusOr<cache::Sha256Digest> d = ParseHexDigest(k, "a key");
    if (!d.ok()) return d.status();
    refs.push_back(cache::EntryRef{kind == "block", *d});
  }
  return refs;
}

absl::StatusOr<std::vector<cache::TokenId>> ParseTokenList(std::string_view text) {
  std::vector<cache::TokenId> ids;
  auto is_separator = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '[' || c == ']';
  };
  size_t i = 0;
  while (i < text.size()) {
    if (is_separator(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !is_separator(text[end])) ++end;
    cache::TokenId id = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, id);
    if (ec != std::errc() || ptr != text.data() + end || id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad token id \"", ToAbsl(text.substr(i, end - i)), "\" (non-negative integers)"));
    }
    ids.push_back(id);
    i = end;
  }
  return ids;
}

std::string ShortDuration(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t ms = absl::ToInt64Milliseconds(d);
  if (ms < 1000) return absl::StrCat(ms, "ms");
  const int64_t s = ms / 1000;
  if (s < 60) return absl::StrFormat("%d.%01ds", s, (ms % 1000) / 100);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string UtcTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", t, absl::UTCTimeZone());
}

std::string_view KindName(const cache::EntryRef& ref) { return ref.is_block ? "block" : "swa"; }

nlohmann::ordered_json EntryJson(const cache::EntryDetails& e) {
  nlohmann::ordered_json j;
  j["key"] = cache::DigestToHex(e.ref.key);
  j["kind"] = std::string(KindName(e.ref));
  j["fingerprint"] = cache::DigestToHex(e.fingerprint);
  j["tier"] = std::string(cache::CacheTierName(e.tier));
  j["size_bytes"] = e.size_bytes;
  j["created_unix_s"] = absl::ToUnixSeconds(e.created);
  j["last_access_unix_s"] = absl::ToUnixSeconds(e.last_access);
  j["expires_unix_s"] =
      e.expires.has_value() ? nlohmann::ordered_json(absl::ToUnixSeconds(*e.expires)) : nullptr;
  j["pinned"] = e.pinned;
  return j;
}

int Fail(std::string_view command, const absl::Status& status, bool usage) {
  std::cerr << "flashctl cache " << command << ": " << status.message() << "\n";
  return usage ? 2 : 1;
}

}  // namespace flashserve::flashctl
