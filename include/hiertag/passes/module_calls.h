// ModuleCalls: records every module call of a traced export, as it happens.
//
// The plugin wraps each module instance's `forward` for the duration of a
// tagged export, so every call passes through Enter/Exit, whether it came
// through `__call__` (torch pushed the instance scope already) or straight to
// `.forward()` (torch records nothing). Three things are recorded:
//
//   direct calls   a forward entered without __call__ gets a direct scope
//                  ("hiertag.d<index>|...", scope_names.h) pushed around it, so
//                  its own ops are recorded as its own, not as its caller's;
//                  RestoreTorchScopes removes those levels again before torch
//                  names the nodes, so names stay those of an untagged export.
//   call order     every call's scope, in the order the calls ran (a module
//                  called three times has three scope objects): the call tree
//                  the tags are built from, and the numbering of repeated calls.
//   tracer aliases a call after which a tensor the module received is bound to
//                  a value the call made, its data unchanged (version counter):
//                  `x.to(torch.float32)` on a float32 tensor returns `x` itself
//                  and torch's tracer rebinds the caller's `x` to the Cast; each
//                  link of `x.float().contiguous()` or `x.flatten(1)` on a 2-D
//                  tensor rebinds it again. Every node of that chain (AliasChain)
//                  is shared with the caller (BorrowedScopes::ShareWith): the
//                  caller reads the result as its own variable, so it is no value
//                  the module returned; the link that survives the ONNX
//                  conversion carries the sharing whichever it is. Unless the
//                  call returned that very tensor (`return x.float()`): then it
//                  is the module's result, which the caller reads. An input
//                  changed in place (its version moved) is a real result of the
//                  call and is left alone.
//
// Precondition: torch's tracer is running (Enter/Exit are no-ops otherwise).
//
// Before (traced, `self.attention.forward(x)` inside layers.0):
//   %q = aten::matmul(...)   scope: hiertag.m0|Net::/hiertag.m2|Layer::layers.0
// After:
//   %q = aten::matmul(...)   scope: .../hiertag.m2|Layer::layers.0/hiertag.d3|Attention::attention
#pragma once

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "hiertag/passes/borrowed_scopes.h"

namespace hiertag {

struct ModuleCall {
  int module = -1;             // index into the ModuleTable
  torch::jit::ScopePtr scope;  // the call's scope (instance or direct scope)
};

class ModuleCalls {
 public:
  struct Entered {
    bool recorded = false;                                          // false: no tracer, nothing to undo
    bool pushed = false;                                            // a direct scope was pushed
    torch::jit::Node* last_before = nullptr;                        // the trace's last node when the call began
    std::vector<std::pair<at::Tensor, torch::jit::Value*>> inputs;  // traced inputs before the call
    std::vector<int64_t> versions;
  };

  // Before module `module`'s forward runs. `scope_name` is the name torch's
  // tracer pushes for this instance in __call__; `inputs` the tensors the call
  // received (positional and keyword, containers flattened).
  Entered Enter(int module, const std::string& scope_name, std::vector<at::Tensor> inputs);

  // After the forward returned `returned` (its tensors, containers flattened),
  // or raised (completed false: then only the scope is popped).
  void Exit(Entered& entered, bool completed, const std::vector<at::Tensor>& returned, BorrowedScopes& borrowed);

  const std::vector<ModuleCall>& calls() const { return calls_; }
  int direct_calls() const { return direct_calls_; }
  int aliases() const { return aliases_; }

 private:
  std::vector<ModuleCall> calls_;
  int direct_calls_ = 0;
  int aliases_ = 0;
};

// The nodes of a tracer alias: those after `last_before` (made during the
// call) on a data path from `before` to `after`, in graph order; just
// `after`'s node when no such path exists.
//   %a = aten::to(%x, ...)        <- on the chain (x -> a -> c)
//   %s = aten::size(%a, ...)      <- on the chain: it feeds c
//   %c = aten::view(%a, %s)       after
std::vector<torch::jit::Node*> AliasChain(torch::jit::Value* before, torch::jit::Value* after,
                                          torch::jit::Node* last_before);

// Gives every node (nested blocks included) the scope torch itself would have
// recorded: the chain without direct scopes. Distinct scope objects stay
// distinct and equal ones equal (torch's naming counts scope objects). Returns
// the number of nodes changed. Idempotent.
int RestoreTorchScopes(torch::jit::Block* block);

}  // namespace hiertag
