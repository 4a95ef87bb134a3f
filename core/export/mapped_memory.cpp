// Mapped memory: blocks of pages from mmap, returned with munmap.
#include "hiertag/core/export/mapped_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

namespace hiertag {
namespace {

std::atomic<size_t> mapped_bytes{0};

// Returned blocks of up to kKeptPages pages are kept, up to kKeptBytes in all,
// and handed out again for a block of the same size: an export's arrays and
// arenas are made and returned pass after pass, and a mapping costs two
// system calls and a fault per page touched (perf over a ResNet-50 export:
// about a third of hiertag's own work in mmap and munmap).
constexpr size_t kKeptPages = 256;
constexpr size_t kKeptBytes = size_t{32} << 20;

class MappedMemoryResource final : public std::pmr::memory_resource {
 public:
  void Trim() {
    std::lock_guard<std::mutex> lock(kept_mutex_);
    for (size_t pages = 1; pages <= kKeptPages; ++pages) {
      while (void* block = kept_[pages]) {
        kept_[pages] = *static_cast<void**>(block);
        munmap(block, pages * Page());
      }
    }
    kept_bytes_ = 0;
  }

  size_t KeptBytes() {
    std::lock_guard<std::mutex> lock(kept_mutex_);
    return kept_bytes_;
  }

 private:
  static size_t Page() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
  }
  static size_t Pages(size_t bytes) { return ((bytes == 0 ? 1 : bytes) + Page() - 1) / Page() * Page(); }

  // A mapping starts on a page boundary: every alignment up to a page holds.
  // A larger one (a power of two: libstdc++'s unsynchronized_pool_resource
  // asks for its chunks aligned to their blocks' size rounded up to a power of
  // two) is mapped with room to spare, and the pages before and after the
  // aligned block are unmapped again. A kept block serves only alignments up
  // to a page.
  void* do_allocate(size_t bytes, size_t alignment) override {
    const size_t size = Pages(bytes);
    const size_t spare = alignment > Page() ? alignment - Page() : 0;
    if (spare == 0 && size / Page() <= kKeptPages) {
      std::lock_guard<std::mutex> lock(kept_mutex_);
      if (void* block = kept_[size / Page()]) {
        kept_[size / Page()] = *static_cast<void**>(block);
        kept_bytes_ -= size;
        mapped_bytes.fetch_add(size, std::memory_order_relaxed);
        return block;
      }
    }
    void* mapped = mmap(nullptr, size + spare, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    char* block = static_cast<char*>(mapped);
    if (spare != 0) {
      const uintptr_t start = reinterpret_cast<uintptr_t>(mapped);
      const size_t before = ((start + alignment - 1) & ~(alignment - 1)) - start;  // whole pages
      if (before != 0) munmap(block, before);
      if (spare - before != 0) munmap(block + before + size, spare - before);
      block += before;
    }
    mapped_bytes.fetch_add(size, std::memory_order_relaxed);
    return block;
  }

  // A returned block is kept (linked through its first word) while the kept
  // blocks stay within kKeptBytes; else unmapped.
  void do_deallocate(void* block, size_t bytes, size_t /*alignment*/) override {
    const size_t size = Pages(bytes);
    mapped_bytes.fetch_sub(size, std::memory_order_relaxed);
    if (size / Page() <= kKeptPages) {
      std::lock_guard<std::mutex> lock(kept_mutex_);
      if (kept_bytes_ + size <= kKeptBytes) {
        *static_cast<void**>(block) = kept_[size / Page()];
        kept_[size / Page()] = block;
        kept_bytes_ += size;
        return;
      }
    }
    munmap(block, size);
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  std::mutex kept_mutex_;
  std::array<void*, kKeptPages + 1> kept_{};  // by page count: the last block kept, or nullptr
  size_t kept_bytes_ = 0;
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
