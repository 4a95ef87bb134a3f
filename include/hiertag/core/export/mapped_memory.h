// Mapped memory: a memory resource whose blocks are pages mapped for them alone.
//
// Why: hiertag plans the tagged file right after torch serialized the model and
// freed the graph it serialized from, which leaves glibc's heap with a large free
// top. Any free that touches that top makes glibc return it to the kernel
// (systrim: unmapping what torch freed, milliseconds on a T5-small), and
// hiertag's own frees were those: torch's deferred cost, paid inside hiertag's
// work and charged to it, which torch's next free would otherwise pay. Memory
// from here never comes from, or goes back to, the heap: releasing it unmaps
// only its own pages.
//
// For few large blocks: every block is at least a page, aligned as asked (an
// alignment above a page costs a larger mapping, trimmed). Use it as the
// upstream of a std::pmr::monotonic_buffer_resource or
// unsynchronized_pool_resource, or for arrays that grow geometrically to the
// size of the graph (passes/mapped_arrays.h). Small blocks (up to
// kCarvedPages pages, aligned to at most a page) are carved from chunks of
// kMappedChunkPages pages, one mapping for many blocks. Returned blocks are
// kept and handed out again for a block of their size, uncleared: every carved
// one, and larger ones of up to 256 pages (alignment up to a page) while the
// kept ones stay within 32 MiB; a block aligned to more than a page is mapped
// for itself and unmapped when returned. TrimMappedMemory (the end of an
// export) unmaps the kept larger blocks, and the chunks once no carved block
// is in use. (The list of chunks is the resource's only heap memory.)
//
// Before:  std::pmr::monotonic_buffer_resource arena;             // blocks from malloc
// After:   std::pmr::monotonic_buffer_resource arena(MappedMemory()); // blocks from mmap
#pragma once

#include <cstddef>
#include <memory_resource>

namespace hiertag {

inline constexpr size_t kCarvedPages = 32;
inline constexpr size_t kMappedChunkPages = 256;

// The process's one mapped-memory resource (thread-safe). Allocation
// throws std::bad_alloc when the system maps nothing.
std::pmr::memory_resource* MappedMemory();

// The bytes of the blocks it has handed out and not had back, whole pages: for
// memory figures (a heap count does not see them). Blocks kept for reuse are
// not counted.
size_t MappedBytes();

// The bytes it keeps mapped for reuse: returned blocks, and the chunks' pages
// not handed out.
size_t KeptMappedBytes();

// Unmaps the larger blocks kept for reuse, and the chunks when no small block
// is in use.
void TrimMappedMemory();

}  // namespace hiertag
