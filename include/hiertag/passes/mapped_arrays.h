// Mapped arrays: the per-node arrays and maps the pass observers keep, and the
// loans' records (BorrowedScopes), with their storage in mapped pages
// (MappedMemory, core/export/mapped_memory.h) instead of glibc's heap.
//
// Why: every torch pass the observers wrap frees many small objects (nodes,
// values, uses). glibc keeps them in its fast and unsorted bins, and the first
// large malloc or free after the pass consolidates and sorts all of them: the
// pass's deferred cost, charged to whoever allocates next. Observing a pass
// allocates its arrays right there; on the 200-layer decoder that was about a
// third of observing the passes (perf: _int_malloc, malloc_consolidate and
// unlink_chunk under RecordRewrites and RecordCseSharing). These arrays' own
// storage never touches those bins; what their elements allocate (a loan's
// lists of scopes) still does. Each block is at least a page: for arrays that
// grow geometrically to the graph, or for an arena's blocks.
//
// Before:  std::vector<uint8_t> alive;  ska::flat_hash_map<Node*, Index> index;
// After:   MappedArray<uint8_t> alive = MakeMappedArray<uint8_t>();
//          MappedMap<Node*, Index> index = MakeMappedMap<Node*, Index>();
#pragma once

#include <c10/util/flat_hash_map.h>

#include <functional>
#include <memory_resource>
#include <utility>
#include <vector>

#include "hiertag/core/export/mapped_memory.h"

namespace hiertag {

template <typename T>
using MappedArray = std::pmr::vector<T>;

template <typename Key, typename Value>
using MappedMap = ska::flat_hash_map<Key, Value, std::hash<Key>, std::equal_to<Key>,
                                     std::pmr::polymorphic_allocator<std::pair<Key, Value>>>;

// An empty array or map drawing on `memory` (mapped pages themselves, or an
// arena over them).
template <typename T>
MappedArray<T> MakeMappedArray(std::pmr::memory_resource* memory = MappedMemory()) {
  return MappedArray<T>(memory);
}
template <typename Key, typename Value>
MappedMap<Key, Value> MakeMappedMap(std::pmr::memory_resource* memory = MappedMemory()) {
  return MappedMap<Key, Value>(std::pmr::polymorphic_allocator<std::pair<Key, Value>>(memory));
}

}  // namespace hiertag
