// flashctl cache lookup (--tokens IDS | --text TEXT --tokenizer PATH) --fingerprint HEX
//                       [--salt S] [--json]
#include <iostream>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/flashctl/commands/cache_common.h"
#include "tools/flashctl/table.h"

namespace flashserve::flashctl {
namespace {

absl::StatusOr<std::vector<cache::TokenId>> TokensOf(const CacheLookupOptions& o) {
  if (!o.tokens.empty() == !o.text.empty()) {
    return absl::InvalidArgumentError("give exactly one of --tokens IDS, --text TEXT");
  }
  if (!o.tokens.empty()) return ParseTokenList(o.tokens);
  if (o.tokenizer.empty()) return absl::InvalidArgumentError("--text needs --tokenizer PATH");
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::Load(o.tokenizer);
  if (!tok.ok()) return tok.status();
  absl::StatusOr<std::vector<tokenizer::TokenId>> ids = (*tok)->Encode(o.text);
  if (!ids.ok()) return ids.status();
  return std::vector<cache::TokenId>(ids->begin(), ids->end());
}

}  // namespace

int RunCacheLookup(const CacheLookupOptions& options) {
  absl::StatusOr<cache::Sha256Digest> digest = ParseHexDigest(options.fingerprint, "--fingerprint");
  if (!digest.ok()) return Fail("lookup", digest.status(), true);
  absl::StatusOr<std::vector<cache::TokenId>> tokens = TokensOf(options);
  if (!tokens.ok()) {
    return Fail("lookup", tokens.status(), absl::IsInvalidArgument(tokens.status()));
  }
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail("lookup", client.status(), true);
  cache::ModelFingerprint fp;
  fp.digest = *digest;
  // touch = false: looking at the cache must not change what it evicts next.
  absl::StatusOr<cache::LookupResult> r =
      (*client)->Lookup(fp, *tokens, options.salt, /*touch=*/false);
  if (!r.ok()) return Fail("lookup", r.status());
  const uint64_t n = tokens->size();
  const uint64_t full_blocks = n / cache::kBlockTokens;

  if (options.conn.json) {
    nlohmann::ordered_json doc;
    doc["tokens"] = n;
    doc["full_blocks"] = full_blocks;
    doc["hit_tokens"] = r->hit_tokens;
    doc["miss_tokens"] = n - r->hit_tokens;
    doc["blocks"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < r->blocks.size(); ++i) {
      const cache::CachedBlock& b = r->blocks[i];
      doc["blocks"].push_back({{"index", i},
                               {"first_token", i * cache::kBlockTokens},
                               {"key", b.key.ToHex()},
                               {"tier", std::string(cache::CacheTierName(b.residency))},
                               {"age_ms", absl::ToInt64Milliseconds(b.age)},
                               {"ttl_remaining_ms", absl::ToInt64Milliseconds(b.ttl_remaining)},
                               {"size_bytes", b.size_bytes},
                               {"pinned", b.pinned}});
    }
    if (r->swa.has_value()) {
      doc["swa_snapshot"] = {{"key", r->swa->key.ToHex()},
                             {"tier", "host"},
                             {"prefix_tokens", r->swa->prefix_tokens},
                             {"age_ms", absl::ToInt64Milliseconds(r->swa->age)},
                             {"ttl_remaining_ms", absl::ToInt64Milliseconds(r->swa->ttl_remaining)},
                             {"size_bytes", r->swa->size_bytes}};
    } else {
      doc["swa_snapshot"] = nullptr;
    }
    std::cout << doc.dump(2) << "\n";
    return 0;
  }

  std::cout << n << " tokens, " << full_blocks << " full blocks: " << r->hit_tokens
            << " tokens cached (" << r->blocks.size() << " blocks), " << n - r->hit_tokens
            << " to compute\n\n";
  Table t({"block", "tokens", "key", "served by", "age", "ttl left", "size", "pinned"},
          {true, false, false, false, true, true, true, false});
  for (size_t i = 0; i < r->blocks.size(); ++i) {
    const cache::CachedBlock& b = r->blocks[i];
    t.AddRow({absl::StrCat(i),
              absl::StrCat(i * cache::kBlockTokens, "-", (i + 1) * cache::kBlockTokens - 1),
              b.key.ToHex().substr(0, 16), std::string(cache::CacheTierName(b.residency)),
              ShortDuration(b.age), b.pinned ? "pinned" : ShortDuration(b.ttl_remaining),
              HumanBytes(static_cast<double>(b.size_bytes)), b.pinned ? "yes" : ""});
  }
  if (r->blocks.size() < full_blocks) {  // the misses, in one row
    t.AddRow({absl::StrCat(r->blocks.size(), "-", full_blocks - 1),
              absl::StrCat(r->hit_tokens, "-", full_blocks * cache::kBlockTokens - 1), "-",
              "miss (prefill)", "-", "-", "-", ""});
  }
  std::cout << t.Render();
  if (r->swa.has_value()) {
    std::cout << "\nSWA snapshot for the prefix ending at token " << r->swa->prefix_tokens
              << ": host DRAM, " << HumanBytes(static_cast<double>(r->swa->size_bytes)) << ", age "
              << ShortDuration(r->swa->age) << ", ttl left " << ShortDuration(r->swa->ttl_remaining)
              << " -> resumes exactly\n";
  } else {
    std::cout << "\nno SWA snapshot for a prefix end in [" << r->hit_tokens << ", "
              << r->hit_tokens + cache::kBlockTokens
              << ") -> the session resumes through bounded replay\n";
  }
  return 0;
}

}  // namespace flashserve::flashctl
