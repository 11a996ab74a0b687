#include "runtime/weights_readers.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime/cuda_check.h"

namespace kiln::runtime {
namespace {

constexpr uint64_t kDefaultBlockBytes = uint64_t{4} << 20;
// A reader reads a block in pieces of kPieceBytes (one pread each, hashed while in the core's
// cache, copied on its own) through a ring of kSlots pinned pieces: 2 MiB of pinned memory per
// reader, since pinning costs time too (about 0.4 ms per MiB on the GPU machine).
constexpr uint64_t kPieceBytes = uint64_t{512} << 10;
constexpr size_t kSlots = 4;
constexpr int kMaxReaders = 12;

// What the readers share: the next block to take, the bytes queued, the first error.
struct Upload {
  Upload(const FileMap& m, void* dev, const schema::FileEntry& e, uint64_t b, bool v,
         const std::string& l)
      : map(m), device(static_cast<char*>(dev)), entry(e), block(b), verify(v), label(l) {}

  const FileMap& map;
  char* device;
  const schema::FileEntry& entry;
  uint64_t block;
  bool verify;
  const std::string& label;
  int cuda_device = 0;

  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable changed;
  uint64_t queued = 0;  // bytes whose copy is queued (under mu)
  int running = 0;      // readers not yet finished (under mu)
  Status error;         // the first reader's error (under mu)
};

// One reader's ring of pinned pieces, its stream and events; the destructor waits for the
// copies still reading the ring before it frees it.
struct Reader {
  char* pinned = nullptr;  // kSlots pieces of kPieceBytes
  cudaStream_t stream = nullptr;
  std::array<cudaEvent_t, kSlots> done{};
  std::array<bool, kSlots> used{};
  uint64_t pieces = 0;  // pieces read so far: the next one goes to slot pieces % kSlots
  XXH3_state_t* hash = nullptr;

  ~Reader() {
    if (hash != nullptr) XXH3_freeState(hash);
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    for (cudaEvent_t e : done)
      if (e != nullptr) (void)cudaEventDestroy(e);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    if (pinned != nullptr) (void)cudaFreeHost(pinned);
    (void)cudaGetLastError();
  }
};

Status read_piece(const FileMap& map, char* buf, uint64_t offset, uint64_t n,
                  const std::string& label) {
  for (uint64_t got = 0; got < n;) {
    const ssize_t r = ::pread(map.fd(), buf + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return io_error("reading weights '" + label + "' at offset " + std::to_string(offset + got) +
                      ": " + std::strerror(errno));
    if (r == 0)
      return data_loss("weights '" + label + "' ended at " + std::to_string(offset + got) +
                       " bytes, the manifest says " + std::to_string(map.size()) +
                       " (changed after verification?)");
    got += static_cast<uint64_t>(r);
  }
  return Status::ok_status();
}

// Block `index`: each piece read into the next slot of the ring (once the copy out of it is
// done), hashed while it is in cache, and its copy queued; then the block's digest checked.
Status block_upload(Upload& up, Reader& r, uint64_t index, const std::string& what) {
  const uint64_t offset = index * up.block;
  const uint64_t n = std::min(up.block, up.map.size() - offset);
  if (r.hash != nullptr && XXH3_64bits_reset(r.hash) != XXH_OK)
    return internal_error(what + ": XXH3 reset failed");
  for (uint64_t at = offset; at < offset + n; ++r.pieces) {
    const uint64_t len = std::min(kPieceBytes, offset + n - at);
    const size_t slot = r.pieces % kSlots;
    char* buf = r.pinned + slot * kPieceBytes;
    if (r.used[slot])
      KILN_CUDA_TRY(cudaEventSynchronize(r.done[slot]), what + " (cudaEventSynchronize)");
    KILN_RETURN_IF_ERROR(read_piece(up.map, buf, at, len, up.label));
    if (r.hash != nullptr && XXH3_64bits_update(r.hash, buf, len) != XXH_OK)
      return internal_error(what + ": XXH3 update failed");
    KILN_CUDA_TRY(cudaMemcpyAsync(up.device + at, buf, len, cudaMemcpyHostToDevice, r.stream),
                  what + " (cudaMemcpyAsync at offset " + std::to_string(at) + ")");
    KILN_CUDA_TRY(cudaEventRecord(r.done[slot], r.stream), what + " (cudaEventRecord)");
    r.used[slot] = true;
    at += len;
  }
  if (r.hash != nullptr &&
      XXH3_64bits_digest(r.hash) != up.entry.block_xxh3(static_cast<int>(index)))
    return data_loss("weights '" + up.label + "': block " + std::to_string(index) + " (bytes " +
                     std::to_string(offset) + ".." + std::to_string(offset + n) +
                     ") does not match its XXH3-64 in the manifest (changed after "
                     "verification?)");
  {
    std::lock_guard<std::mutex> lock(up.mu);
    up.queued += n;
  }
  up.changed.notify_one();
  return Status::ok_status();
}

Status reader_run(Upload& up) {
  const std::string what = "uploading weights '" + up.label + "'";
  KILN_CUDA_TRY(cudaSetDevice(up.cuda_device), what + " (cudaSetDevice in a reader thread)");
  Reader r;
  void* pinned = nullptr;
  KILN_CUDA_TRY(cudaHostAlloc(&pinned, kSlots * kPieceBytes, cudaHostAllocDefault),
                what + " (cudaHostAlloc of " + std::to_string(kSlots * kPieceBytes) + " bytes)");
  r.pinned = static_cast<char*>(pinned);
  KILN_CUDA_TRY(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking),
                what + " (cudaStreamCreateWithFlags)");
  for (cudaEvent_t& e : r.done)
    KILN_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                  what + " (cudaEventCreateWithFlags)");
  if (up.verify && (r.hash = XXH3_createState()) == nullptr)
    return resource_exhausted(what + ": cannot create an XXH3 state");
  while (!up.failed.load(std::memory_order_relaxed)) {
    const uint64_t index = up.next.fetch_add(1);
    if (index * up.block >= up.map.size()) break;
    KILN_RETURN_IF_ERROR(block_upload(up, r, index, what));
  }
  KILN_CUDA_TRY(cudaStreamSynchronize(r.stream), what + " (cudaStreamSynchronize)");
  return Status::ok_status();
}

}  // namespace

int weights_reader_count(uint64_t bytes, uint64_t block_bytes) {
  const uint64_t blocks = std::max<uint64_t>(1, bytes / block_bytes + (bytes % block_bytes != 0));
  const auto cores = static_cast<uint64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::min({cores, static_cast<uint64_t>(kMaxReaders), blocks}));
}

Status weights_upload_readers(const FileMap& map, void* device, const schema::FileEntry& entry,
                              bool verify, const std::string& label,
                              const std::function<void(int64_t, int64_t)>& progress) {
  if (verify && entry.block_bytes() == 0)
    return internal_error("weights_upload_readers: verify needs block digests");
  Upload up(map, device, entry, entry.block_bytes() != 0 ? entry.block_bytes() : kDefaultBlockBytes,
            verify, label);
  KILN_CUDA_TRY(cudaGetDevice(&up.cuda_device), "cudaGetDevice");
  const int readers = weights_reader_count(map.size(), up.block);
  up.running = readers;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(readers));
  for (int i = 0; i < readers; ++i) {
    try {
      threads.emplace_back([&up] {
        Status s = reader_run(up);
        std::lock_guard<std::mutex> lock(up.mu);
        if (!s.ok() && up.error.ok()) up.error = std::move(s);
        if (!up.error.ok()) up.failed = true;
        --up.running;
        up.changed.notify_one();
      });
    } catch (const std::system_error& e) {  // no more threads: those started read every block
      std::lock_guard<std::mutex> lock(up.mu);
      up.running -= readers - i;
      if (threads.empty())
        up.error = resource_exhausted("uploading weights '" + label +
                                      "': cannot start a reader thread: " + e.what());
      break;
    }
  }
  // Progress is reported here, on the caller's thread, as the readers queue their copies.
  const auto total = static_cast<int64_t>(map.size());
  {
    std::unique_lock<std::mutex> lock(up.mu);
    uint64_t told = 0;
    for (;;) {
      if (progress && up.queued != told && up.error.ok()) {
        told = up.queued;
        lock.unlock();
        progress(static_cast<int64_t>(told), total);
        lock.lock();
        continue;  // more may have been queued meanwhile
      }
      if (up.running == 0) break;
      up.changed.wait(lock);
    }
  }
  for (std::thread& t : threads) t.join();
  return std::move(up.error);
}

}  // namespace kiln::runtime
