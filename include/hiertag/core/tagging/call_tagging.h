// Call tagging: what a tagged export writes per node and per model, from the
// module calls it recorded and the records its observers kept. The one
// implementation of these rules for both exporters: AssignHierarchyTags
// (passes/, torch's JIT graph) and the dynamo path's tagger (plugin/dynamo/)
// resolve their own records (scopes, FX annotations) to call references and
// hand them here. No torch, no Python.
//
//   numbering    each call tag's calls in the order they ran; a call of a
//                filtered module is its caller's (NumberCalls)
//   loans        a node fused from several calls goes to their common
//                ancestor and lists every call between them as spans; a fused
//                node a later pass folded into a constant only says what the
//                calls became (folded_from); a node shared with other calls
//                lists them, never itself (TakeLoan)
//   rewrites     a removed record names every call between the calls whose
//                nodes it removed; a rewired record the calls holding the reader
//                and the node it read before but neither maker nor reader of
//                what it reads now (ResolveRemoved, RewiredCalls)
//   constants    a constant shared with other calls stays shared only with the
//                calls whose nodes read it (KeepReadingCalls)
//   entries      the node entries and the model's (DescribeNode, DescribeModel)
//
//   calls /Net/Block#0 (ran in /Net#0), /Net/Block#1 (in /Net#0)
//   a Transpose pair cancelled between /Net/Block#0/Norm and /Net/Block#1
//     -> removed {/Net/Block#0, /Net/Block#0/Norm, /Net/Block#1}
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "hiertag/core/export/proto_tagging.h"
#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/core/format/placement_rules.h"
#include "hiertag/core/format/tagged_entries.h"

namespace hiertag {

// A call tag, or one of its calls (written "TAG#K" when the tag has several).
struct TagRef {
  static constexpr int kEveryCall = -1;
  int tag = -1;
  int call = kEveryCall;  // which call of `tag`; kEveryCall when not known

  bool operator==(const TagRef& other) const { return tag == other.tag && call == other.call; }
  bool operator<(const TagRef& other) const { return tag != other.tag ? tag < other.tag : call < other.call; }
};

// What export passes recorded on a node beyond its tag. Few nodes have any, so
// they are held apart: a TaggedNode stays 32 bytes on graphs of a million nodes.
struct NodeRecords {
  std::vector<TagRef> shared_with;  // other calls it also computes for (its own tag's among them)
  std::vector<TagRef> spans;        // calls whose nodes a pass fused into it
  std::string rewrite;              // that pass
  std::vector<int> folded_from;     // call tags whose nodes a pass folded into this constant
  std::vector<int> folded_sources;  // and lent nodes it was folded from (HierarchyTagging::folded_sources)

  bool empty() const { return shared_with.empty() && spans.empty() && folded_from.empty() && folded_sources.empty(); }
};

struct TaggedNode {
  const void* node = nullptr;  // the writer's node (torch's Node, an onnx_ir node)
  int tag = -1;                // call tag (CallTags)
  int tag_module = -1;         // the module of that call tag (ModuleTable index)
  int call = 0;                // which call of its tag the node belongs to
  TagRule rule = TagRule::kRoot;
  std::unique_ptr<NodeRecords> records;  // nullptr: none

  const std::vector<TagRef>& shared_with() const { return records ? records->shared_with : kNoRefs; }
  const std::vector<TagRef>& spans() const { return records ? records->spans : kNoRefs; }
  const std::string& rewrite() const { return records ? records->rewrite : kNoRewrite; }
  const std::vector<int>& folded_from() const { return records ? records->folded_from : kNoTags; }

 private:
  static inline const std::vector<TagRef> kNoRefs;
  static inline const std::string kNoRewrite;
  static inline const std::vector<int> kNoTags;
};

// The calls of one call tag, in the order they ran.
struct TagCalls {
  std::vector<int> instance_calls;  // each call's number among its module instance's calls
  std::vector<int> parent_calls;    // the parent tag's call each ran in
};

enum class RewriteKind { kRemoved, kFolded, kRewired };
const char* RewriteKindName(RewriteKind kind);

// A rewrite record, its owners resolved to calls.
struct TagRewrite {
  RewriteKind kind = RewriteKind::kRemoved;
  std::string pass;
  std::vector<TagRef> refs;  // the calls whose nodes it removed or folded, ascending
  uint64_t initializer = 0;  // folded: the initializer value (the writer's id)
  std::vector<int> sources;  // folded: and the lent nodes it was folded from (HierarchyTagging::folded_sources)
};

// A lent node a fold read (a node the exporter fused, folded or merged from
// several calls' nodes): the call tags its loan stands for, and the lent nodes
// its loan lists in turn. A fold refers to it instead of copying the calls:
// in a deep decoder every layer's shape constant is folded from one shape
// computation every layer shares, and copies would grow with the square of
// the depth. Read through HierarchyTagging::FoldedTags.
struct FoldedSource {
  std::vector<int> tags;
  std::vector<int> sources;  // indices of sources made before this one
};

struct HierarchyTagging {
  std::vector<TaggedNode> nodes;             // serialization pre-order (see proto_tagging.h)
  std::map<int, TagCalls> calls;             // call tag -> its recorded calls
  std::vector<TagRewrite> rewrites;          // removed across tags, rewired, and every fold
  std::vector<FoldedSource> folded_sources;  // lent nodes folds read (FoldedSourceTable)
  std::set<int> never_ran;                   // tags of containers whose forward never ran
  int rule_counts[kTagRuleCount] = {};
  int unresolved_scope_levels = 0;

  // Every call tag used by a node (tag, shared_with, spans, folded from) or
  // recorded as called, ascending.
  std::vector<int> UsedTags() const;
  // The call tags a node's or a record's folds stand for: `tags` and, through
  // `sources`, their loans', each once, ascending.
  std::vector<int> FoldedTags(const std::vector<int>& tags, const std::vector<int>& sources) const;
  // How many calls a tag has (1 when none were recorded).
  int CallCount(int tag) const;
};

// Makes HierarchyTagging::folded_sources, one per lent node, on first use.
// Keys name lent nodes (the tagger's: a borrowed scope, a lent owner);
// `expand(key, tags, lent)` gives a lent node's loan as call tags and the
// lent nodes it lists in turn.
class FoldedSourceTable {
 public:
  using Expand = std::function<void(uint64_t key, std::vector<int>* tags, std::vector<uint64_t>* lent)>;
  FoldedSourceTable(HierarchyTagging& tagging, Expand expand);

  // The index of key's source in tagging.folded_sources (-1 for a loan
  // listing itself back, which no writer makes).
  int SourceOf(uint64_t key);

 private:
  static constexpr int kMaking = -1;
  HierarchyTagging& tagging_;
  Expand expand_;
  std::unordered_map<uint64_t, int> index_;
};

// One recorded module call: the call tag it ran as (CallTags::Call of its
// caller's tag and its module), its module, and whether it is a call of that
// tag (false for a filtered module's call, whose tag is its caller's) and the
// index of its caller among the recorded calls (-1: the root's call).
struct RecordedCall {
  int tag = -1;
  int module = -1;
  bool own_tag = true;
  int caller = -1;
};

// Numbers each call tag's calls in the order they ran (`calls` in that
// order): tagging.calls, and each call's ordinal among its tag's calls (-1
// for a call that is no call of a tag of its own).
std::vector<int> NumberCalls(const std::vector<RecordedCall>& calls, HierarchyTagging& tagging);

// What a node is lent, its owners resolved to calls.
struct RefLoan {
  std::vector<TagRef> shared_with;
  std::vector<TagRef> spans;
  std::vector<int> folded_from;     // call tags
  std::vector<int> folded_sources;  // HierarchyTagging::folded_sources
  std::string rewrite;
};

// The rules over call references, given the calls recorded (tagging.calls).
class CallRefs {
 public:
  CallRefs(const CallTags& call_tags, const HierarchyTagging& tagging) : call_tags_(call_tags), tagging_(tagging) {}

  // A call and the calls it ran in, up to the root (calls unknown above a
  // call whose own is unknown). A ref without a tag is the root's own work.
  std::vector<TagRef> Chain(TagRef ref) const;

  // The calls a rewrite joining the calls `ends` cuts through: the ends, and
  // each call some end ran in but not every end did. Sorted.
  std::vector<TagRef> CallsBetween(const std::vector<TagRef>& ends) const;

  // Whether `refs` names the call `ref` names (an unknown call matches every call).
  static bool Holds(const std::vector<TagRef>& refs, const TagRef& ref);

  // The calls holding a rewired reader and the node it read before, but
  // neither the maker nor a reader of the value it reads now: where they read
  // a value of their own, they now read one they never received. `value_refs`
  // made or read the value before; `user_input`: the value is a user input
  // (read by the root's call 0). Sorted.
  std::vector<TagRef> RewiredCalls(const TagRef& reader, const TagRef& replaced, const std::vector<TagRef>& value_refs,
                                   bool user_input) const;

  // A node recorded as `own` and lent `loan`: sets its tag (a fused node moves
  // to the common ancestor of every call it carries) and its records.
  // `has_inputs`: a fused node without inputs (a later pass folded it into a
  // constant) only says what the calls became.
  void TakeLoan(const RefLoan& loan, const TagRef& own, bool has_inputs, TaggedNode& tagged) const;

  // Keeps in a constant's shared_with only the calls its readers ran in (the
  // readers' own calls and what they are shared with: `reader_refs`).
  void KeepReadingCalls(const std::vector<TagRef>& reader_refs, TaggedNode& tagged) const;

 private:
  const CallTags& call_tags_;
  const HierarchyTagging& tagging_;
};

// Adds a rewrite record to tagging.rewrites as the file keeps it: a removed
// record of fewer than two calls says nothing and is dropped, else it names
// every call between them; a folded record without calls or sources is dropped. `refs`
// are the calls whose nodes it concerned (for rewired: RewiredCalls);
// `sources`, for a folded record, the lent nodes it was folded from.
void AddRewrite(RewriteKind kind, const std::string& pass, std::vector<TagRef> refs, uint64_t initializer,
                const CallRefs& call_refs, HierarchyTagging& tagging, std::vector<int> sources = {});

// The entries of one node (its op type and outputs are the writer's).
struct NodeEntries {
  const std::string* tag = nullptr;  // CallTags::Tag of the node's tag
  std::vector<std::string> shared_with;
  std::vector<std::pair<std::string, std::string>> more;  // hiertag.call, hiertag.spans, hiertag.rewrite
  std::vector<std::string> spans;                         // when fused across calls: the calls, as call refs
};
NodeEntries DescribeNode(const TaggedNode& tagged, const HierarchyTagging& tagging, CallTags& call_tags);

// "TAG", or "TAG#K" for one call of a tag called more than once; sorted, each once.
std::vector<std::string> CallRefTexts(const std::vector<TagRef>& refs, const HierarchyTagging& tagging,
                                      CallTags& call_tags);

// The model's entries: hiertag.modules, hiertag.rewrites (when any),
// hiertag.format_version. `fused_nodes[k]` names the node of the k-th node of
// tagging.nodes that spans several calls (its rewrite record names it);
// `constant_names(k)` the value a constant node k holds (folded_into), or
// nullopt; `initializer_name(id)` a folded record's initializer as the file
// names it, or nullopt when it is gone (deduplicated, unused).
std::vector<ModelMetadataEntry> DescribeModel(
    const HierarchyTagging& tagging, CallTags& call_tags, const ModuleTable& modules,
    const std::function<std::string(size_t)>& node_name,
    const std::function<std::optional<std::string>(size_t)>& constant_name,
    const std::function<std::optional<std::string>(uint64_t)>& initializer_name);

}  // namespace hiertag
