// Mapped memory: blocks of pages from mmap, returned with munmap.
#include "hiertag/core/export/mapped_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <vector>

namespace hiertag {
namespace {

std::atomic<size_t> mapped_bytes{0};

// Blocks of up to kCarvedPages pages (alignment up to a page) are carved from
// chunks of kMappedChunkPages pages, mapped one at a time: an export asks for about
// eighty such blocks, most of one page, and a mapping of each cost two system
// calls (the unmapping with a TLB shootdown on every core), about 1 ms of a
// ResNet-50 export (perf, bench/export_once.py). A returned carved block is
// kept for a block of its size; the chunks are unmapped whole, by Trim, once
// no carved block is in use.

// Larger returned blocks of up to kKeptPages pages are kept, up to kKeptBytes
// in all, and handed out again for a block of the same size: an export's
// arrays and arenas are made and returned pass after pass.
constexpr size_t kKeptPages = 256;
constexpr size_t kKeptBytes = size_t{32} << 20;

class MappedMemoryResource final : public std::pmr::memory_resource {
 public:
  void Trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t pages = kCarvedPages + 1; pages <= kKeptPages; ++pages) {
      while (void* block = kept_[pages]) {
        kept_[pages] = *static_cast<void**>(block);
        munmap(block, pages * Page());
      }
    }
    kept_bytes_ = 0;
    if (carved_in_use_ != 0) return;
    for (void* chunk : chunks_) munmap(chunk, kMappedChunkPages * Page());
    chunks_.clear();
    for (size_t pages = 1; pages <= kCarvedPages; ++pages) kept_[pages] = nullptr;
    chunk_left_ = 0;
  }

  size_t KeptBytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return kept_bytes_ + chunks_.size() * kMappedChunkPages * Page() - carved_in_use_;
  }

 private:
  static size_t Page() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
  }
  static size_t Pages(size_t bytes) { return ((bytes == 0 ? 1 : bytes) + Page() - 1) / Page() * Page(); }
  static bool Carved(size_t size, size_t alignment) { return alignment <= Page() && size / Page() <= kCarvedPages; }

  static void* Map(size_t size) {
    void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    return mapped;
  }

  // A kept block of `size` bytes (linked through its first word), or nullptr.
  void* TakeKept(size_t size) {
    void* block = kept_[size / Page()];
    if (block != nullptr) kept_[size / Page()] = *static_cast<void**>(block);
    return block;
  }
  void Keep(void* block, size_t size) {
    *static_cast<void**>(block) = kept_[size / Page()];
    kept_[size / Page()] = block;
  }

  // A carved block: a kept one of its size, else the next pages of the
  // current chunk (a new chunk when they do not fit; the old one's rest stays
  // unused and untouched).
  void* Carve(size_t size) {
    void* block = TakeKept(size);
    if (block == nullptr) {
      if (chunk_left_ < size) {
        chunks_.reserve(chunks_.size() + 1);
        chunk_next_ = static_cast<char*>(Map(kMappedChunkPages * Page()));
        chunks_.push_back(chunk_next_);
        chunk_left_ = kMappedChunkPages * Page();
      }
      block = chunk_next_;
      chunk_next_ += size;
      chunk_left_ -= size;
    }
    carved_in_use_ += size;
    return block;
  }

  // A mapping starts on a page boundary: every alignment up to a page holds.
  // A larger one (a power of two: libstdc++'s unsynchronized_pool_resource
  // asks for its chunks aligned to their blocks' size rounded up to a power of
  // two) is mapped with room to spare, and the pages before and after the
  // aligned block are unmapped again. A kept block serves only alignments up
  // to a page.
  void* do_allocate(size_t bytes, size_t alignment) override {
    const size_t spare = alignment > Page() ? alignment - Page() : 0;
    // Pages() would wrap round: no mapping is that large.
    if (bytes > std::numeric_limits<size_t>::max() - Page() - spare) throw std::bad_alloc();
    const size_t size = Pages(bytes);
    if (Carved(size, alignment)) {
      std::lock_guard<std::mutex> lock(mutex_);
      void* block = Carve(size);
      mapped_bytes.fetch_add(size, std::memory_order_relaxed);
      return block;
    }
    if (spare == 0 && size / Page() <= kKeptPages) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (void* block = TakeKept(size)) {
        kept_bytes_ -= size;
        mapped_bytes.fetch_add(size, std::memory_order_relaxed);
        return block;
      }
    }
    char* block = static_cast<char*>(Map(size + spare));
    if (spare != 0) {
      const uintptr_t start = reinterpret_cast<uintptr_t>(block);
      const size_t before = ((start + alignment - 1) & ~(alignment - 1)) - start;  // whole pages
      if (before != 0) munmap(block, before);
      if (spare - before != 0) munmap(block + before + size, spare - before);
      block += before;
    }
    mapped_bytes.fetch_add(size, std::memory_order_relaxed);
    return block;
  }

  // A returned carved block is kept; another of more than kCarvedPages pages
  // is kept while the kept blocks stay within kKeptBytes; else unmapped.
  void do_deallocate(void* block, size_t bytes, size_t alignment) override {
    const size_t size = Pages(bytes);
    mapped_bytes.fetch_sub(size, std::memory_order_relaxed);
    if (Carved(size, alignment)) {
      std::lock_guard<std::mutex> lock(mutex_);
      Keep(block, size);
      carved_in_use_ -= size;
      return;
    }
    if (size / Page() > kCarvedPages && size / Page() <= kKeptPages) {  // smaller lists are the carved blocks'
      std::lock_guard<std::mutex> lock(mutex_);
      if (kept_bytes_ + size <= kKeptBytes) {
        Keep(block, size);
        kept_bytes_ += size;
        return;
      }
    }
    munmap(block, size);
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  std::mutex mutex_;
  std::array<void*, kKeptPages + 1> kept_{};  // by page count: the last block kept, or nullptr
  size_t kept_bytes_ = 0;                     // of the blocks kept that are not carved
  std::vector<void*> chunks_;                 // the chunks carved blocks come from
  char* chunk_next_ = nullptr;                // the current chunk's first unused page
  size_t chunk_left_ = 0;                     // and the bytes after it
  size_t carved_in_use_ = 0;                  // bytes of carved blocks handed out and not returned
};

MappedMemoryResource* Resource() {
  // Never destroyed: a plan alive at exit may still return its blocks.
  static auto* resource = new MappedMemoryResource;
  return resource;
}

}  // namespace

std::pmr::memory_resource* MappedMemory() { return Resource(); }

size_t MappedBytes() { return mapped_bytes.load(std::memory_order_relaxed); }

size_t KeptMappedBytes() { return Resource()->KeptBytes(); }

void TrimMappedMemory() { Resource()->Trim(); }

}  // namespace hiertag
