// Fuzz target: the tag grammar and the names hiertag reads (tags, call
// references, torch scope names, TorchScript type names) on any text.
// Properties: a tag that parses formats back to one that parses to the same
// segments; a listed tag's parent is its ancestor; a call reference of a valid
// tag survives formatting and parsing; escaping is undone by parsing, and its
// result, a canonical tag and printable text are valid UTF-8 without a control
// character.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hiertag/core/export/scope_names.h"
#include "hiertag/core/format/printable.h"
#include "hiertag/core/format/tag_format.h"

namespace hiertag::fuzz {
namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz: tag grammar property broken: %s\n", what);
  std::abort();
}

bool SameSegments(const std::vector<TagSegment>& a, const std::vector<TagSegment>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].class_name != b[i].class_name || a[i].index != b[i].index || a[i].qualifier != b[i].qualifier ||
        a[i].absolute != b[i].absolute) {
      return false;
    }
  }
  return true;
}

// Valid UTF-8 without a control character: one printable line.
bool IsPrintableLine(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t length = Utf8SequenceLength(text, i);
    if (length == 0 || IsControlCharacter(text.substr(i, length))) return false;
    i += length;
  }
  return true;
}

void CheckTag(std::string_view text) {
  std::string error;
  std::optional<std::vector<TagSegment>> segments = ParseTag(text, &error);
  if (!segments) {
    Require(!error.empty(), "a refused tag has a reason");
    return;
  }
  Require(!segments->empty(), "a tag has a segment");
  std::string formatted;
  for (const TagSegment& segment : *segments) formatted += "/" + FormatSegment(segment);
  std::optional<std::vector<TagSegment>> again = ParseTag(formatted, &error);
  Require(again && SameSegments(*segments, *again), "a formatted tag parses to the same segments");
  Require(IsPrintableLine(formatted), "a formatted tag is one printable line");
  Require(CanonicalTag(text) == formatted && CanonicalTag(formatted) == formatted, "the canonical tag is a fixpoint");
  std::string_view parent = ParentTag(text);
  Require(parent.empty() == (segments->size() == 1), "only a root tag has no parent");
  if (!parent.empty()) {
    Require(IsTagAncestorOrSelf(parent, text), "the parent is an ancestor");
    Require(!IsTagAncestorOrSelf(text, parent), "a tag is no ancestor of its parent");
    Require(ParseTag(parent).has_value(), "the parent of a tag parses");
  }
  for (std::optional<int64_t> call : {std::optional<int64_t>{}, std::optional<int64_t>{7}}) {
    std::optional<CallRef> ref = ParseCallRef(FormatCallRef(text, call));
    Require(ref && ref->tag == text && ref->call == call, "a call reference survives formatting and parsing");
  }
}

void CheckEscapes(std::string_view raw) {
  if (raw.empty()) return;
  std::string error;
  std::optional<std::vector<TagSegment>> qualified = ParseTag("/C[" + EscapeQualifier(raw) + "]", &error);
  Require(qualified && qualified->size() == 1 && qualified->front().qualifier == std::string(raw) &&
              !qualified->front().absolute,
          "an escaped qualifier parses back to itself");
  std::optional<std::vector<TagSegment>> named = ParseTag("/" + EscapeClassName(raw), &error);
  Require(named && named->size() == 1 && named->front().class_name == raw, "an escaped class name parses back");
  Require(IsPrintableLine(EscapeQualifier(raw)) && IsPrintableLine(EscapeClassName(raw)),
          "escaped names are printable lines");
  Require(IsPrintableLine(Printable(raw)), "printable text is a printable line");
}

}  // namespace
}  // namespace hiertag::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hiertag;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::CheckTag(text);
  fuzz::CheckEscapes(text);
  ParseCallRef(text);
  IsTagAncestorOrSelf(text.substr(0, size / 2), text.substr(size / 2));
  ParseScopeName(text);
  UnmangleTorchScriptTypeName(text);
  return 0;
}
