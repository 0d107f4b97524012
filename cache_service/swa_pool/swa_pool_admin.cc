// SwaPool metadata queries (no bytes copied): Lookup's snapshot probes and the admin API.
#include <algorithm>
#include <cstring>

#include "cache_service/swa_pool/swa_pool.h"

namespace flashserve::cache {

SwaEntryInfo SwaPool::InfoOf(const PoolKey& key, const Entry& e) const {
  SwaEntryInfo info;
  std::memcpy(info.fingerprint.data(), key.data(), 32);
  std::memcpy(info.key.bytes.data(), key.data() + 32, 32);
  info.bytes = e.data->size();
  info.created_unix_micros = e.created_us;
  info.last_access_unix_micros = e.last_access_us;
  info.expires_unix_micros = e.last_access_us + e.ttl_us;
  return info;
}

std::optional<SwaEntryInfo> SwaPool::Describe(const ModelFingerprint& fingerprint,
                                              const SwaKey& key) const {
  const PoolKey k = MakeKey(fingerprint, key);
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(k);
  if (it == entries_.end() || Expired(it->second, NowMicros())) return std::nullopt;
  return InfoOf(k, it->second);
}

std::vector<SwaEntryInfo> SwaPool::Entries() const {
  std::vector<SwaEntryInfo> out;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now_us = NowMicros();
    out.reserve(entries_.size());
    for (const auto& [k, e] : entries_) {
      if (!Expired(e, now_us)) out.push_back(InfoOf(k, e));
    }
  }
  std::sort(out.begin(), out.end(), [](const SwaEntryInfo& a, const SwaEntryInfo& b) {
    return a.fingerprint != b.fingerprint ? a.fingerprint < b.fingerprint : a.key < b.key;
  });
  return out;
}

}  // namespace flashserve::cache
