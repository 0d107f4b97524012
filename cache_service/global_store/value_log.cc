#include "cache_service/global_store/value_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/check.h"
#include "common/base/endian.h"
#include "common/base/hash.h"
#include "common/base/logging.h"

namespace flashserve::cache {
namespace {

// Segment header (the first 4 KiB of a segment; docs/kv_layout.md, "Global KV value log").
constexpr char kSegmentMagic[] = "FSVLSEG\n";  // 8 bytes
constexpr uint16_t kSegmentVersion = 1;
constexpr size_t kMaxIov = 512;  // iovecs per pwritev (IOV_MAX is 1024 on Linux)

std::string SegmentPath(const std::string& dir, uint32_t id) {
  char name[32];
  snprintf(name, sizeof(name), "/%08x.vseg", id);
  return dir + name;
}

absl::Status Errno(const char* what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("value log: ", what, " ", path, ": ", strerror(errno)));
}

uint64_t HeaderCheck(const char* p) { return Xxh3_64(p, 24); }

// Writes every iovec, in order, from `offset` (pwritev may return short counts).
bool PwriteAll(int fd, const iovec* iov, int n, uint64_t offset) {
  std::vector<iovec> rest(iov, iov + n);
  size_t first = 0;
  while (first < rest.size()) {
    const int cnt = static_cast<int>(std::min(rest.size() - first, kMaxIov));
    const ssize_t w = pwritev(fd, rest.data() + first, cnt, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    offset += static_cast<uint64_t>(w);
    size_t left = static_cast<size_t>(w);
    while (left > 0 && first < rest.size()) {
      if (left >= rest[first].iov_len) {
        left -= rest[first].iov_len;
        ++first;
      } else {
        rest[first].iov_base = static_cast<char*>(rest[first].iov_base) + left;
        rest[first].iov_len -= left;
        left = 0;
      }
    }
  }
  return true;
}

}  // namespace

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  void* p = nullptr;
  CHECK(posix_memalign(&p, kValueLogAlign, std::max<size_t>(bytes, 1)) == 0) << "out of memory";
  data_ = static_cast<char*>(p);
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    free(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { free(data_); }

struct ValueLog::Segment {
  uint32_t id = 0;
  std::string path;
  int read_fd = -1;
  int write_fd = -1;  // the active segment only
  uint64_t size = 0;  // bytes written or reserved by a commit in progress (under ValueLog::mu_)
  int holds = 0;      // appends returned and not yet released (under ValueLog::mu_)
  int unsynced = 0;   // written groups waiting for their sync (under ValueLog::mu_)
  // An fdatasync failed: later syncs of this file prove nothing (Linux may clear the error), so
  // every group still waiting on it fails too (under ValueLog::mu_).
  bool sync_failed = false;
  bool direct_reads = false;
  ~Segment() {
    if (read_fd >= 0) close(read_fd);
    if (write_fd >= 0) close(write_fd);
  }
};

struct ValueLog::PendingAppend {
  const char* data = nullptr;
  size_t size = 0;
  absl::StatusOr<ValueLocation> result = absl::InternalError("value log: append not run");
  bool done = false;
};

struct ValueLog::WrittenGroup {
  std::vector<PendingAppend*> appends;  // results hold their locations, not yet done
  std::shared_ptr<Segment> segment;
};

ValueLog::ValueLog(ValueLogOptions options)
    : options_(std::move(options)), next_id_(std::max<uint32_t>(1, options_.min_segment_id)) {}

ValueLog::~ValueLog() {
  if (dir_fd_ >= 0) close(dir_fd_);
}

absl::StatusOr<std::unique_ptr<ValueLog>> ValueLog::Open(ValueLogOptions options) {
  if (mkdir(options.dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno("creating", options.dir);
  }
  std::unique_ptr<ValueLog> log(new ValueLog(std::move(options)));
  const std::string& dir = log->options_.dir;
  log->dir_fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (log->dir_fd_ < 0) return Errno("opening", dir);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Errno("listing", dir);
  while (dirent* e = readdir(d)) {
    unsigned id = 0;
    char tail = 0;
    if (sscanf(e->d_name, "%8x.vse%c", &id, &tail) != 2 || tail != 'g' || id == 0 ||
        std::string(e->d_name) != SegmentPath("", id).substr(1)) {
      continue;
    }
    auto seg = std::make_shared<Segment>();
    seg->id = id;
    seg->path = SegmentPath(dir, id);
    seg->direct_reads = log->options_.direct_reads;
    seg->read_fd = open(seg->path.c_str(), O_RDONLY | (seg->direct_reads ? O_DIRECT : 0));
    if (seg->read_fd < 0 && seg->direct_reads) {
      seg->direct_reads = false;
      seg->read_fd = open(seg->path.c_str(), O_RDONLY);
    }
    if (seg->read_fd < 0) {
      closedir(d);
      return Errno("opening", seg->path);
    }
    struct stat st {};
    fstat(seg->read_fd, &st);
    seg->size = static_cast<uint64_t>(st.st_size);
    char header[32] = {};
    // Read the header with a buffered descriptor (O_DIRECT needs an aligned buffer).
    const int hfd = open(seg->path.c_str(), O_RDONLY);
    const bool readable = hfd >= 0 && pread(hfd, header, sizeof(header), 0) == sizeof(header);
    if (hfd >= 0) close(hfd);
    if (!readable || std::memcmp(header, kSegmentMagic, 8) != 0 ||
        GetLittleEndian(header + 8, 2) != kSegmentVersion ||
        GetLittleEndian(header + 12, 4) != id ||
        GetLittleEndian(header + 24, 8) != HeaderCheck(header)) {
      // Usually a segment whose creation was interrupted before its header was synced (no
      // location in it was ever handed out). Its id stays taken: a new segment must not collide
      // with the file.
      LOG(ERROR) << "value log: segment " << seg->path << " has a bad header; ignored";
      log->next_id_ = std::max(log->next_id_, id + 1);
      continue;
    }
    log->next_id_ = std::max(log->next_id_, id + 1);
    log->segments_[id] = std::move(seg);
  }
  closedir(d);
  return log;
}

absl::Status ValueLog::CreateSegmentLocked(uint32_t id) {
  auto seg = std::make_shared<Segment>();
  seg->id = id;
  seg->path = SegmentPath(options_.dir, id);
  seg->write_fd = open(seg->path.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | (options_.direct_writes ? O_DIRECT : 0), 0644);
  if (seg->write_fd < 0 && options_.direct_writes && errno == EINVAL) {  // e.g. tmpfs
    seg->write_fd = open(seg->path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  }
  if (seg->write_fd < 0) return Errno("creating", seg->path);
  seg->direct_reads = options_.direct_reads;
  seg->read_fd = open(seg->path.c_str(), O_RDONLY | (seg->direct_reads ? O_DIRECT : 0));
  if (seg->read_fd < 0 && seg->direct_reads) {
    seg->direct_reads = false;
    seg->read_fd = open(seg->path.c_str(), O_RDONLY);
  }
  if (seg->read_fd < 0) return Errno("opening", seg->path);
  AlignedBuffer header(kSegmentHeaderBytes);
  std::memset(header.data(), 0, header.size());
  std::memcpy(header.data(), kSegmentMagic, 8);
  PutLittleEndian(kSegmentVersion, 2, header.data() + 8);
  PutLittleEndian(id, 4, header.data() + 12);
  PutLittleEndian(static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())), 8, header.data() + 16);
  PutLittleEndian(HeaderCheck(header.data()), 8, header.data() + 24);
  const iovec iov{header.data(), header.size()};
  // The header and the directory entry are durable before any location in the segment is
  // handed out: no metadata record (durable or replayed) names a segment that a crash could lose.
  if (!PwriteAll(seg->write_fd, &iov, 1, 0) || fdatasync(seg->write_fd) != 0) {
    return Errno("writing the header of", seg->path);
  }
  if (fsync(dir_fd_) != 0) return Errno("syncing", options_.dir);
  seg->size = kSegmentHeaderBytes;
  std::shared_ptr<Segment> previous = std::move(active_);
  segments_[id] = seg;
  active_ = std::move(seg);
  if (previous != nullptr) MaybeCloseWriterLocked(*previous);
  return absl::OkStatus();
}

void ValueLog::MaybeCloseWriterLocked(Segment& seg) {
  if (active_.get() != &seg && seg.unsynced == 0 && seg.write_fd >= 0) {
    close(seg.write_fd);
    seg.write_fd = -1;
  }
}

absl::StatusOr<ValueLocation> ValueLog::Append(const char* data, size_t len) {
  CHECK(len % kValueLogAlign == 0 && reinterpret_cast<uintptr_t>(data) % kValueLogAlign == 0)
      << "value log: unaligned append";
  std::unique_lock<std::mutex> lock(mu_);
  PendingAppend p;
  p.data = data;
  p.size = len;
  queue_.push_back(&p);
  // Every caller with an unfinished append helps: it writes the queue when no one writes, syncs
  // the written groups when no one syncs, and otherwise waits for either to finish.
  while (!p.done) {
    if (!writing_ && !queue_.empty()) {
      WriteQueued(lock);
    } else if (!syncing_ && !written_.empty()) {
      SyncWritten(lock);
    } else {
      committed_.wait(lock);
    }
  }
  return std::move(p.result);
}

void ValueLog::WriteQueued(std::unique_lock<std::mutex>& lock) {
  writing_ = true;
  std::vector<PendingAppend*> batch;
  batch.swap(queue_);
  uint64_t total = 0;
  for (const PendingAppend* p : batch) total += p->size;
  absl::Status s;
  if (active_ == nullptr ||
      (active_->size + total > options_.segment_bytes && active_->size > kSegmentHeaderBytes)) {
    s = CreateSegmentLocked(next_id_++);
  }
  std::shared_ptr<Segment> seg = active_;
  uint64_t base = 0;
  if (s.ok()) {
    base = seg->size;
    seg->size += total;
    seg->holds += static_cast<int>(batch.size());
    lock.unlock();
    std::vector<iovec> iov;
    iov.reserve(batch.size());
    for (const PendingAppend* p : batch) iov.push_back({const_cast<char*>(p->data), p->size});
    if (!PwriteAll(seg->write_fd, iov.data(), static_cast<int>(iov.size()), base)) {
      s = Errno("appending to", seg->path);
    }
    lock.lock();
    if (!s.ok()) {
      seg->holds -= static_cast<int>(batch.size());
      // The tail is unknown now: seal the segment, the next append starts a new one.
      if (active_ == seg) active_ = nullptr;
      MaybeCloseWriterLocked(*seg);
    }
  }
  uint64_t at = base;
  for (PendingAppend* p : batch) {
    if (s.ok()) {
      p->result = ValueLocation{seg->id, at};
    } else {
      p->result = s;
      p->done = true;
    }
    at += p->size;
  }
  if (s.ok()) {
    ++seg->unsynced;
    written_.push_back(WrittenGroup{std::move(batch), std::move(seg)});
  }
  writing_ = false;
  committed_.notify_all();
}

void ValueLog::SyncWritten(std::unique_lock<std::mutex>& lock) {
  syncing_ = true;
  std::vector<WrittenGroup> groups;
  groups.swap(written_);
  std::vector<std::shared_ptr<Segment>> segs;
  for (const WrittenGroup& g : groups) {
    if (std::find(segs.begin(), segs.end(), g.segment) == segs.end()) segs.push_back(g.segment);
  }
  lock.unlock();
  // Every group here finished its write before this sync starts: one fdatasync per segment
  // covers them all (and possibly later writes too, which are not counted on).
  std::vector<absl::Status> synced(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    if (fdatasync(segs[i]->write_fd) != 0) synced[i] = Errno("syncing", segs[i]->path);
  }
  lock.lock();
  for (size_t i = 0; i < segs.size(); ++i) {
    if (!synced[i].ok()) segs[i]->sync_failed = true;
    if (synced[i].ok() && segs[i]->sync_failed) {
      synced[i] = absl::UnavailableError(
          absl::StrCat("value log: an earlier sync of ", segs[i]->path, " failed"));
    }
  }
  for (WrittenGroup& g : groups) {
    const size_t i = static_cast<size_t>(std::find(segs.begin(), segs.end(), g.segment) -
                                         segs.begin());
    --g.segment->unsynced;
    if (!synced[i].ok()) {
      g.segment->holds -= static_cast<int>(g.appends.size());
      if (active_ == g.segment) active_ = nullptr;  // the tail is unknown: seal it
    }
    for (PendingAppend* p : g.appends) {
      if (!synced[i].ok()) p->result = synced[i];
      p->done = true;
    }
  }
  for (const std::shared_ptr<Segment>& seg : segs) MaybeCloseWriterLocked(*seg);
  syncing_ = false;
  committed_.notify_all();
}

void ValueLog::Release(uint32_t segment) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = segments_.find(segment);
  if (it != segments_.end()) --it->second->holds;
}

std::shared_ptr<ValueLog::Segment> ValueLog::Find(uint32_t segment) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = segments_.find(segment);
  return it == segments_.end() ? nullptr : it->second;
}

absl::Status ValueLog::Read(ValueLocation loc, uint64_t len, char* out) const {
  std::shared_ptr<Segment> seg = Find(loc.segment);
  if (seg == nullptr) return absl::NotFoundError("value log: segment removed");
  if (!seg->direct_reads) {
    uint64_t done = 0;
    while (done < len) {
      const ssize_t r =
          pread(seg->read_fd, out + done, len - done, static_cast<off_t>(loc.offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Errno("reading", seg->path);
      if (r == 0) return absl::DataLossError("value log: short read (segment truncated)");
      done += static_cast<uint64_t>(r);
    }
    return absl::OkStatus();
  }
  const uint64_t begin = loc.offset & ~uint64_t{kValueLogAlign - 1};
  const uint64_t end = AlignUp(loc.offset + len);
  AlignedBuffer buf(end - begin);
  uint64_t done = 0;
  while (done < loc.offset + len - begin) {
    const ssize_t r =
        pread(seg->read_fd, buf.data() + done, buf.size() - done, static_cast<off_t>(begin + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno("reading", seg->path);
    if (r == 0) return absl::DataLossError("value log: short read (segment truncated)");
    done += static_cast<uint64_t>(r);
  }
  std::memcpy(out, buf.data() + (loc.offset - begin), len);
  return absl::OkStatus();
}

ValueLocation ValueLog::End() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_ == nullptr) return ValueLocation{};
  return ValueLocation{active_->id, active_->size};
}

uint64_t ValueLog::SegmentSize(uint32_t segment) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = segments_.find(segment);
  return it == segments_.end() ? 0 : it->second->size;
}

std::vector<std::pair<uint32_t, uint64_t>> ValueLog::Segments() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint32_t, uint64_t>> out;
  out.reserve(segments_.size());
  for (const auto& [id, seg] : segments_) out.emplace_back(id, seg->size);
  return out;
}

uint64_t ValueLog::TotalBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [id, seg] : segments_) n += seg->size;
  return n;
}

bool ValueLog::Removable(uint32_t segment) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = segments_.find(segment);
  return it != segments_.end() && it->second != active_ && it->second->holds == 0;
}

absl::Status ValueLog::Remove(uint32_t segment) {
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = segments_.find(segment);
    if (it == segments_.end()) return absl::OkStatus();
    CHECK(it->second != active_) << "value log: removing the active segment";
    seg = std::move(it->second);
    segments_.erase(it);
  }
  if (unlink(seg->path.c_str()) != 0 && errno != ENOENT) return Errno("removing", seg->path);
  return absl::OkStatus();
}

}  // namespace flashserve::cache
