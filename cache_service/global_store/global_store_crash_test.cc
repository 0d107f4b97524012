// Crash test in RocksDB's style. The test re-executes its own binary as a writer process that
// loops batched puts of random sizes and, after each acknowledged batch, appends the batch's ids
// to an expected-state file (fsync'd) and signals the parent through a pipe. The parent SIGKILLs
// the writer at a random moment, reopens the store and checks every id:
//   - acknowledged  -> present with exactly the bytes that were put;
//   - otherwise     -> absent, or exactly the bytes that were put (durable but not yet acked);
//   - a batch is all present or all absent (one WriteBatch);
//   - no checksum failure.
// Values are derived from (seed, id) with a PRNG, so the parent knows what each id must hold.
// kill -9 tests process-crash atomicity; a machine crash (the unsynced metadata tail lost) is
// covered by global_store_replay_test.cc. Values go to the value log (the default): a kill between
// the segment's fdatasync and the metadata write leaves values without metadata, which the open
// re-indexes whole (the batch is then present though never acknowledged), never a record naming
// missing bytes (no checksum failure and no entry dropped at open).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "cache_service/global_store/global_store.h"
#include "cache_service/global_store/test_util.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

using testing::KeyFor;
using testing::PayloadFor;

constexpr uint64_t kSeed = 0xC0FFEE;
const ModelFingerprint& Fp() {
  static const ModelFingerprint fp = testing::TestFingerprint("crash");
  return fp;
}
uint64_t Mix(uint64_t i) {
  uint64_t x = (i + kSeed) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ull;
}
// Value size of id i: 1 B .. 120 KB, some at the full-model block size.
size_t SizeFor(uint64_t i) { return Mix(i) % 4 == 0 ? 56960 : 1 + Mix(i) % 120000; }
// Batches start at a round's first id and have 1..4 ids.
uint64_t BatchSizeAt(uint64_t i) { return 1 + (Mix(i) >> 8) % 4; }

GlobalStoreOptions StoreOptions(const std::string& path) {
  GlobalStoreOptions o;
  o.path = path;
  o.capacity_bytes = uint64_t{1} << 40;  // no capacity eviction: acked ids must all survive
  o.sync_writes = true;
  // Small value-log segments: kills also land around segment rollover (new file, header and
  // directory sync) and every reopen seals the active segment.
  o.value_log_segment_bytes = 1 << 20;
  return o;
}

// The writer process: never returns normally (it is killed).
int RunWriter(const std::string& db, const std::string& expected, uint64_t start, int ack_fd) {
  auto store = GlobalStore::Open(StoreOptions(db));
  if (!store.ok()) {
    fprintf(stderr, "writer: %s\n", store.status().ToString().c_str());
    return 2;
  }
  const int exp_fd = open(expected.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (exp_fd < 0) return 3;
  for (uint64_t i = start;;) {
    const uint64_t n = BatchSizeAt(i);
    std::vector<std::string> payloads;
    std::vector<BlockWrite> batch;
    for (uint64_t j = i; j < i + n; ++j) payloads.push_back(PayloadFor(kSeed, j, SizeFor(j)));
    for (uint64_t j = 0; j < n; ++j) batch.push_back({KeyFor(i + j), payloads[j]});
    absl::Status s = (*store)->PutBatch(Fp(), batch);
    if (!s.ok()) {
      fprintf(stderr, "writer: put: %s\n", s.ToString().c_str());
      return 4;
    }
    // Acknowledged: record every id, durably, before telling the parent.
    std::string rec;
    for (uint64_t j = i; j < i + n; ++j) rec.append(reinterpret_cast<const char*>(&j), 8);
    if (write(exp_fd, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size())) return 5;
    if (fsync(exp_fd) != 0) return 6;
    const char one = 1;
    if (write(ack_fd, &one, 1) != 1) return 7;
    i += n;
  }
}

std::set<uint64_t> ReadExpected(const std::string& path) {
  std::set<uint64_t> ids;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return ids;
  uint64_t id;
  while (fread(&id, 8, 1, f) == 1) ids.insert(id);  // a torn last record is ignored
  fclose(f);
  return ids;
}

TEST(GlobalStoreCrashTest, KillDuringPutsLosesNothingAcknowledgedAndServesNothingWrong) {
  testing::TempDir dir;
  const std::string db = dir.Sub("db");
  const std::string expected = dir.Sub("expected_state");
  std::mt19937_64 rng(kSeed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(25);
  uint64_t next = 0;
  int rounds = 0;
  for (; rounds < 8 && std::chrono::steady_clock::now() < deadline; ++rounds) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const uint64_t start = next;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // only exec after fork: the parent has RocksDB threads
      close(fds[0]);
      const std::string s = std::to_string(start), fd = std::to_string(fds[1]);
      execl("/proc/self/exe", "cache_crash_test", "--crash-writer", db.c_str(), expected.c_str(),
            s.c_str(), fd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    // Kill after a random number of acknowledged batches, plus a random delay so that the kill
    // lands anywhere inside a put (the delay randomises the moment; nothing waits on it).
    const int acks = 3 + static_cast<int>(rng() % 25);
    int got = 0;
    char c;
    while (got < acks && read(fds[0], &c, 1) == 1) ++got;
    ASSERT_EQ(got, acks) << "writer exited early";
    usleep(static_cast<useconds_t>(rng() % 20000));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    close(fds[0]);

    const std::set<uint64_t> acked = ReadExpected(expected);
    ASSERT_FALSE(acked.empty());
    const uint64_t last_acked = *acked.rbegin();
    metrics::Registry registry;
    auto metrics = CacheMetrics::Create(&registry);
    ASSERT_TRUE(metrics.ok());
    GlobalStoreOptions o = StoreOptions(db);
    o.metrics = metrics->get();
    auto store = GlobalStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    // Ids up to the end of the batch after the last acknowledged one (the one that may have
    // been in flight), then a margin that must be absent.
    uint64_t end = last_acked + 1;
    end += BatchSizeAt(end) + 8;
    size_t present = 0;
    for (uint64_t b = 0; b < end;) {
      // Batches: ids below this round's start were checked already but still must hold.
      const uint64_t n = b < start ? 1 : BatchSizeAt(b);
      int batch_present = 0;
      for (uint64_t j = b; j < b + n; ++j) {
        absl::StatusOr<std::string> v = (*store)->Get(Fp(), KeyFor(j));
        if (v.ok()) {
          ++batch_present;
          ++present;
          ASSERT_TRUE(*v == PayloadFor(kSeed, j, SizeFor(j))) << "wrong bytes for id " << j;
        } else {
          ASSERT_TRUE(absl::IsNotFound(v.status())) << v.status();
          ASSERT_EQ(acked.count(j), 0u) << "acknowledged id " << j << " lost in round " << rounds;
        }
      }
      if (b >= start) {
        EXPECT_TRUE(batch_present == 0 || batch_present == static_cast<int>(n))
            << "torn batch at " << b << ": " << batch_present << " of " << n;
      }
      b += n;
    }
    EXPECT_GE(present, acked.size());
    printf(
        "round %d: ids [%llu, %llu): %zu acknowledged in all, %zu present, killed after %d acks\n",
        rounds, static_cast<unsigned long long>(start), static_cast<unsigned long long>(end),
        acked.size(), present, acks);
    EXPECT_EQ(metrics->get()->ForTier("ssd").checksum_failures->Value(), 0);
    ASSERT_TRUE((*store)->Close().ok());
    next = end;  // fresh ids each round: previous rounds' ids are re-checked, never rewritten
  }
  EXPECT_GE(rounds, 3) << "too few rounds within the time bound";
}

}  // namespace
}  // namespace flashserve::cache

// A main of our own so that the test binary doubles as the writer process.
int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--crash-writer") {
    uint64_t start = 0;
    int ack_fd = -1;
    if (!absl::SimpleAtoi(argv[4], &start) || !absl::SimpleAtoi(argv[5], &ack_fd)) return 2;
    return flashserve::cache::RunWriter(argv[2], argv[3], start, ack_fd);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
