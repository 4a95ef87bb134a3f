// Tests of the mapped-memory resource: blocks of any size and alignment up to a
// page, written whole, returned; an arena over it.
#include "hiertag/core/export/mapped_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <new>
#include <vector>

namespace hiertag {
namespace {

TEST(MappedMemoryTest, BlocksOfEverySizeAreWritableAndAligned) {
  // Check that blocks from none to several pages are aligned as asked and hold every byte.
  std::pmr::memory_resource* memory = MappedMemory();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, page - 1, page, page + 1, 5 * page + 17}) {
    for (size_t alignment : {size_t{1}, size_t{16}, size_t{64}, page}) {
      size_t before = MappedBytes();
      void* block = memory->allocate(size, alignment);
      ASSERT_NE(block, nullptr);
      EXPECT_EQ(MappedBytes() - before, size == 0 ? page : (size + page - 1) / page * page);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % alignment, 0u) << size << " " << alignment;
      std::memset(block, 0xAB, size);
      if (size > 0) {
        EXPECT_EQ(static_cast<unsigned char*>(block)[size - 1], 0xAB);
      }
      memory->deallocate(block, size, alignment);
      EXPECT_EQ(MappedBytes(), before);
    }
  }
}

TEST(MappedMemoryTest, AnAlignmentAboveAPageIsRefused) {
  // Check that an alignment a mapping cannot promise throws rather than misaligns.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_THROW(static_cast<void>(MappedMemory()->allocate(8, 2 * page)), std::bad_alloc);
}

TEST(MappedMemoryTest, IsOneResourceEqualOnlyToItself) {
  // Check that the process has one such resource, and that it is not the default one.
  EXPECT_EQ(MappedMemory(), MappedMemory());
  EXPECT_TRUE(MappedMemory()->is_equal(*MappedMemory()));
  EXPECT_FALSE(MappedMemory()->is_equal(*std::pmr::new_delete_resource()));
}

TEST(MappedMemoryTest, AnArenaOverItHoldsContainersLargerThanItsFirstBlock) {
  // Check that a monotonic arena upstream of it grows past its first block with its contents intact.
  std::pmr::monotonic_buffer_resource arena(4096, MappedMemory());
  std::pmr::vector<std::pmr::vector<int>> vectors(&arena);  // (no std::pmr::string under the old string ABI)
  for (int i = 0; i < 20000; ++i) vectors.emplace_back(size_t{40}, i);
  ASSERT_EQ(vectors.size(), 20000u);
  for (int i = 0; i < 20000; i += 997) {
    ASSERT_EQ(vectors[i].size(), 40u);
    EXPECT_EQ(vectors[i].front(), i);
    EXPECT_EQ(vectors[i].back(), i);
  }
}

}  // namespace
}  // namespace hiertag
