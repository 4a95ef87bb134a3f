// Mapped memory: blocks of pages from mmap, returned with munmap.
#include "hiertag/core/export/mapped_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace hiertag {
namespace {

std::atomic<size_t> mapped_bytes{0};

class MappedMemoryResource final : public std::pmr::memory_resource {
 private:
  static size_t Pages(size_t bytes) {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return ((bytes == 0 ? 1 : bytes) + page - 1) / page * page;
  }

  // A mapping starts on a page boundary: every alignment up to a page holds.
  // A larger one (a power of two: libstdc++'s unsynchronized_pool_resource
  // asks for its chunks aligned to their blocks' size rounded up to a power of
  // two) is mapped with room to spare, and
  // the pages before and after the aligned block are unmapped again.
  void* do_allocate(size_t bytes, size_t alignment) override {
    const size_t size = Pages(bytes);
    const size_t spare = alignment > Pages(1) ? alignment - Pages(1) : 0;
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

  void do_deallocate(void* block, size_t bytes, size_t /*alignment*/) override {
    munmap(block, Pages(bytes));
    mapped_bytes.fetch_sub(Pages(bytes), std::memory_order_relaxed);
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

}  // namespace

std::pmr::memory_resource* MappedMemory() {
  // Never destroyed: a plan alive at exit may still return its blocks.
  static auto* resource = new MappedMemoryResource;
  return resource;
}

size_t MappedBytes() { return mapped_bytes.load(std::memory_order_relaxed); }

}  // namespace hiertag
