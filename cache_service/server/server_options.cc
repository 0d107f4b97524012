#include "cache_service/server/server_options.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "common/options/validators.h"

namespace flashserve::cache {

using options::AtLeast;
using options::ByteSize;
using options::NonEmpty;

void RegisterCacheServerOptions(options::OptionSet* set, CacheServerOptions* o) {
  set->Add("cache.listen", &o->listen, "127.0.0.1:8100",
           "gRPC address (CacheService + AdminService); port 0 picks a free port.", NonEmpty());
  set->Add("cache.http_listen", &o->http_listen, "127.0.0.1:8101",
           "HTTP address for GET /metrics and GET /health; port 0 picks a free port.", NonEmpty());
  set->Add("cache.data_dir", &o->data_dir, "flashserve-cache",
           "RocksDB directory of the global KV store (created if missing).", NonEmpty());
  set->Add("cache.capacity", &o->capacity, ByteSize::GiB(64),
           "Global KV bytes kept on disk (encoded values).", AtLeast(ByteSize{1}));
  set->Add("cache.ttl", &o->ttl, absl::Hours(72),
           "Global KV block lifetime since last access, for puts that ask for none (ttl_s 0).",
           AtLeast(absl::Seconds(1)));
  set->Add("cache.max_ttl", &o->max_ttl, absl::Hours(720),
           "Largest ttl_s a PutBlocks may ask for (larger: INVALID_ARGUMENT); >= cache.ttl.",
           AtLeast(absl::Seconds(1)));
  set->Add("cache.swa.capacity", &o->swa_capacity, ByteSize{0},
           "SWA snapshot bytes kept in DRAM; 0 = 10% of the memory available to the process.");
  set->Add("cache.swa.ttl", &o->swa_ttl, absl::Minutes(10),
           "SWA snapshot lifetime since last access, for puts that ask for none (ttl_s 0).",
           AtLeast(absl::Seconds(1)));
  set->Add("cache.swa.max_ttl", &o->swa_max_ttl, absl::Hours(1),
           "Largest ttl_s a PutSwa may ask for (larger: INVALID_ARGUMENT); >= cache.swa.ttl.",
           AtLeast(absl::Seconds(1)));
  set->Add("cache.admin_token", &o->admin_token, "",
           "AdminService bearer token; required unless cache.listen is loopback. Empty: "
           "$FLASHSERVE_ADMIN_TOKEN.");
  set->Add("cache.max_message_size", &o->max_message_size, ByteSize::MiB(64),
           "Largest gRPC message received or sent.", AtLeast(ByteSize::KiB(64)));
  set->Add("cache.max_keys_per_request", &o->max_keys_per_request, 1024,
           "Blocks or keys in one GetBlocks/PutBlocks/Evict/Pin call.", AtLeast<int64_t>(1));
  set->Add("cache.max_lookup_tokens", &o->max_lookup_tokens, int64_t{1} << 20,
           "Tokens in one Lookup.", AtLeast<int64_t>(64));
  set->Add("cache.max_payload_size", &o->max_payload_size, ByteSize::MiB(16),
           "Bytes of one block payload.", AtLeast(ByteSize{1}));
  set->Add("cache.sync_writes", &o->sync_writes, true,
           "PutBlocks returns after the write-ahead log is fsync'd.");
  set->Add("cache.sweep_interval", &o->sweep_interval, absl::Minutes(1),
           "Period of the background TTL sweep.", AtLeast(absl::Milliseconds(10)));
  set->Add("cache.shutdown_grace", &o->shutdown_grace, absl::Seconds(10),
           "Time in-flight RPCs get after SIGTERM/SIGINT before they are cancelled.");
  set->Add("log.level", &o->log_level, "info", "debug, info, warning or error.",
           options::OneOf({"debug", "info", "warning", "warn", "error"}));
  set->Add("log.json", &o->log_json, false, "One JSON object per log line.");
}

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(std::string_view address, int default_port) {
  HostPort hp;
  std::string_view port_text;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("address '", ToAbsl(address), "': no ']'"));
    }
    hp.host = std::string(address.substr(1, close - 1));
    std::string_view rest = address.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return absl::InvalidArgumentError(absl::StrCat("address '", ToAbsl(address), "'"));
      }
      port_text = rest.substr(1);
    }
  } else {
    const size_t colon = address.rfind(':');
    const bool one_colon = colon != std::string_view::npos && address.find(':') == colon;
    hp.host = std::string(one_colon ? address.substr(0, colon) : address);
    if (one_colon) port_text = address.substr(colon + 1);
  }
  if (hp.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("address '", ToAbsl(address), "' has no host"));
  }
  hp.port = default_port;
  if (!port_text.empty() || (address.size() > 0 && address.back() == ':')) {
    int port = -1;
    if (!absl::SimpleAtoi(ToAbsl(port_text), &port) || port < 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", ToAbsl(address), "': port must be 0-65535"));
    }
    hp.port = port;
  }
  return hp;
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

absl::Status CheckCacheServerOptions(CacheServerOptions* o) {
  ASSIGN_OR_RETURN(HostPort grpc, ParseHostPort(o->listen, kDefaultCachePort),
                   "option cache.listen");
  RETURN_IF_ERROR(ParseHostPort(o->http_listen, kDefaultCacheHttpPort).status())
      << "option cache.http_listen";
  if (o->admin_token.empty()) {
    const char* env = std::getenv("FLASHSERVE_ADMIN_TOKEN");
    if (env != nullptr) o->admin_token = env;
  }
  if (!IsLoopbackHost(grpc.host) && o->admin_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache.listen=", o->listen,
        " is not a loopback address: set cache.admin_token (or FLASHSERVE_ADMIN_TOKEN) so that "
        "the admin API is not open to the network"));
  }
  if (o->max_payload_size.bytes + (uint64_t{1} << 16) > o->max_message_size.bytes) {
    return absl::InvalidArgumentError(
        "cache.max_payload_size must be at least 64KiB below cache.max_message_size");
  }
  if (o->max_ttl < o->ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.max_ttl=", absl::FormatDuration(o->max_ttl), " is below cache.ttl=",
                     absl::FormatDuration(o->ttl)));
  }
  if (o->max_ttl > absl::Seconds(std::numeric_limits<uint32_t>::max())) {
    return absl::InvalidArgumentError("cache.max_ttl must be below 2^32 seconds");
  }
  if (o->swa_max_ttl < o->swa_ttl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache.swa.max_ttl=", absl::FormatDuration(o->swa_max_ttl), " is below cache.swa.ttl=",
        absl::FormatDuration(o->swa_ttl)));
  }
  return absl::OkStatus();
}

}  // namespace flashserve::cache
