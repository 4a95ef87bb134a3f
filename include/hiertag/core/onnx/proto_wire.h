// Protobuf wire format: just enough to walk and write ONNX messages without
// generated classes (torch's wheel builds ONNX in as onnx_torch and ships no
// headers for it; the tool must run without torch). Header-only, no dependency.
//
// A Reader yields each field of a message in order with its whole byte span,
// so a caller can copy the fields it does not change as raw bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hiertag::wire {

inline constexpr uint32_t kVarint = 0;
inline constexpr uint32_t kFixed64 = 1;
inline constexpr uint32_t kLengthDelimited = 2;
inline constexpr uint32_t kFixed32 = 5;

// One field of a message: number, wire type, whole byte span, and either the
// payload (length-delimited) or the value (varint).
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  std::string_view raw;
  std::string_view payload;
  uint64_t varint = 0;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return position_ >= bytes_.size(); }

  // Reads one bare varint (an element of a packed repeated field); false on
  // malformed or truncated bytes.
  bool NextVarint(uint64_t* value) { return ReadVarint(value); }

  // Reads the next field; false on malformed or truncated bytes.
  bool Next(Field* field) {
    size_t start = position_;
    uint64_t key = 0;
    if (!ReadVarint(&key)) return false;
    field->number = static_cast<uint32_t>(key >> 3);
    field->wire_type = static_cast<uint32_t>(key & 7);
    field->payload = {};
    field->varint = 0;
    if (field->number == 0) return false;
    switch (field->wire_type) {
      case kVarint:
        if (!ReadVarint(&field->varint)) return false;
        break;
      case kFixed64:
        if (bytes_.size() - position_ < 8) return false;
        position_ += 8;
        break;
      case kFixed32:
        if (bytes_.size() - position_ < 4) return false;
        position_ += 4;
        break;
      case kLengthDelimited: {
        uint64_t length = 0;
        if (!ReadVarint(&length) || length > bytes_.size() - position_) return false;
        field->payload = bytes_.substr(position_, length);
        position_ += length;
        break;
      }
      default:
        return false;
    }
    field->raw = bytes_.substr(start, position_ - start);
    return true;
  }

 private:
  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= bytes_.size()) return false;
      uint8_t byte = static_cast<uint8_t>(bytes_[position_++]);
      *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  std::string_view bytes_;
  size_t position_ = 0;
};

// The Append functions write to a std::string or a vector of char (any
// allocator: the plan's arena has no std::pmr::string under libstdc++'s old
// string ABI, which torch 2.4-2.8's wheels use).
template <typename String>
void AppendVarint(String* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// How many bytes AppendVarint writes for `value`.
inline size_t VarintSize(uint64_t value) {
  size_t size = 1;
  for (; value >= 0x80; value >>= 7) ++size;
  return size;
}

// The key and length of length-delimited field `field` of `length` bytes: what
// comes before its payload.
template <typename String>
void AppendLengthDelimitedHeader(String* out, uint32_t field, uint64_t length) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | kLengthDelimited);
  AppendVarint(out, length);
}

// How many bytes length-delimited field `field` of `length` bytes takes, header and payload.
inline uint64_t LengthDelimitedSize(uint32_t field, uint64_t length) {
  return VarintSize((static_cast<uint64_t>(field) << 3) | kLengthDelimited) + VarintSize(length) + length;
}

template <typename String>
void AppendLengthDelimited(String* out, uint32_t field, std::string_view payload) {
  AppendLengthDelimitedHeader(out, field, payload.size());
  out->insert(out->end(), payload.begin(), payload.end());
}

}  // namespace hiertag::wire
