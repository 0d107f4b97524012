// flashctl's cache commands (`flashctl cache stats|ls|inspect|lookup|evict|pin|unpin|flush|
// verify`), one file per command (cache_<verb>.cc), each a plain function over an options struct
// as in commands.h. They talk to a cache server through cache_service/client (no wire types
// here), print readable tables by default and one JSON document with --json, and return the exit
// code: 0 ok, 1 failure (one line on stderr), 2 usage (a malformed key, fingerprint or token
// list), 3 for `verify` when it found corrupt entries.
// Link: fs_cache_client, fs_cache_keys, fs_model_tokenizer (lookup --text), nlohmann_json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flashserve::flashctl {

// Options every cache command takes.
struct CacheConnectionOptions {
  std::string address = "127.0.0.1:8100";  // --address HOST:PORT of the cache server (gRPC)
  std::string token;      // --token: admin token; empty = $FLASHSERVE_ADMIN_TOKEN, if set
  double timeout_s = 30;  // --timeout: deadline of each call, seconds
  bool json = false;      // --json: one JSON document instead of tables
};

// `flashctl cache stats`: per tier (host = SWA pool in DRAM, ssd = global KV store) entries,
// bytes, capacity, hits, misses, bytes read/written, evictions, expirations, checksum failures;
// usage per model fingerprint; lookup totals.
struct CacheStatsOptions {
  CacheConnectionOptions conn;
};
int RunCacheStats(const CacheStatsOptions& options);

// `flashctl cache ls`: entries in key order (blocks, then snapshots), one page or all.
struct CacheLsOptions {
  CacheConnectionOptions conn;
  std::string kind = "all";    // --kind block|swa|all
  std::string fingerprint;     // --fingerprint HEX (64 hex digits): one model only
  std::string pinned = "any";  // --pinned yes|no|any
  uint32_t limit = 100;        // --limit: entries per page (server caps at 1000)
  std::string page_token;      // --page-token: continue a listing
  bool all = false;            // --all: follow every page
};
int RunCacheLs(const CacheLsOptions& options);

// `flashctl cache inspect KEY`: one entry's metadata and value header; --verify checks the value.
struct CacheInspectOptions {
  CacheConnectionOptions conn;
  std::string key;             // positional: 64 hex digits
  std::string kind = "block";  // --kind block|swa
  bool verify = false;         // --verify: read the whole value and check its checksum
};
int RunCacheInspect(const CacheInspectOptions& options);

// `flashctl cache lookup`: what the cache holds for a prompt, block by block: residency, age, TTL
// left, size, the tier that would serve it, and whether an SWA snapshot exists for the prefix end
// (otherwise the session would resume through bounded replay). Does not refresh recency.
struct CacheLookupOptions {
  CacheConnectionOptions conn;
  std::string tokens;       // --tokens "1,2,3" (or spaces, or [..]); or:
  std::string text;         // --text TEXT, encoded with
  std::string tokenizer;    // --tokenizer PATH (tokenizer.json or its directory)
  std::string fingerprint;  // --fingerprint HEX (64 hex digits), required
  std::string salt;         // --salt: tenant salt (bytes as given)
};
int RunCacheLookup(const CacheLookupOptions& options);

// `flashctl cache evict KEY...`: removes entries now; pinned blocks only with --force.
struct CacheEvictOptions {
  CacheConnectionOptions conn;
  std::vector<std::string> keys;  // positional: 64 hex digits each
  std::string kind = "block";     // --kind block|swa
  bool force = false;             // --force: evict pinned blocks too
};
int RunCacheEvict(const CacheEvictOptions& options);

// `flashctl cache pin KEY...` / `flashctl cache unpin KEY...` (global KV blocks only).
struct CachePinOptions {
  CacheConnectionOptions conn;
  std::vector<std::string> keys;  // positional: 64 hex digits each
};
int RunCachePin(const CachePinOptions& options);
int RunCacheUnpin(const CachePinOptions& options);

// `flashctl cache flush (--fingerprint HEX | --all)`: removes every matching entry.
struct CacheFlushOptions {
  CacheConnectionOptions conn;
  std::string fingerprint;      // --fingerprint HEX: one model
  bool all = false;             // --all: every model (one of the two is required)
  std::string kind = "all";     // --kind block|swa|all
  bool include_pinned = false;  // --include-pinned
  bool dry_run = false;         // --dry-run: count only
};
int RunCacheFlush(const CacheFlushOptions& options);

// `flashctl cache verify`: reads every global KV block (or --budget of them) page by page and
// checks its checksums; lists the corrupt keys. Exit 3 when any block is corrupt.
struct CacheVerifyOptions {
  CacheConnectionOptions conn;
  std::string fingerprint;     // --fingerprint HEX: one model only
  uint64_t budget = 0;         // --budget N: check at most N blocks; 0 = all
  uint32_t page = 1000;        // --page N: blocks per call
  bool evict_corrupt = false;  // --evict: remove corrupt blocks
};
int RunCacheVerify(const CacheVerifyOptions& options);

}  // namespace flashserve::flashctl
