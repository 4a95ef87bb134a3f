// Tests of the mapped-memory resource: blocks of any size and alignment,
// written whole, returned, kept for reuse and trimmed; an arena and a pool
// over it.
#include "hiertag/core/export/mapped_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory_resource>
#include <new>
#include <string>
#include <vector>

namespace hiertag {
namespace {

// The process's mapped address space (VmSize), in bytes.
size_t VirtualBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

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

TEST(MappedMemoryTest, AlignmentsAboveAPageAreHonouredAndTheSparePagesReturned) {
  // Check that a block aligned to several pages is aligned, writable, and that only its own pages stay mapped.
  std::pmr::memory_resource* memory = MappedMemory();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t alignment : {2 * page, 16 * page, 256 * page}) {
    for (size_t size : {size_t{8}, 3 * page, alignment + 1}) {
      size_t before = MappedBytes();
      size_t address_space = VirtualBytes();
      void* block = memory->allocate(size, alignment);
      // The spare pages mapped to find an aligned block are unmapped again.
      EXPECT_EQ(VirtualBytes() - address_space, (size + page - 1) / page * page) << size << " " << alignment;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % alignment, 0u) << size << " " << alignment;
      EXPECT_EQ(MappedBytes() - before, (size + page - 1) / page * page);
      std::memset(block, 0xCD, size);
      EXPECT_EQ(static_cast<unsigned char*>(block)[size - 1], 0xCD);
      memory->deallocate(block, size, alignment);
      EXPECT_EQ(MappedBytes(), before);
    }
  }
}

TEST(MappedMemoryTest, AReturnedBlockIsHandedOutAgainAndTrimmingUnmapsIt) {
  // Check that a returned larger block is kept mapped and handed out for its
  // size (no new mapping, not counted as in use while kept), and that
  // trimming unmaps every kept block.
  std::pmr::memory_resource* memory = MappedMemory();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = kCarvedPages + 3;
  TrimMappedMemory();
  EXPECT_EQ(KeptMappedBytes(), 0u);
  void* block = memory->allocate(pages * page, 8);
  std::memset(block, 0x5A, pages * page);
  size_t in_use = MappedBytes();
  size_t address_space = VirtualBytes();
  memory->deallocate(block, pages * page, 8);
  EXPECT_EQ(in_use - MappedBytes(), pages * page);
  EXPECT_EQ(KeptMappedBytes(), pages * page);
  EXPECT_EQ(VirtualBytes(), address_space);  // still mapped
  void* again = memory->allocate(pages * page - 5, 64);
  EXPECT_EQ(again, block);
  EXPECT_EQ(KeptMappedBytes(), 0u);
  EXPECT_EQ(VirtualBytes(), address_space);               // no new mapping
  void* other = memory->allocate((pages + 1) * page, 8);  // another size: a mapping of its own
  EXPECT_NE(other, block);
  EXPECT_EQ(VirtualBytes() - address_space, (pages + 1) * page);
  memory->deallocate(again, pages * page - 5, 64);
  memory->deallocate(other, (pages + 1) * page, 8);
  EXPECT_EQ(KeptMappedBytes(), (2 * pages + 1) * page);
  size_t kept_space = VirtualBytes();
  TrimMappedMemory();
  EXPECT_EQ(KeptMappedBytes(), 0u);
  EXPECT_EQ(kept_space - VirtualBytes(), (2 * pages + 1) * page);
}

TEST(MappedMemoryTest, SmallBlocksShareChunksAndTrimmingUnmapsThemOnceAllAreBack) {
  // Check that small blocks are carved from one mapping per chunk (the
  // address space grows by a chunk, not by block), that returned ones are
  // handed out again, and that trimming leaves the chunks while a small block
  // is in use and unmaps them once none is.
  std::pmr::memory_resource* memory = MappedMemory();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t chunk = kMappedChunkPages * page;
  TrimMappedMemory();
  ASSERT_EQ(KeptMappedBytes(), 0u);
  size_t in_use = MappedBytes();
  std::vector<void*> blocks;
  blocks.reserve(kMappedChunkPages);  // no heap growth between the address-space readings
  size_t address_space = VirtualBytes();
  for (size_t i = 0; i < kMappedChunkPages; ++i) {
    blocks.push_back(memory->allocate(page, 8));
    std::memset(blocks.back(), 0x11, page);
  }
  EXPECT_EQ(VirtualBytes() - address_space, chunk);  // one chunk holds them all
  EXPECT_EQ(MappedBytes() - in_use, chunk);
  EXPECT_EQ(KeptMappedBytes(), 0u);
  void* larger = memory->allocate(kCarvedPages * page, page);  // the largest small block: a second chunk
  std::memset(larger, 0x22, kCarvedPages * page);
  EXPECT_EQ(VirtualBytes() - address_space, 2 * chunk);
  EXPECT_EQ(KeptMappedBytes(), chunk - kCarvedPages * page);
  memory->deallocate(blocks[7], page, 8);
  EXPECT_EQ(memory->allocate(page - 1, 16), blocks[7]);  // a returned block, handed out again
  for (void* block : blocks) memory->deallocate(block, page, 8);
  TrimMappedMemory();  // a small block still in use: the chunks stay
  EXPECT_EQ(VirtualBytes() - address_space, 2 * chunk);
  EXPECT_EQ(static_cast<unsigned char*>(larger)[kCarvedPages * page - 1], 0x22);
  memory->deallocate(larger, kCarvedPages * page, page);
  EXPECT_EQ(MappedBytes(), in_use);
  EXPECT_EQ(KeptMappedBytes(), 2 * chunk);
  TrimMappedMemory();
  EXPECT_EQ(KeptMappedBytes(), 0u);
  EXPECT_EQ(VirtualBytes(), address_space);
}

TEST(MappedMemoryTest, ABlockLargerThanAnyMappingFails) {
  // Check that a size whose page count would wrap round fails instead of handing out a block.
  std::pmr::memory_resource* memory = MappedMemory();
  size_t before = MappedBytes();
  for (size_t alignment : {size_t{8}, size_t{1} << 16}) {
    EXPECT_THROW(memory->allocate(std::numeric_limits<size_t>::max() - 10, alignment), std::bad_alloc);
  }
  EXPECT_EQ(MappedBytes(), before);
}

TEST(MappedMemoryTest, LargeBlocksAreUnmappedWhenReturned) {
  // Check that a block above the kept sizes goes back to the system at once.
  std::pmr::memory_resource* memory = MappedMemory();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  TrimMappedMemory();
  void* block = memory->allocate(300 * page, 8);
  size_t address_space = VirtualBytes();
  memory->deallocate(block, 300 * page, 8);
  EXPECT_EQ(KeptMappedBytes(), 0u);
  EXPECT_EQ(address_space - VirtualBytes(), 300 * page);
}

TEST(MappedMemoryTest, APoolOverItServesManyListsAndReturnsItsChunks) {
  // Check that std's pool resource, which asks for chunks aligned to their size, works over it.
  size_t before = MappedBytes();
  {
    std::pmr::unsynchronized_pool_resource pool(std::pmr::pool_options{0, size_t{1} << 16}, MappedMemory());
    std::pmr::vector<std::pmr::vector<uint32_t>> lists(&pool);
    for (uint32_t i = 0; i < 5000; ++i) lists.emplace_back(size_t{1 + i % 300}, i);
    for (uint32_t i = 0; i < 5000; i += 499) {
      ASSERT_EQ(lists[i].size(), size_t{1 + i % 300});
      EXPECT_EQ(lists[i].back(), i);
    }
    EXPECT_GT(MappedBytes(), before);
  }
  EXPECT_EQ(MappedBytes(), before);
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
