// Shared pieces of the cache integration tests: the binaries' paths, a `flashserve cache`
// process on 127.0.0.1 port 0, an HTTP GET over a raw socket, a Prometheus sample reader, and
// deterministic blocks (tokens, chain keys, payloads). Tests only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cache_service/client/cache_client.h"
#include "tests/integration/child_process.h"

namespace flashserve::testing {

// $FS_BINARY_DIR/bin/<name> (FS_BINARY_DIR is set by fs_cc_test; "build" otherwise).
std::string BinaryPath(std::string_view name);

// A fresh directory under /tmp, removed on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `flashserve cache` with its RocksDB in `data_dir`, gRPC and HTTP on 127.0.0.1 port 0, its log
// appended to <data_dir>.log. Killed on destruction if still running.
class CacheServerProcess {
 public:
  // Starts the server and waits (30 s at most) for its "cache listening on" line.
  static absl::StatusOr<std::unique_ptr<CacheServerProcess>> Start(
      const std::string& data_dir, const std::vector<std::string>& flags = {},
      const std::vector<std::string>& env = {});

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  int http_port() const { return http_port_; }
  const std::string& log_path() const { return log_path_; }
  // The server's log so far (for failure messages).
  std::string Log() const;
  // SIGTERM, then waits (60 s at most) for the exit code.
  absl::StatusOr<int> Stop();

  // A client with a 20 s deadline per call.
  absl::StatusOr<std::unique_ptr<cache::CacheClient>> Client(std::string admin_token = "",
                                                             size_t max_keys_per_call = 64) const;

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string address_;
  int http_port_ = 0;
  std::string log_path_;
};

// GET http://127.0.0.1:port/path over a plain socket (HTTP/1.1, Connection: close). Returns the
// status code and body. 10 s deadline.
struct HttpReply {
  int status = 0;
  std::string headers;
  std::string body;
};
absl::StatusOr<HttpReply> HttpGet(int port, std::string_view path);

// The value of the sample `name{labels}` (labels exactly as exposed, e.g. `tier="ssd"`; empty for
// none) in a Prometheus text body; NotFound if absent.
absl::StatusOr<double> MetricValue(std::string_view body, std::string_view name,
                                   std::string_view labels);

// Deterministic test data.
cache::ModelFingerprint TestFingerprint(std::string_view name);
std::vector<cache::TokenId> TestTokens(size_t n, uint64_t seed);
std::string TestPayload(const cache::BlockKey& key, size_t size);

// Blocks for every full 64-token block of `tokens`, chained, with payloads from TestPayload
// (owned by the returned object).
struct BlockChain {
  std::vector<cache::BlockKey> keys;
  std::vector<std::string> payloads;
  std::vector<cache::BlockToPut> puts;  // views into payloads
};
BlockChain MakeChain(const std::vector<cache::TokenId>& tokens, const cache::ModelFingerprint& fp,
                     std::string_view salt, size_t payload_size);

}  // namespace flashserve::testing
