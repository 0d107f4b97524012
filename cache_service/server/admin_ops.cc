#include "cache_service/server/admin_ops.h"

#include <cstring>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cache_service/server/swa_envelope.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"

namespace flashserve::cache {
namespace {

constexpr size_t kCursorBytes = 64;

struct PageCursor {
  bool swa = false;   // which listing the cursor is in
  std::string after;  // raw cursor bytes; empty = from the start of that listing
};

absl::StatusOr<PageCursor> ParseToken(std::string_view token, const AdminFilter& filter) {
  PageCursor c;
  if (token.empty()) {
    c.swa = !filter.blocks;
    return c;
  }
  const bool ok_prefix =
      token.size() >= 2 && token[1] == ':' && (token[0] == 'b' || token[0] == 's');
  std::string raw;
  if (ok_prefix) raw = absl::HexStringToBytes(ToAbsl(token.substr(2)));
  if (!ok_prefix || absl::BytesToHexString(raw) != ToAbsl(token.substr(2)) ||
      (!raw.empty() && raw.size() != kCursorBytes)) {
    return absl::InvalidArgumentError("malformed page_token (pass next_page_token unchanged)");
  }
  c.swa = token[0] == 's';
  c.after = std::move(raw);
  return c;
}

std::string Token(bool swa, std::string_view after) {
  return absl::StrCat(swa ? "s:" : "b:", absl::BytesToHexString(ToAbsl(after)));
}

std::string SwaCursor(const SwaEntryInfo& e) {
  std::string c(reinterpret_cast<const char*>(e.fingerprint.data()), 32);
  c.append(reinterpret_cast<const char*>(e.key.bytes.data()), 32);
  return c;
}

bool SwaSelected(const AdminFilter& f) { return f.swa && !(f.pinned.has_value() && *f.pinned); }

std::vector<SwaEntryInfo> SelectedSnapshots(const CacheState& state, const AdminFilter& f) {
  std::vector<SwaEntryInfo> out;
  if (!SwaSelected(f)) return out;
  for (SwaEntryInfo& e : state.swa().Entries()) {
    if (f.fingerprint.has_value() && e.fingerprint != *f.fingerprint) continue;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

absl::StatusOr<AdminPage> ListAdminEntries(CacheState& state, const AdminFilter& filter,
                                           size_t page_size, std::string_view token) {
  ASSIGN_OR_RETURN(PageCursor cursor, ParseToken(token, filter));
  AdminPage page;
  if (!cursor.swa && filter.blocks) {
    EntryScan scan;
    scan.fingerprint = filter.fingerprint;
    scan.pinned = filter.pinned;
    scan.start_after = cursor.after;
    scan.limit = page_size;
    ASSIGN_OR_RETURN(EntryPage blocks, state.store().ListEntries(scan));
    for (StoreEntryInfo& b : blocks.entries) page.entries.push_back({true, std::move(b), {}});
    if (!blocks.resume_after.empty()) {
      page.next_token = Token(false, blocks.resume_after);
      return page;
    }
    if (!SwaSelected(filter)) return page;
    if (page.entries.size() >= page_size) {
      page.next_token = "s:";
      return page;
    }
    cursor = PageCursor{true, ""};
  }
  if (!cursor.swa) return page;
  const std::vector<SwaEntryInfo> snapshots = SelectedSnapshots(state, filter);
  for (const SwaEntryInfo& e : snapshots) {
    if (!cursor.after.empty() && SwaCursor(e) <= cursor.after) continue;
    if (page.entries.size() >= page_size) {
      page.next_token = Token(true, SwaCursor(page.entries.back().swa));
      break;
    }
    page.entries.push_back({false, {}, e});
  }
  return page;
}

std::vector<Sha256Digest> BlockFingerprints(CacheState& state) {
  std::vector<Sha256Digest> out;
  for (const FingerprintUsage& u : state.store().UsageByFingerprint()) out.push_back(u.fingerprint);
  return out;
}

std::optional<StoreEntryInfo> FindBlock(CacheState& state,
                                        std::span<const Sha256Digest> fingerprints,
                                        const BlockKey& key) {
  for (const Sha256Digest& fp : fingerprints) {
    std::vector<std::optional<StoreEntryInfo>> found =
        state.store().Describe(fp, std::span<const BlockKey>(&key, 1));
    if (found[0].has_value()) return found[0];
  }
  return std::nullopt;
}

std::optional<SwaEntryInfo> FindSwa(const CacheState& state, const SwaKey& key) {
  for (const SwaEntryInfo& e : state.swa().Entries()) {
    if (e.key == key) return e;
  }
  return std::nullopt;
}

std::vector<ModelUsage> UsageByModel(CacheState& state) {
  std::map<Sha256Digest, ModelUsage> by_model;
  for (const FingerprintUsage& u : state.store().UsageByFingerprint()) {
    ModelUsage& m = by_model[u.fingerprint];
    m.blocks += u.entries;
    m.bytes += u.bytes;
  }
  for (const SwaEntryInfo& e : state.swa().Entries()) {
    ModelUsage& m = by_model[e.fingerprint];
    ++m.swa_snapshots;
    m.bytes += e.bytes;
  }
  std::vector<ModelUsage> out;
  for (auto& [digest, m] : by_model) {
    m.fingerprint = digest;
    out.push_back(m);
  }
  return out;
}

absl::StatusOr<FlushTotals> FlushAdminEntries(CacheState& state, const AdminFilter& filter,
                                              bool include_pinned, bool dry_run) {
  FlushTotals totals;
  GlobalStore& store = state.store();
  if (filter.blocks) {
    for (const FingerprintUsage& u : store.UsageByFingerprint()) {
      if (filter.fingerprint.has_value() && u.fingerprint != *filter.fingerprint) continue;
      const bool whole = !filter.pinned.has_value() && (include_pinned || u.pinned_entries == 0);
      if (whole) {
        totals.entries += u.entries;
        totals.bytes += u.bytes;
        if (!dry_run) {
          RETURN_IF_ERROR(store.Flush(u.fingerprint).status());
        }
        continue;
      }
      // Some entries stay: walk this fingerprint's entries and delete the selected ones.
      EntryScan scan;
      scan.fingerprint = u.fingerprint;
      scan.pinned = filter.pinned;
      scan.limit = 1000;
      do {
        ASSIGN_OR_RETURN(EntryPage page, store.ListEntries(scan));
        for (const StoreEntryInfo& e : page.entries) {
          if (e.pinned && !include_pinned) continue;
          totals.entries += 1;
          totals.bytes += e.bytes;
          if (dry_run) continue;
          ModelFingerprint fp;
          fp.digest = e.fingerprint;
          absl::Status s = store.Delete(fp, e.key);
          if (!s.ok() && !absl::IsNotFound(s)) return s;
        }
        scan.start_after = page.resume_after;
      } while (!scan.start_after.empty());
    }
  }
  const std::vector<SwaEntryInfo> snapshots = SelectedSnapshots(state, filter);
  std::vector<Sha256Digest> models;
  for (const SwaEntryInfo& e : snapshots) {
    totals.entries += 1;
    totals.bytes += e.bytes;
    if (models.empty() || models.back() != e.fingerprint) models.push_back(e.fingerprint);
  }
  if (!dry_run) {
    for (const Sha256Digest& d : models) state.swa().Flush(d);
  }
  return totals;
}

absl::StatusOr<VerifyTotals> VerifyAdminEntries(CacheState& state, const AdminFilter& filter,
                                                size_t max_entries, std::string_view token,
                                                bool evict_corrupt) {
  ASSIGN_OR_RETURN(PageCursor cursor, ParseToken(token, filter));
  VerifyTotals totals;
  if (cursor.swa || !filter.blocks) return totals;
  EntryScan scan;
  scan.fingerprint = filter.fingerprint;
  scan.start_after = cursor.after;
  scan.limit = max_entries;
  ASSIGN_OR_RETURN(VerifyReport report, state.store().VerifyBlocks(scan, evict_corrupt));
  totals.checked = report.checked;
  totals.evicted = report.dropped;
  totals.corrupt = std::move(report.corrupt);
  if (!report.resume_after.empty()) totals.next_token = Token(false, report.resume_after);
  return totals;
}

}  // namespace flashserve::cache
