// Options of the cache server process (`flashserve cache`), declared on common/options so that
// they come from `--config FILE` and `--cache.key=value` flags. Every field documents its key and
// default; RegisterCacheServerOptions binds them, CheckCacheServerOptions applies the rules that
// involve several fields (the admin-token rule).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/options/byte_size.h"
#include "common/options/option_set.h"

namespace flashserve::cache {

// gRPC and HTTP ports used when an address names no port ("10.0.0.5" means "10.0.0.5:8100").
inline constexpr int kDefaultCachePort = 8100;
inline constexpr int kDefaultCacheHttpPort = 8101;

struct CacheServerOptions {
  // cache.listen: gRPC address (CacheService and AdminService). Port 0 picks a free port (the
  // chosen one is printed on the "cache listening on" line). Default "127.0.0.1:8100".
  std::string listen;
  // cache.http_listen: HTTP address for GET /metrics and GET /health; port 0 picks one.
  // Default "127.0.0.1:8101".
  std::string http_listen;
  // cache.data_dir: the RocksDB directory of the global KV store (created if missing).
  std::string data_dir;
  // cache.capacity: encoded bytes of global KV blocks kept on disk. Default 64GiB.
  options::ByteSize capacity;
  // cache.ttl: global KV block lifetime since last access, for puts that ask for none. Default 72h.
  absl::Duration ttl;
  // cache.max_ttl: the largest ttl_s a PutBlocks may ask for (larger: INVALID_ARGUMENT). Default
  // 720h; at least cache.ttl.
  absl::Duration max_ttl;
  // cache.swa.capacity: SWA snapshot bytes kept in DRAM; 0 = 10% of available memory. Default 0.
  options::ByteSize swa_capacity;
  // cache.swa.ttl: SWA snapshot lifetime since last access, for puts that ask for none. Default 10m.
  absl::Duration swa_ttl;
  // cache.swa.max_ttl: the largest ttl_s a PutSwa may ask for. Default 1h; at least cache.swa.ttl.
  absl::Duration swa_max_ttl;
  // cache.admin_token: bearer token for AdminService. Required when `listen` is not loopback;
  // empty falls back to the environment variable FLASHSERVE_ADMIN_TOKEN. With a token configured,
  // every admin RPC but Health must carry "authorization: Bearer <token>".
  std::string admin_token;
  // cache.max_message_size: largest gRPC message received or sent. Default 64MiB.
  options::ByteSize max_message_size;
  // cache.max_keys_per_request: blocks or keys in one GetBlocks/PutBlocks/Evict/Pin call.
  // Default 1024.
  int64_t max_keys_per_request = 0;
  // cache.max_lookup_tokens: tokens in one Lookup. Default 1048576.
  int64_t max_lookup_tokens = 0;
  // cache.max_payload_size: bytes of one block payload. Default 16MiB.
  options::ByteSize max_payload_size;
  // cache.sync_writes: PutBlocks returns after the WAL is fsync'd. Default true.
  bool sync_writes = true;
  // cache.sweep_interval: period of the background TTL sweep of both tiers. Default 1m.
  absl::Duration sweep_interval;
  // cache.shutdown_grace: on SIGTERM/SIGINT, in-flight RPCs get this long before they are
  // cancelled. Default 10s.
  absl::Duration shutdown_grace;
  // log.level (debug|info|warning|error) and log.json. Defaults "info", false.
  std::string log_level;
  bool log_json = false;

  // Not an option: the clock of TTLs and ages (tests inject a FakeClock). Null: the real clock.
  Clock* clock = nullptr;
};

// Binds every field above to its key and stores the defaults. `o` must outlive `set`'s loads.
void RegisterCacheServerOptions(options::OptionSet* set, CacheServerOptions* o);

// Cross-field rules, run after loading: addresses parse; an admin token is set (directly or from
// FLASHSERVE_ADMIN_TOKEN, which this function copies into `o`) whenever `listen` is not a
// loopback address. Errors: InvalidArgument naming the option.
absl::Status CheckCacheServerOptions(CacheServerOptions* o);

struct HostPort {
  std::string host;  // without brackets for IPv6
  int port = 0;
  // "host:port", bracketing IPv6 hosts.
  std::string ToString() const;
};

// Parses "host:port", "[v6]:port", or a bare host (port = default_port). InvalidArgument for an
// empty host, a bad or out-of-range port.
absl::StatusOr<HostPort> ParseHostPort(std::string_view address, int default_port);

// True for "localhost", 127.0.0.0/8 and ::1: addresses other machines cannot reach.
bool IsLoopbackHost(std::string_view host);

}  // namespace flashserve::cache
