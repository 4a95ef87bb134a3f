// Call tagging: call numbering, loans, rewrite records and the file's entries.
#include "hiertag/core/tagging/call_tagging.h"

#include <algorithm>
#include <iterator>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tag_format.h"

namespace hiertag {
namespace {

void AddRef(const TagRef& ref, std::vector<TagRef>* refs) {
  if (ref.tag >= 0 && std::find(refs->begin(), refs->end(), ref) == refs->end()) refs->push_back(ref);
}

void AddTag(int tag, std::vector<int>* tags) {
  if (tag >= 0 && std::find(tags->begin(), tags->end(), tag) == tags->end()) tags->push_back(tag);
}

int64_t Key(const TagRef& ref) { return (static_cast<int64_t>(ref.tag) << 32) | (ref.call + 1); }

}  // namespace

const char* RewriteKindName(RewriteKind kind) {
  switch (kind) {
    case RewriteKind::kRemoved:
      return "removed";
    case RewriteKind::kFolded:
      return "folded";
    case RewriteKind::kRewired:
      return "rewired";
  }
  return "?";
}

std::vector<int> HierarchyTagging::UsedTags() const {
  std::vector<int> sources;  // the folded sources nodes refer to
  std::vector<int> used;
  for (const TaggedNode& tagged : nodes) {
    used.push_back(tagged.tag);
    if (!tagged.records) continue;
    for (const TagRef& ref : tagged.records->shared_with) used.push_back(ref.tag);
    for (const TagRef& ref : tagged.records->spans) used.push_back(ref.tag);
    used.insert(used.end(), tagged.records->folded_from.begin(), tagged.records->folded_from.end());
    sources.insert(sources.end(), tagged.records->folded_sources.begin(), tagged.records->folded_sources.end());
  }
  std::vector<int> folded = FoldedTags({}, sources);
  used.insert(used.end(), folded.begin(), folded.end());
  for (const auto& [tag, _] : calls) used.push_back(tag);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  return used;
}

std::vector<int> HierarchyTagging::FoldedTags(const std::vector<int>& tags, const std::vector<int>& sources) const {
  std::vector<int> folded(tags.begin(), tags.end());
  std::vector<uint8_t> seen(folded_sources.size(), 0);
  std::vector<int> work(sources.begin(), sources.end());
  while (!work.empty()) {
    int source = work.back();
    work.pop_back();
    if (seen.at(source)) continue;
    seen[source] = 1;
    folded.insert(folded.end(), folded_sources[source].tags.begin(), folded_sources[source].tags.end());
    work.insert(work.end(), folded_sources[source].sources.begin(), folded_sources[source].sources.end());
  }
  std::sort(folded.begin(), folded.end());
  folded.erase(std::unique(folded.begin(), folded.end()), folded.end());
  folded.erase(folded.begin(), std::lower_bound(folded.begin(), folded.end(), 0));
  return folded;
}

FoldedSourceTable::FoldedSourceTable(HierarchyTagging& tagging, Expand expand)
    : tagging_(tagging), expand_(std::move(expand)) {}

int FoldedSourceTable::SourceOf(uint64_t key) {
  auto [found, fresh] = index_.emplace(key, kMaking);
  if (!fresh) return found->second;  // kMaking: a loan listing itself back, which no writer makes
  std::vector<int> tags;
  std::vector<uint64_t> lent;
  expand_(key, &tags, &lent);
  // Each once, ascending: sorted, not searched per entry (a loan CSE kept for
  // every layer lists every layer).
  FoldedSource source;
  std::copy_if(tags.begin(), tags.end(), std::back_inserter(source.tags), [](int tag) { return tag >= 0; });
  for (uint64_t other : lent) {
    if (int index = SourceOf(other); index >= 0) source.sources.push_back(index);
  }
  for (std::vector<int>* list : {&source.tags, &source.sources}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  tagging_.folded_sources.push_back(std::move(source));
  int index = static_cast<int>(tagging_.folded_sources.size()) - 1;
  index_[key] = index;
  return index;
}

int HierarchyTagging::CallCount(int tag) const {
  auto found = calls.find(tag);
  return found == calls.end() || found->second.instance_calls.empty()
             ? 1
             : static_cast<int>(found->second.instance_calls.size());
}

std::vector<int> NumberCalls(const std::vector<RecordedCall>& calls, HierarchyTagging& tagging) {
  std::vector<int> ordinals(calls.size(), -1);
  std::map<int, int> instance_calls;
  for (size_t k = 0; k < calls.size(); ++k) {
    const RecordedCall& call = calls[k];
    int instance_call = instance_calls[call.module]++;
    if (call.tag <= CallTags::kRoot || !call.own_tag) continue;
    TagCalls& tag_calls = tagging.calls[call.tag];
    ordinals[k] = static_cast<int>(tag_calls.instance_calls.size());
    tag_calls.instance_calls.push_back(instance_call);
    // The call of the nearest tagged caller (a filtered module's call is its caller's).
    int caller = call.caller;
    while (caller >= 0 && !calls[caller].own_tag) caller = calls[caller].caller;
    tag_calls.parent_calls.push_back(caller >= 0 && ordinals[caller] >= 0 ? ordinals[caller] : 0);
  }
  return ordinals;
}

std::vector<TagRef> CallRefs::Chain(TagRef ref) const {
  std::vector<TagRef> chain;
  if (ref.tag < 0) ref = {CallTags::kRoot, 0};  // no record: the root's own work
  while (ref.tag >= 0) {
    if (ref.call == TagRef::kEveryCall && tagging_.CallCount(ref.tag) == 1) ref.call = 0;
    chain.push_back(ref);
    int parent = call_tags_.Parent(ref.tag);
    int call = TagRef::kEveryCall;
    auto calls = tagging_.calls.find(ref.tag);
    if (ref.call != TagRef::kEveryCall && calls != tagging_.calls.end() &&
        ref.call < static_cast<int>(calls->second.parent_calls.size())) {
      call = calls->second.parent_calls[ref.call];
    } else if (parent >= 0 && tagging_.CallCount(parent) == 1) {
      call = 0;
    }
    ref = {parent, call};
  }
  return chain;
}

bool CallRefs::Holds(const std::vector<TagRef>& refs, const TagRef& ref) {
  return std::any_of(refs.begin(), refs.end(), [&](const TagRef& other) {
    return other.tag == ref.tag &&
           (other.call == ref.call || other.call == TagRef::kEveryCall || ref.call == TagRef::kEveryCall);
  });
}

std::vector<TagRef> CallRefs::CallsBetween(const std::vector<TagRef>& ends) const {
  std::vector<std::vector<TagRef>> chains;
  for (const TagRef& end : ends) chains.push_back(Chain(end));
  std::vector<TagRef> crossed = ends;
  for (const std::vector<TagRef>& chain : chains) {
    for (const TagRef& ref : chain) {
      bool in_every = std::all_of(chains.begin(), chains.end(),
                                  [&](const std::vector<TagRef>& other) { return Holds(other, ref); });
      if (!in_every && !Holds(crossed, ref)) crossed.push_back(ref);
    }
  }
  std::sort(crossed.begin(), crossed.end());
  return crossed;
}

std::vector<TagRef> CallRefs::RewiredCalls(const TagRef& reader, const TagRef& replaced,
                                           const std::vector<TagRef>& value_refs, bool user_input) const {
  std::vector<TagRef> held_before;
  if (user_input) held_before.push_back({CallTags::kRoot, 0});
  for (const TagRef& ref : value_refs) {
    for (const TagRef& call : Chain(ref)) held_before.push_back(call);
  }
  std::vector<TagRef> replaced_chain = Chain(replaced);
  std::vector<TagRef> rewired;
  for (const TagRef& ref : Chain(reader)) {
    if (Holds(replaced_chain, ref) && !Holds(held_before, ref)) rewired.push_back(ref);
  }
  std::sort(rewired.begin(), rewired.end());
  return rewired;
}

void CallRefs::TakeLoan(const RefLoan& loan, const TagRef& own, bool has_inputs, TaggedNode& tagged) const {
  auto records = std::make_unique<NodeRecords>();
  for (const TagRef& other : loan.shared_with) AddRef(other, &records->shared_with);
  for (int folded : loan.folded_from) AddTag(folded, &records->folded_from);
  for (int source : loan.folded_sources) AddTag(source, &records->folded_sources);
  std::vector<TagRef> spans = {own};
  for (const TagRef& fused : loan.spans) AddRef(fused, &spans);
  if (spans.size() > 1 && !has_inputs) {
    // A fused node a later pass folded into a constant: no value crosses a
    // boundary through it any more (constants are weights), so it only says
    // what the modules' nodes became.
    for (size_t k = 1; k < spans.size(); ++k) AddTag(spans[k].tag, &records->folded_from);
  } else if (spans.size() > 1) {
    int common = spans.front().tag;
    for (const TagRef& span : spans) common = call_tags_.CommonAncestor(common, span.tag);
    tagged.tag = common;
    records->spans = CallsBetween(spans);
    records->rewrite = loan.rewrite;
    std::sort(records->spans.begin(), records->spans.end());
  }
  // Not shared with itself: its own call, or its own tag when the calls are unknown.
  std::vector<TagRef>& shared = records->shared_with;
  shared.erase(std::remove_if(shared.begin(), shared.end(),
                              [&](const TagRef& ref) {
                                return ref.tag == tagged.tag &&
                                       (ref.call == own.call || ref.call == TagRef::kEveryCall ||
                                        own.call == TagRef::kEveryCall);
                              }),
               shared.end());
  std::sort(shared.begin(), shared.end());
  if (!records->empty()) tagged.records = std::move(records);
}

void CallRefs::KeepReadingCalls(const std::vector<TagRef>& reader_refs, TaggedNode& tagged) const {
  if (!tagged.records || tagged.records->shared_with.empty()) return;
  std::unordered_set<int64_t> reading;  // a call some reader ran in (Key), or every call of a tag
  std::unordered_set<int> reading_tags;
  for (const TagRef& ref : reader_refs) {
    for (const TagRef& call : Chain(ref)) {
      reading.insert(Key(call));
      reading_tags.insert(call.tag);
    }
  }
  std::vector<TagRef>& shared = tagged.records->shared_with;
  shared.erase(std::remove_if(shared.begin(), shared.end(),
                              [&](const TagRef& ref) {
                                if (ref.call == TagRef::kEveryCall) return reading_tags.count(ref.tag) == 0;
                                return reading.count(Key(ref)) == 0 &&
                                       reading.count(Key({ref.tag, TagRef::kEveryCall})) == 0;
                              }),
               shared.end());
  if (tagged.records->empty()) tagged.records.reset();
}

void AddRewrite(RewriteKind kind, const std::string& pass, std::vector<TagRef> refs, uint64_t initializer,
                const CallRefs& call_refs, HierarchyTagging& tagging, std::vector<int> sources) {
  if (kind == RewriteKind::kRewired) {
    if (!refs.empty()) tagging.rewrites.push_back({kind, pass, std::move(refs), initializer, {}});
    return;
  }
  std::vector<TagRef> listed;
  for (const TagRef& ref : refs) AddRef(ref, &listed);
  if (kind == RewriteKind::kRemoved && listed.size() < 2) return;
  if (kind == RewriteKind::kFolded && listed.empty() && sources.empty()) return;
  if (kind == RewriteKind::kRemoved) listed = call_refs.CallsBetween(listed);
  std::sort(listed.begin(), listed.end());
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  tagging.rewrites.push_back({kind, pass, std::move(listed), initializer, std::move(sources)});
}

std::vector<std::string> CallRefTexts(const std::vector<TagRef>& refs, const HierarchyTagging& tagging,
                                      CallTags& call_tags) {
  std::vector<std::string> texts;
  for (const TagRef& ref : refs) {
    bool one_call = ref.call != TagRef::kEveryCall && tagging.CallCount(ref.tag) > 1;
    texts.push_back(FormatCallRef(call_tags.Tag(ref.tag), one_call ? std::optional<int64_t>(ref.call) : std::nullopt));
  }
  // Sorted, each once (a constant every layer reads lists hundreds: no search per text).
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  return texts;
}

NodeEntries DescribeNode(const TaggedNode& tagged, const HierarchyTagging& tagging, CallTags& call_tags) {
  NodeEntries entries;
  entries.tag = &call_tags.Tag(tagged.tag);
  entries.shared_with = CallRefTexts(tagged.shared_with(), tagging, call_tags);
  if (tagging.CallCount(tagged.tag) > 1) entries.more.emplace_back(kCallKey, std::to_string(tagged.call));
  std::vector<std::string> spans = CallRefTexts(tagged.spans(), tagging, call_tags);
  if (spans.size() > 1) {
    entries.more.emplace_back(kSpansKey, WriteStringList(spans));
    entries.more.emplace_back(kRewriteKey, tagged.rewrite());
    entries.spans = std::move(spans);
  }
  return entries;
}

std::vector<ModelMetadataEntry> DescribeModel(
    const HierarchyTagging& tagging, CallTags& call_tags, const ModuleTable& modules,
    const std::function<std::string(size_t)>& node_name,
    const std::function<std::optional<std::string>(size_t)>& constant_name,
    const std::function<std::optional<std::string>(uint64_t)>& initializer_name) {
  std::vector<RewriteEntry> rewrites;
  for (size_t k = 0; k < tagging.nodes.size(); ++k) {
    const TaggedNode& tagged = tagging.nodes[k];
    if (tagged.spans().size() < 2) continue;
    std::vector<std::string> spans = CallRefTexts(tagged.spans(), tagging, call_tags);
    if (spans.size() > 1) rewrites.push_back({tagged.rewrite(), "fused", std::move(spans), node_name(k)});
  }
  // What became of a module that ran but left no node: the constants and
  // initializers its computation was folded into (a module that kept nodes
  // lists none: folding part of a computation is the exporter's daily work).
  std::vector<uint8_t> with_nodes(call_tags.size(), 0);  // per call tag: it or a callee has a node
  for (const TaggedNode& tagged : tagging.nodes) {
    for (int id = tagged.tag; id >= 0 && !with_nodes[id]; id = call_tags.Parent(id)) with_nodes[id] = 1;
  }
  std::map<int, std::vector<std::string>> folded_into;
  auto add_folded = [&](int tag, const std::string& name) {
    if (with_nodes.at(tag)) return;
    std::vector<std::string>& names = folded_into[tag];
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  // Per folded source, the tags without nodes it stands for, each source
  // expanded once (a source lists only sources made before it).
  std::vector<std::vector<int>> without_nodes(tagging.folded_sources.size());
  for (size_t s = 0; s < tagging.folded_sources.size(); ++s) {
    std::vector<int>& tags = without_nodes[s];
    for (int tag : tagging.folded_sources[s].tags) {
      if (!with_nodes.at(tag)) tags.push_back(tag);
    }
    for (int source : tagging.folded_sources[s].sources) {
      tags.insert(tags.end(), without_nodes.at(source).begin(), without_nodes.at(source).end());
    }
    std::sort(tags.begin(), tags.end());
    tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  }
  auto add_folded_sources = [&](const std::vector<int>& sources, const std::string& name) {
    for (int source : sources) {
      for (int tag : without_nodes.at(source)) add_folded(tag, name);
    }
  };
  for (size_t k = 0; k < tagging.nodes.size(); ++k) {
    const TaggedNode& tagged = tagging.nodes[k];
    if (!tagged.records || (tagged.records->folded_from.empty() && tagged.records->folded_sources.empty())) continue;
    std::optional<std::string> name = constant_name(k);
    if (!name) continue;
    for (int tag : tagged.folded_from()) add_folded(tag, *name);
    add_folded_sources(tagged.records->folded_sources, *name);
  }
  std::set<std::tuple<std::string, RewriteKind, std::vector<std::string>>> listed_rewrites;
  for (const TagRewrite& rewrite : tagging.rewrites) {
    if (rewrite.kind == RewriteKind::kFolded) {
      std::optional<std::string> name = initializer_name(rewrite.initializer);
      if (!name) continue;  // removed since (deduplicated, unused)
      for (const TagRef& ref : rewrite.refs) add_folded(ref.tag, *name);
      add_folded_sources(rewrite.sources, *name);
      continue;
    }
    std::vector<std::string> calls = CallRefTexts(rewrite.refs, tagging, call_tags);
    // Calls of one tag that ran only once are told apart no more.
    if (rewrite.kind == RewriteKind::kRemoved && calls.size() < 2) continue;
    // Each (pass, kind, calls) once, in the order first met: a set, not a
    // search of the list per record (a model rewritten in every layer lists
    // thousands).
    if (listed_rewrites.emplace(rewrite.pass, rewrite.kind, calls).second) {
      rewrites.push_back({rewrite.pass, RewriteKindName(rewrite.kind), std::move(calls), ""});
    }
  }

  std::map<std::string, int> listed;
  for (int used : tagging.UsedTags()) {
    for (int id = used; id >= 0; id = call_tags.Parent(id)) {
      if (!listed.emplace(call_tags.Tag(id), id).second) break;
    }
  }
  std::vector<TableEntry> table;
  for (const auto& [tag, id] : listed) {
    const ModuleRecord& record = modules.at(call_tags.Module(id));
    TableEntry entry{tag, record.path, record.class_name, {}, {}, tagging.never_ran.count(id) == 0, {}};
    auto calls = tagging.calls.find(id);
    if (calls != tagging.calls.end()) {
      entry.calls.assign(calls->second.instance_calls.begin(), calls->second.instance_calls.end());
      entry.parent_calls.assign(calls->second.parent_calls.begin(), calls->second.parent_calls.end());
    }
    auto folded = folded_into.find(id);
    if (folded != folded_into.end()) entry.folded_into = folded->second;
    table.push_back(std::move(entry));
  }
  std::vector<ModelMetadataEntry> entries;
  entries.push_back({std::string(kModuleTableKey), WriteModuleTable(table)});
  if (!rewrites.empty()) entries.push_back({std::string(kRewritesKey), WriteRewrites(rewrites)});
  entries.push_back({std::string(kFormatVersionKey), std::string(kFormatVersion)});
  return entries;
}

}  // namespace hiertag
