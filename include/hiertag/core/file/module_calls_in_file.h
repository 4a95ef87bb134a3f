// Module calls in a tagged file: which calls of which modules a node computes
// for, and the one statement of the module-boundary rule (README "Module
// boundaries"), which `hiertag extract` applies and hiertag.checks states again
// for the verifier.
//
// A node's references: its own (its tag, call hiertag.call, 0 when absent) and
// those of hiertag.shared_with ("TAG": every call of TAG; "TAG#K": call K).
// A call of an ancestor holds call c of tag T when the chain of parent_calls
// leads there (no parent_calls: every call ran in its parent's call 0).
//
//   member    node N belongs to module M (all its calls, or call k) when a
//             reference of N lies within M (and, for call k, one of the calls it
//             names ran in M's call k);
//   boundary  a value a member makes leaves M when a node outside M reads it,
//             or it is a model output (read by the root's call 0), unless that
//             reader belongs to another reference of the maker that lies
//             outside M: that module's own copy of a shared computation (CSE), or
//             the caller whose variable a tracer alias is;
//   weights   initializers, Constants and nodes computing from those alone are
//             nobody's data: copied into every extraction that reads them,
//             never a boundary value.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hiertag/core/file/tagged_file.h"
#include "hiertag/core/format/tag_format.h"

namespace hiertag {

// The part of a module (all its calls, or one) a question is about.
struct ModuleCall {
  std::string tag;
  std::optional<int64_t> call;  // std::nullopt: every call
};

class CallsInFile {
 public:
  explicit CallsInFile(const TaggedFile& file) : file_(file) {}

  // The node's references, its own first; std::nullopt with a reason when its
  // hiertag.call or a shared reference is malformed. A node without a tag has none.
  std::optional<std::vector<CallRef>> NodeRefs(const OnnxNode& node, std::string* error) const;

  // The calls of `ancestor` in which `ref` ran (every call of `ref.tag` when it
  // names none); empty when `ref.tag` does not lie within `ancestor` or the
  // table does not lead there.
  std::set<int64_t> CallsAt(const CallRef& ref, const std::string& ancestor) const;

  // Whether `ref` lies within `target`: all of its calls in it (kInside), none
  // (kOutside), or some (kPartly).
  enum class Placement { kInside, kPartly, kOutside };
  Placement Place(const CallRef& ref, const ModuleCall& target) const;

  // Whether `user` (its own reference) belongs to the call `ref` names.
  bool Belongs(const CallRef& user, const CallRef& ref) const;

 private:
  const TaggedFile& file_;
};

}  // namespace hiertag
