#include "cache_service/global_store/store_index.h"

#include <cstring>

#include "common/base/check.h"

namespace flashserve::cache {

StoreKey MakeStoreKey(const ModelFingerprint& fingerprint, const BlockKey& key) {
  StoreKey k;
  std::memcpy(k.bytes.data(), fingerprint.digest.data(), 32);
  std::memcpy(k.bytes.data() + 32, key.bytes.data(), 32);
  return k;
}

Sha256Digest FingerprintOf(const StoreKey& key) {
  Sha256Digest d;
  std::memcpy(d.data(), key.bytes.data(), 32);
  return d;
}

BlockKey BlockKeyOf(const StoreKey& key) {
  BlockKey b;
  std::memcpy(b.bytes.data(), key.bytes.data() + 32, 32);
  return b;
}

const EntryState* StoreIndex::Find(const StoreKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.state;
}

void StoreIndex::Upsert(const StoreKey& key, EntryState state) {
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (inserted) {
    e.slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back(key);
  } else {
    RemoveUse(e.state);
    bytes_ -= e.state.bytes;
    if (e.state.pinned) {
      pinned_bytes_ -= e.state.bytes;
      --pinned_entries_;
    }
    state.pinned = state.pinned || e.state.pinned;
  }
  e.state = state;
  AddUse(state);
  bytes_ += state.bytes;
  if (state.pinned) {
    pinned_bytes_ += state.bytes;
    ++pinned_entries_;
  }
}

std::optional<EntryState> StoreIndex::Erase(const StoreKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  const EntryState state = it->second.state;
  const uint32_t slot = it->second.slot;
  entries_.erase(it);
  // Swap-remove from the dense array, fixing the moved entry's slot.
  if (slot + 1 != slots_.size()) {
    slots_[slot] = slots_.back();
    auto moved = entries_.find(slots_[slot]);
    CHECK(moved != entries_.end()) << "store index: slot array out of sync";
    moved->second.slot = slot;
  }
  slots_.pop_back();
  RemoveUse(state);
  bytes_ -= state.bytes;
  if (state.pinned) {
    pinned_bytes_ -= state.bytes;
    --pinned_entries_;
  }
  return state;
}

bool StoreIndex::Touch(const StoreKey& key, int64_t now_unix_micros) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  Entry& e = it->second;
  e.state.last_access_unix_micros = now_unix_micros;
  if (!e.touched) {
    e.touched = true;
    touched_.push_back(key);
  }
  return true;
}

bool StoreIndex::SetTtl(const StoreKey& key, uint32_t ttl_s) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  Entry& e = it->second;
  e.state.ttl_s = ttl_s;
  if (!e.touched) {
    e.touched = true;
    touched_.push_back(key);
  }
  return true;
}

bool StoreIndex::SetPinned(const StoreKey& key, bool pinned) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  EntryState& s = it->second.state;
  if (s.pinned == pinned) return true;
  s.pinned = pinned;
  if (pinned) {
    pinned_bytes_ += s.bytes;
    ++pinned_entries_;
  } else {
    pinned_bytes_ -= s.bytes;
    --pinned_entries_;
  }
  return true;
}

bool StoreIndex::Relocate(const StoreKey& key, uint32_t from_segment, uint64_t from_offset,
                          uint32_t segment, uint64_t offset) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  EntryState& s = it->second.state;
  if (s.segment != from_segment || s.offset != from_offset) return false;
  RemoveUse(s);
  s.segment = segment;
  s.offset = offset;
  AddUse(s);
  return true;
}

SegmentUse StoreIndex::SegmentUseOf(uint32_t segment) const {
  auto it = segments_.find(segment);
  return it == segments_.end() ? SegmentUse{} : it->second;
}

void StoreIndex::AddUse(const EntryState& s) {
  if (s.segment == 0) return;
  SegmentUse& u = segments_[s.segment];
  ++u.entries;
  u.bytes += s.bytes;
}

void StoreIndex::RemoveUse(const EntryState& s) {
  if (s.segment == 0) return;
  auto it = segments_.find(s.segment);
  CHECK(it != segments_.end() && it->second.entries > 0) << "store index: segment use underflow";
  --it->second.entries;
  it->second.bytes -= s.bytes;
  if (it->second.entries == 0) segments_.erase(it);
}

std::optional<StoreKey> StoreIndex::SampleLeastRecent(int samples) {
  std::optional<StoreKey> best;
  int64_t best_access = 0;
  auto consider = [&](const StoreKey& key) {
    const EntryState& s = entries_.find(key)->second.state;
    if (s.pinned) return;
    if (!best.has_value() || s.last_access_unix_micros < best_access) {
      best = key;
      best_access = s.last_access_unix_micros;
    }
  };
  if (slots_.size() <= static_cast<size_t>(samples)) {
    for (const StoreKey& key : slots_) consider(key);
  } else {
    std::uniform_int_distribution<size_t> pick(0, slots_.size() - 1);
    for (int i = 0; i < samples; ++i) consider(slots_[pick(rng_)]);
  }
  return best;
}

void StoreIndex::SweepExpired(int64_t now_unix_micros, int64_t default_ttl_us, size_t budget,
                              std::vector<StoreKey>* expired) {
  const size_t n = std::min(budget, slots_.size());
  for (size_t i = 0; i < n; ++i) {
    if (sweep_cursor_ >= slots_.size()) sweep_cursor_ = 0;
    const StoreKey& key = slots_[sweep_cursor_++];
    const EntryState& s = entries_.find(key)->second.state;
    const int64_t ttl_us = s.ttl_s != 0 ? int64_t{s.ttl_s} * 1000000 : default_ttl_us;
    if (!s.pinned && now_unix_micros - s.last_access_unix_micros >= ttl_us) {
      expired->push_back(key);
    }
  }
}

void StoreIndex::KeysOfFingerprint(const Sha256Digest& digest, std::vector<StoreKey>* keys) const {
  for (const StoreKey& key : slots_) {
    if (std::memcmp(key.bytes.data(), digest.data(), 32) == 0) keys->push_back(key);
  }
}

void StoreIndex::TakeTouched(size_t max, std::vector<std::pair<StoreKey, EntryState>>* out) {
  size_t taken = 0;
  while (!touched_.empty() && taken < max) {
    const StoreKey key = touched_.back();
    touched_.pop_back();
    auto it = entries_.find(key);
    if (it == entries_.end() || !it->second.touched) continue;  // stale: erased or re-listed
    it->second.touched = false;
    out->emplace_back(key, it->second.state);
    ++taken;
  }
}

}  // namespace flashserve::cache
