// flashctl cache pin KEY... [--json] / flashctl cache unpin KEY... [--json]
#include <iostream>

#include "tools/flashctl/commands/cache_common.h"

namespace flashserve::flashctl {
namespace {

int RunPinOrUnpin(const CachePinOptions& options, bool pin) {
  const char* command = pin ? "pin" : "unpin";
  absl::StatusOr<std::vector<cache::EntryRef>> refs = ParseEntryRefs(options.keys, "block");
  if (!refs.ok()) return Fail(command, refs.status(), true);
  auto client = ConnectCache(options.conn);
  if (!client.ok()) return Fail(command, client.status(), true);
  absl::StatusOr<cache::PinCounts> r = pin ? (*client)->Pin(*refs) : (*client)->Unpin(*refs);
  if (!r.ok()) return Fail(command, r.status());
  if (options.conn.json) {
    std::cout << nlohmann::ordered_json{{"changed", r->changed}, {"not_found", r->not_found}}.dump(
                     2)
              << "\n";
    return 0;
  }
  std::cout << (pin ? "pinned " : "unpinned ") << r->changed << " (already "
            << (pin ? "pinned " : "unpinned ") << refs->size() - r->changed - r->not_found
            << "), not found " << r->not_found << "\n";
  return 0;
}

}  // namespace

int RunCachePin(const CachePinOptions& options) { return RunPinOrUnpin(options, true); }
int RunCacheUnpin(const CachePinOptions& options) { return RunPinOrUnpin(options, false); }

}  // namespace flashserve::flashctl
