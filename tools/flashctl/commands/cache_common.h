// Helpers shared by flashctl's cache commands (cache_*.cc): connecting with the token, parsing
// keys and token lists, formatting durations and entries, printing errors. Internal to flashctl.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache_service/client/cache_client.h"
#include "nlohmann/json.hpp"
#include "tools/flashctl/commands/cache_commands.h"

namespace flashserve::flashctl {

// A client for options.address with the token (or $FLASHSERVE_ADMIN_TOKEN) and the timeout.
absl::StatusOr<std::unique_ptr<cache::CacheClient>> ConnectCache(
    const CacheConnectionOptions& options);

// 64 hex digits -> digest; InvalidArgument naming `what` otherwise.
absl::StatusOr<cache::Sha256Digest> ParseHexDigest(std::string_view hex, std::string_view what);
// Keys for evict/pin/inspect: `kind` "block" or "swa".
absl::StatusOr<std::vector<cache::EntryRef>> ParseEntryRefs(const std::vector<std::string>& keys,
                                                            std::string_view kind);
// Ids separated by commas and/or whitespace, optionally inside [ ].
absl::StatusOr<std::vector<cache::TokenId>> ParseTokenList(std::string_view text);

// "3d4h", "12m05s", "850ms" — compact, for tables.
std::string ShortDuration(absl::Duration d);
// "2026-11-29 20:46:01" UTC.
std::string UtcTime(absl::Time t);
std::string_view KindName(const cache::EntryRef& ref);  // "block" | "swa"

// One entry as JSON: key, kind, fingerprint, tier, size_bytes, created/last_access/expires (Unix
// seconds; expires null when pinned), pinned.
nlohmann::ordered_json EntryJson(const cache::EntryDetails& e);

// Prints "flashctl cache <command>: <message>" on stderr; returns 1, or 2 for InvalidArgument
// raised by argument parsing (`usage`).
int Fail(std::string_view command, const absl::Status& status, bool usage = false);

}  // namespace flashserve::flashctl
