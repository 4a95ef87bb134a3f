// Rewrite classification: what an export pass did across module calls, from
// the graph before it and the graph after it (pass_graph.h). The one
// implementation of these rules: the TorchScript path's RecordRewrites
// (torch's JIT passes) and the dynamo path's observer (onnxscript's optimizer
// passes) both describe their graphs as PassGraphs and apply the result. No
// torch, no Python.
//
// Measured on both exporters: passes fuse a Transpose of one module into the
// next module's Transpose (or Gemm), cancel a permute and its inverse in two
// modules outright, fuse a Conv of one module with a BatchNorm of another,
// turn whole modules into constants or initializers, and merge equal nodes of
// several modules into one. A tag alone would then claim a boundary that no
// longer exists. So each group of removed nodes (connected through values) is
// classified by what its former readers read now:
//
//   fused     a node the pass made or changed (inputs or attributes) took over
//             the group's computation (the new Conv carrying the BatchNorm, the
//             Transpose whose permutation absorbed the one before it): the node
//             is lent the group's owners as spans. A made node counts as made
//             from the group only when it computes from what the group read (or
//             from another such node): a pass makes other nodes under the same
//             owner too;
//   removed   the readers read a value from before the group, untouched: the
//             group computed nothing (a permute and its inverse). When its nodes
//             belonged to more than one owner and a tensor passed between them,
//             the values between them are gone: recorded;
//   folded    the readers read a new graph input (an initializer): recorded with
//             that value; or a constant, new or older: the constant is lent as
//             folded_from the owners of the group's nodes the replaced value was
//             computed from (not the whole group's: a group joins every
//             computation sharing a removed node, as each layer's shape
//             arithmetic shares the sequence length). A lent owner among them
//             is listed as itself, standing for its loan's owners (the tagger
//             expands each loan once: FoldedSource, call_tagging.h);
//   merged    the readers read an older node elsewhere that computed the same
//             value: that node is shared with the group's owners.
// A reader that now reads a value from further up (the group's input, or a
// value the group was computed from) reads the same value as before, but maybe
// not one its module received: when no removed record covers the group, it is
// recorded as rewired, with the owner of the node it read before and the
// owners that made or read the new value before the pass.
//
// A pass can also bypass nodes without removing them (kept for other readers):
// a node it changed now reads, in place of a value that still exists, a value
// that one was computed from. With attributes of its own changed, the node
// took the bypassed nodes' computation over: fused, as above. Else it reads
// the same value from further up: rewired, as above.
//
// Owners are resolved to module calls only when tagging (which also widens a
// removed record and a fused node's spans to every call between them).
//
// Before:  %t1 = Transpose[perm=[0,2,3,1]](%x)   owner to_last
//          %t2 = Transpose[perm=[0,3,1,2]](%t1)  owner to_first
//          %y  = Mul(%t2, %scale)                owner to_first
// After:   %y  = Mul(%x, %scale)
//          -> records: removed {to_last, to_first}
//
// Before:  %k  = Transpose[perm=[0,2,1,3]](%r)   owner layer (also handed out)
//          %kt = Transpose[perm=[0,1,3,2]](%k)   owner attention
// After:   %k  = Transpose[perm=[0,2,1,3]](%r)
//          %kt = Transpose[perm=[0,2,3,1]](%r)   -> loans: kt {recorded attention, spans {layer}}
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hiertag/core/rewrites/pass_graph.h"

namespace hiertag {

// What a node is lent beyond the owner it records, in owners.
struct OwnerLoan {
  Owner recorded = kNoOwner;       // whose node it is
  std::vector<Owner> spans;        // fused: owners whose nodes it took over
  std::vector<Owner> folded_from;  // a constant: owners whose nodes it holds the value of (lent ones as themselves)
  std::string rewrite;             // fused: the pass that fused them (the first that did)
  std::vector<Owner> shared_with;  // merged: owners whose equal nodes it stands for too
};

// A rewrite across owners that no node's loan can say.
struct OwnerRewrite {
  enum class Kind { kRemoved, kFolded, kRewired };
  Kind kind = Kind::kRemoved;
  std::vector<Owner> owners;  // removed, folded: the owners of the nodes removed
  ValueId initializer = 0;    // folded: the new graph input read in their place
  // rewired: the reading node's owner; the owner of the node whose value it
  // read before; the owners that made and read the value it reads now, before
  // the pass; that value's place among the graph inputs, or -1.
  Owner reader = kNoOwner;
  Owner replaced = kNoOwner;
  std::vector<Owner> value_owners;
  int graph_input = -1;
};

struct PassRewrites {
  struct Lent {
    uint32_t node;   // index in the graph after the pass
    OwnerLoan loan;  // the node's whole loan: what it had, grown by this pass
  };
  struct Shared {
    uint32_t node;  // index in the graph after the pass (a node that was there before)
    Owner with;
  };
  std::vector<Lent> loans;  // in the order the pass first grew them
  std::vector<Shared> shares;
  std::vector<OwnerRewrite> records;
  int fused = 0;  // nodes that gained spans
};

// The loan an owner stands for, when the observer lent it (nullptr otherwise).
using LoanLookup = std::function<const OwnerLoan*(Owner)>;
// Receives one line per rewrite classified, for the observer's debug log.
using RewriteDebugLog = std::function<void(const std::string&)>;

// Classifies passes one after another: keeps its working arrays from one to
// the next, so that once they have grown to the graph a pass allocates little.
class RewriteClassifier {
 public:
  RewriteClassifier();
  ~RewriteClassifier();
  RewriteClassifier(const RewriteClassifier&) = delete;
  RewriteClassifier& operator=(const RewriteClassifier&) = delete;

  // What pass `pass` rewrote, from `before` to `after` (after.nodes[j].before
  // pairs them). `log` may be empty.
  PassRewrites Classify(const PassGraph& before, const PassGraph& after, const std::string& pass,
                        const LoanLookup& loans, const RewriteDebugLog& log = {});

  // Lets go of the working arrays.
  void Release();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace hiertag
