#include "tests/integration/cache_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace flashserve::testing {

std::string BinaryPath(std::string_view name) {
  const char* dir = std::getenv("FS_BINARY_DIR");
  return absl::StrCat(dir != nullptr ? dir : "build", "/bin/", std::string(name));
}

ScratchDir::ScratchDir() {
  std::string tmpl = "/tmp/fs_cache_it_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) std::abort();
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<std::unique_ptr<CacheServerProcess>> CacheServerProcess::Start(
    const std::string& data_dir, const std::vector<std::string>& flags,
    const std::vector<std::string>& env) {
  std::unique_ptr<CacheServerProcess> s(new CacheServerProcess());
  s->log_path_ = data_dir + ".log";
  std::vector<std::string> argv = {
      BinaryPath("flashserve"),       "cache",
      "--cache.listen=127.0.0.1:0",   "--cache.http_listen=127.0.0.1:0",
      "--cache.data_dir=" + data_dir, "--cache.swa.capacity=256MiB",
      "--cache.shutdown_grace=5s"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto child = ChildProcess::Spawn(argv, env, s->log_path_);
  if (!child.ok()) return child.status();
  s->process_ = std::move(child).value();
  absl::StatusOr<std::string> line =
      s->process_->WaitForLine("cache listening on ", absl::Seconds(30));
  if (!line.ok()) {
    return absl::Status(line.status().code(),
                        absl::StrCat(line.status().message(), "\nserver log:\n", s->Log()));
  }
  // "cache listening on 127.0.0.1:PORT http 127.0.0.1:HPORT"
  std::istringstream in(*line);
  std::string w1, w2, w3, grpc, w4, http;
  in >> w1 >> w2 >> w3 >> grpc >> w4 >> http;
  s->address_ = grpc;
  const std::string http_port = http.substr(http.rfind(':') + 1);
  if (w4 != "http" || !absl::SimpleAtoi(http_port, &s->http_port_)) {
    return absl::InternalError(absl::StrCat("unexpected listening line: ", *line));
  }
  return s;
}

std::string CacheServerProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<int> CacheServerProcess::Stop() {
  process_->Signal(SIGTERM);
  return process_->Wait(absl::Seconds(60));
}

absl::StatusOr<std::unique_ptr<cache::CacheClient>> CacheServerProcess::Client(
    std::string admin_token, size_t max_keys_per_call) const {
  cache::CacheClientOptions o;
  o.address = address_;
  o.admin_token = std::move(admin_token);
  o.timeout = absl::Seconds(20);
  o.max_keys_per_call = max_keys_per_call;
  return cache::CacheClient::Connect(std::move(o));
}

absl::StatusOr<HttpReply> HttpGet(int port, std::string_view path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port, " failed"));
  }
  const std::string request = absl::StrCat(
      "GET ", std::string(path), " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string raw;
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  HttpReply reply;
  if (end == std::string::npos || raw.compare(0, 9, "HTTP/1.1 ") != 0 ||
      !absl::SimpleAtoi(raw.substr(9, 3), &reply.status)) {
    return absl::DataLossError(absl::StrCat("malformed HTTP reply: ", raw.substr(0, 200)));
  }
  reply.headers = raw.substr(0, end);
  reply.body = raw.substr(end + 4);
  return reply;
}

absl::StatusOr<double> MetricValue(std::string_view body, std::string_view name,
                                   std::string_view labels) {
  const std::string series = labels.empty()
                                 ? absl::StrCat(std::string(name), " ")
                                 : absl::StrCat(std::string(name), "{", std::string(labels), "} ");
  std::istringstream in{std::string(body)};
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, series.size(), series) != 0) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(series.size()), &v)) return v;
  }
  return absl::NotFoundError(absl::StrCat("no sample ", series));
}

cache::ModelFingerprint TestFingerprint(std::string_view name) {
  const std::string n(name);
  return cache::ComputeModelFingerprint(
      cache::ModelIdentity{"config:" + n, "weights:" + n, "tokenizer:" + n, 1});
}

std::vector<cache::TokenId> TestTokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<cache::TokenId> t(n);
  for (cache::TokenId& x : t) x = static_cast<cache::TokenId>(rng() % 129280);
  return t;
}

std::string TestPayload(const cache::BlockKey& key, size_t size) {
  std::mt19937_64 rng(key.bytes[0] | uint64_t{key.bytes[1]} << 8 | uint64_t{key.bytes[2]} << 16 |
                      uint64_t{key.bytes[3]} << 24);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

BlockChain MakeChain(const std::vector<cache::TokenId>& tokens, const cache::ModelFingerprint& fp,
                     std::string_view salt, size_t payload_size) {
  BlockChain chain;
  chain.keys = cache::ChainKeys(tokens, fp, salt);
  chain.payloads.reserve(chain.keys.size());
  for (const cache::BlockKey& k : chain.keys)
    chain.payloads.push_back(TestPayload(k, payload_size));
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    cache::BlockToPut p;
    p.key = chain.keys[i];
    p.parent = i == 0 ? cache::BlockKey::Root() : chain.keys[i - 1];
    p.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i * cache::kBlockTokens),
                    tokens.begin() + static_cast<std::ptrdiff_t>((i + 1) * cache::kBlockTokens));
    p.payload = chain.payloads[i];
    chain.puts.push_back(std::move(p));
  }
  return chain;
}

}  // namespace flashserve::testing
