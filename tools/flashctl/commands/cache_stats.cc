// flashctl cache stats [--json]
#include <iostream>

#include "absl/strings/str_cat.h"
#include "tools/flashctl/commands/cache_common.h"
#include "tools/flashctl/table.h"

namespace flashserve::flashctl {
namespace {

std::string Ratio(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0) return "-";
  return absl::StrCat(100 * hits / (hits + misses), "%");
}

}  // namespace

int RunCacheStats(const CacheStatsOptions& options) {
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail("stats", client.status(), true);
  absl::StatusOr<cache::CacheStatsInfo> stats = (*client)->Stats();
  if (!stats.ok()) return Fail("stats", stats.status());

  if (options.conn.json) {
    nlohmann::ordered_json doc;
    doc["uptime_s"] = absl::ToInt64Seconds(stats->uptime);
    doc["lookups"] = stats->lookups;
    doc["lookup_hit_tokens"] = stats->lookup_hit_tokens;
    doc["lookup_miss_tokens"] = stats->lookup_miss_tokens;
    doc["tiers"] = nlohmann::ordered_json::array();
    for (const cache::TierStatsInfo& t : stats->tiers) {
      doc["tiers"].push_back({{"tier", std::string(cache::CacheTierName(t.tier))},
                              {"entries", t.entries},
                              {"bytes_used", t.bytes_used},
                              {"bytes_capacity", t.bytes_capacity},
                              {"hits", t.hits},
                              {"misses", t.misses},
                              {"bytes_read", t.bytes_read},
                              {"bytes_written", t.bytes_written},
                              {"evictions", t.evictions},
                              {"expirations", t.expirations},
                              {"checksum_failures", t.checksum_failures}});
    }
    doc["models"] = nlohmann::ordered_json::array();
    for (const cache::ModelUsageInfo& m : stats->models) {
      doc["models"].push_back({{"fingerprint", cache::DigestToHex(m.fingerprint)},
                               {"blocks", m.blocks},
                               {"swa_snapshots", m.swa_snapshots},
                               {"bytes", m.bytes}});
    }
    std::cout << doc.dump(2) << "\n";
    return 0;
  }

  std::cout << "cache at " << options.conn.address << ", up " << ShortDuration(stats->uptime)
            << "; " << WithThousands(static_cast<long long>(stats->lookups)) << " lookups, "
            << Ratio(stats->lookup_hit_tokens, stats->lookup_miss_tokens)
            << " of looked-up tokens cached\n\n";
  Table tiers({"tier", "entries", "used", "capacity", "hits", "misses", "hit rate", "read",
               "written", "evicted", "expired", "checksum fail"},
              {false, true, true, true, true, true, true, true, true, true, true, true});
  for (const cache::TierStatsInfo& t : stats->tiers) {
    tiers.AddRow({std::string(cache::CacheTierName(t.tier)),
                  WithThousands(static_cast<long long>(t.entries)),
                  HumanBytes(static_cast<double>(t.bytes_used)),
                  HumanBytes(static_cast<double>(t.bytes_capacity)),
                  WithThousands(static_cast<long long>(t.hits)),
                  WithThousands(static_cast<long long>(t.misses)), Ratio(t.hits, t.misses),
                  HumanBytes(static_cast<double>(t.bytes_read)),
                  HumanBytes(static_cast<double>(t.bytes_written)),
                  WithThousands(static_cast<long long>(t.evictions)),
                  WithThousands(static_cast<long long>(t.expirations)),
                  WithThousands(static_cast<long long>(t.checksum_failures))});
  }
  std::cout << tiers.Render();
  if (!stats->models.empty()) {
    Table models({"fingerprint", "blocks", "swa snapshots", "bytes"}, {false, true, true, true});
    for (const cache::ModelUsageInfo& m : stats->models) {
      models.AddRow({cache::DigestToHex(m.fingerprint),
                     WithThousands(static_cast<long long>(m.blocks)),
                     WithThousands(static_cast<long long>(m.swa_snapshots)),
                     HumanBytes(static_cast<double>(m.bytes))});
    }
    std::cout << "\n" << models.Render();
  }
  return 0;
}

}  // namespace flashserve::flashctl
