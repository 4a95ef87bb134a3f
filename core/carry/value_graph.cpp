// ValueGraph: a main graph's values, makers, readers and descent (value_graph.h).
#include "hiertag/core/carry/value_graph.h"

#include <algorithm>
#include <unordered_set>

#include "hiertag/core/file/module_boundaries.h"

namespace hiertag {

ValueGraph::ValueGraph(const OnnxModel& model) {
  const OnnxGraph& main = model.graphs.at(0);
  std::unordered_map<int, std::vector<std::string_view>> reads;  // by the model's node index
  for (int index : main.nodes) reads[index] = NodeReads(model, index);

  // Ids over the model's own strings first; copied into the arena at the end.
  std::unordered_map<std::string_view, int> ids;
  std::vector<std::string_view> names;
  auto intern = [&](std::string_view name) {
    auto [found, added] = ids.try_emplace(name, static_cast<int>(names.size()));
    if (added) {
      names.push_back(name);
      flags_.push_back(0);
      producer_.push_back(kNone);
    }
    return found->second;
  };
  for (const OnnxValue& input : main.inputs) inputs_.push_back(intern(input.name));
  for (const OnnxValue& output : main.outputs) outputs_.push_back(intern(output.name));
  for (int id : inputs_) flags_[id] |= kValue;
  for (int id : outputs_) flags_[id] |= kOutput;
  for (const OnnxInitializer& initializer : main.initializers) {
    flags_[intern(initializer.name)] |= kValue | kWeight | kInitializer;
  }
  for (int index : WeightNodes(model, reads)) {
    for (std::string_view output : model.nodes[index].outputs) {
      if (!output.empty()) flags_[intern(output)] |= kWeight;
    }
  }

  std::vector<std::vector<Consumer>> consumers;  // by id, until flattened below
  node_reads_.push_back(0);
  node_outputs_.push_back(0);
  for (size_t node = 0; node < main.nodes.size(); ++node) {
    const OnnxNode& proto = model.nodes[main.nodes[node]];
    for (std::string_view output : proto.outputs) {
      if (output.empty()) continue;
      int id = intern(output);
      flags_[id] |= kValue;
      producer_[id] = static_cast<int>(node);
      outputs_of_.push_back(id);
    }
    node_outputs_.push_back(static_cast<int>(outputs_of_.size()));
    const std::vector<std::string_view>& read = reads.at(main.nodes[node]);
    size_t next = 0;  // read[next]: the next non-empty input, then the bodies' outer reads
    auto consumed = [&](std::string_view name, int position) {
      int id = intern(name);
      if (consumers.size() <= static_cast<size_t>(id)) consumers.resize(names.size());
      consumers[id].push_back({static_cast<int>(node), position});
      if (!(flags_[id] & kWeight)) reads_.push_back(id);
    };
    for (size_t position = 0; position < proto.inputs.size(); ++position) {
      if (proto.inputs[position].empty()) continue;
      consumed(read[next++], static_cast<int>(position));
    }
    for (; next < read.size(); ++next) consumed(read[next], kNoPosition);
    node_reads_.push_back(static_cast<int>(reads_.size()));
  }
  consumers.resize(names.size());
  consumer_start_.push_back(0);
  for (std::vector<Consumer>& of : consumers) {
    consumers_.insert(consumers_.end(), of.begin(), of.end());
    consumer_start_.push_back(static_cast<int>(consumers_.size()));
    std::vector<Consumer>().swap(of);
  }

  size_t bytes = 0;
  for (std::string_view name : names) bytes += name.size();
  arena_.reserve(bytes);
  names_.reserve(names.size());
  ids_.reserve(names.size());
  for (std::string_view name : names) {
    size_t start = arena_.size();
    arena_.append(name);
    names_.push_back(std::string_view(arena_).substr(start, name.size()));
    ids_.emplace(names_.back(), static_cast<int>(names_.size()) - 1);
  }

  for (int id : inputs_) {
    if (producer_[id] == kNone && !(flags_[id] & kWeight)) {
      input_bit_.try_emplace(id, static_cast<int>(input_bit_.size()));
    }
  }
  PlaceTopologically();
  mask_words_ = static_cast<int>((input_bit_.size() + 63) / 64);
  from_inputs_.assign(static_cast<size_t>(node_count()) * mask_words_, 0);
  std::vector<int> order(node_count());
  for (int node = 0; node < node_count(); ++node) order[position_[node]] = node;
  for (int node : order) {
    uint64_t* mask = &from_inputs_[static_cast<size_t>(node) * mask_words_];
    for (int id : Reads(node)) {
      if (producer_[id] != kNone) {
        const uint64_t* source = &from_inputs_[static_cast<size_t>(producer_[id]) * mask_words_];
        for (int word = 0; word < mask_words_; ++word) mask[word] |= source[word];
      } else if (auto bit = input_bit_.find(id); bit != input_bit_.end()) {
        mask[bit->second / 64] |= uint64_t{1} << (bit->second % 64);
      }
    }
  }
}

// The file's order when it is a topological one (ONNX asks for it), else
// Kahn's on the reads; a cycle's nodes (no valid ONNX has one) come last.
void ValueGraph::PlaceTopologically() {
  const int count = node_count();
  position_.resize(count);
  bool ordered = true;
  for (int node = 0; node < count && ordered; ++node) {
    for (int id : Reads(node)) ordered = ordered && producer_[id] < node;
  }
  if (ordered) {
    for (int node = 0; node < count; ++node) position_[node] = node;
    return;
  }
  std::vector<int> waiting(count, 0);
  std::vector<std::vector<int>> readers(count);
  for (int node = 0; node < count; ++node) {
    std::vector<int> read(Reads(node).begin(), Reads(node).end());
    std::sort(read.begin(), read.end());
    read.erase(std::unique(read.begin(), read.end()), read.end());
    for (int id : read) {
      if (producer_[id] == kNone) continue;
      ++waiting[node];
      readers[producer_[id]].push_back(node);
    }
  }
  std::vector<int> ready;
  for (int node = 0; node < count; ++node) {
    if (waiting[node] == 0) ready.push_back(node);
  }
  std::fill(position_.begin(), position_.end(), count);
  int placed = 0;
  while (!ready.empty()) {
    int node = ready.back();
    ready.pop_back();
    position_[node] = placed++;
    for (int reader : readers[node]) {
      if (--waiting[reader] == 0) ready.push_back(reader);
    }
  }
}

int ValueGraph::Id(std::string_view name) const {
  auto found = ids_.find(name);
  return found == ids_.end() ? kNone : found->second;
}

std::span<const ValueGraph::Consumer> ValueGraph::Consumers(int id) const {
  return std::span<const Consumer>(consumers_)
      .subspan(consumer_start_[id], consumer_start_[id + 1] - consumer_start_[id]);
}

std::span<const int> ValueGraph::Reads(int node) const {
  return std::span<const int>(reads_).subspan(node_reads_[node], node_reads_[node + 1] - node_reads_[node]);
}

std::span<const int> ValueGraph::Outputs(int node) const {
  return std::span<const int>(outputs_of_).subspan(node_outputs_[node], node_outputs_[node + 1] - node_outputs_[node]);
}

std::vector<int> ValueGraph::UsedOutputs(int node) const {
  std::vector<int> used;
  for (int id : Outputs(node)) {
    if (consumer_start_[id + 1] > consumer_start_[id] || (flags_[id] & kOutput)) used.push_back(id);
  }
  if (used.empty()) used.assign(Outputs(node).begin(), Outputs(node).end());
  return used;
}

bool ValueGraph::Known(int id) const { return id != kNone && (producer_[id] != kNone || input_bit_.count(id) > 0); }

bool ValueGraph::FromInput(int node, int bit) const {
  return from_inputs_[static_cast<size_t>(node) * mask_words_ + bit / 64] >> (bit % 64) & 1;
}

bool ValueGraph::Descends(int node, int value) const {
  if (value == kNone) return false;
  int maker = producer_[value];
  if (maker == kNone) {
    auto bit = input_bit_.find(value);
    return bit != input_bit_.end() && FromInput(node, bit->second);
  }
  if (maker == node) return true;
  int lowest = position_[maker];
  std::unordered_set<int> seen{node};
  std::vector<int> stack{node};
  while (!stack.empty()) {  // back from the node, no further than the maker's position
    int at = stack.back();
    stack.pop_back();
    for (int id : Reads(at)) {
      int source = producer_[id];
      if (source == maker) return true;
      if (source != kNone && position_[source] > lowest && seen.insert(source).second) stack.push_back(source);
    }
  }
  return false;
}

std::set<int> ValueGraph::Descending(const std::set<int>& nodes, const std::vector<int>& values) const {
  std::unordered_set<int> wanted;  // a name nothing makes is no one's ancestor
  std::vector<uint64_t> mask(mask_words_, 0);
  std::unordered_set<int> makers;
  for (int id : values) {
    if (!Known(id)) continue;
    wanted.insert(id);
    if (auto bit = input_bit_.find(id); bit != input_bit_.end())
      mask[bit->second / 64] |= uint64_t{1} << (bit->second % 64);
    if (producer_[id] != kNone) makers.insert(producer_[id]);
  }
  // Those that read one, make one, or descend from a graph input among them.
  std::set<int> found;
  for (int node : nodes) {
    bool from_input = false;
    for (int word = 0; word < mask_words_; ++word) {
      from_input = from_input || (from_inputs_[static_cast<size_t>(node) * mask_words_ + word] & mask[word]);
    }
    std::span<const int> read = Reads(node);
    if (from_input || makers.count(node) ||
        std::any_of(read.begin(), read.end(), [&](int id) { return wanted.count(id) > 0; })) {
      found.insert(node);
    }
  }
  if (makers.empty()) return found;
  int lowest = node_count();
  for (int maker : makers) lowest = std::min(lowest, position_[maker]);
  std::vector<int> starts(nodes.begin(), nodes.end());
  std::sort(starts.begin(), starts.end(), [&](int a, int b) { return position_[a] < position_[b]; });
  std::unordered_set<int> barren;  // searched through: no maker upstream of them
  for (int start : starts) {       // nearest the makers first
    if (found.count(start) || barren.count(start)) continue;
    std::unordered_set<int> seen{start};
    std::vector<int> stack{start};
    bool reached = false;
    while (!stack.empty() && !reached) {  // back from it, no further than the earliest maker
      int at = stack.back();
      stack.pop_back();
      for (int id : Reads(at)) {
        int source = producer_[id];
        if (source == kNone) continue;
        if (makers.count(source) || found.count(source)) {
          reached = true;
          break;
        }
        if (position_[source] > lowest && !barren.count(source) && seen.insert(source).second) stack.push_back(source);
      }
    }
    if (reached) {
      found.insert(start);
    } else {
      barren.insert(seen.begin(), seen.end());
    }
  }
  return found;
}

std::set<int> ValueGraph::Upstream(int start, int lowest) const {
  std::set<int> found;
  std::vector<int> stack;
  if (position_[start] >= lowest) stack.push_back(start);
  while (!stack.empty()) {
    int at = stack.back();
    stack.pop_back();
    if (!found.insert(at).second) continue;
    for (int id : Reads(at)) {
      int source = producer_[id];
      if (source != kNone && !found.count(source) && position_[source] >= lowest) stack.push_back(source);
    }
  }
  return found;
}

std::set<int> ValueGraph::Between(int earliest, int end) const {
  int maker = earliest == kNone ? kNone : producer_[earliest];
  return Descending(Upstream(end, maker == kNone ? -1 : position_[maker]), {earliest});
}

}  // namespace hiertag
