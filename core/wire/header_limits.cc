#include "core/wire/header_limits.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace farcall {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// CallHeader's field numbers (proto/farcall/v1/farcall.proto).
constexpr int kHandler = 1, kPlatforms = 2, kArgs = 3, kResults = 4, kAliases = 5, kAttributes = 8,
              kCallId = 9, kShm = 10;
// ShmTensors' fields: region, arg_offsets, result_offsets, arg_regions,
// result_regions.
constexpr int kShmRegion = 1, kShmArgOffsets = 2, kShmResultOffsets = 3, kShmArgRegions = 4,
              kShmResultRegions = 5;
// TensorSpec.dims, the map entry's key and value, Attribute.str.
constexpr int kDims = 2, kEntryKey = 1, kEntryValue = 2, kAttrStr = 4;

absl::Status Over(absl::string_view what, int64_t limit, absl::string_view flag) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, ", over the limit of ", limit, " (--", flag, ")."));
}

// Reads a length-delimited field's length; false when it cannot.
bool ReadLength(CodedInputStream& in, uint32_t tag, uint32_t* len) {
  return WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
         in.ReadVarint32(len);
}

// How a repeated varint field's element(s) were read by CountVarints.
enum class Varints { kCounted, kOtherWireType, kMalformed };

// Counts the elements behind `tag` (just read) of a repeated varint field,
// packed or not, into `*count`. Another wire type is left for the caller to
// skip, as the parser skips it (as an unknown field).
Varints CountVarints(CodedInputStream& in, uint32_t tag, int64_t* count) {
  const auto wire = WireFormatLite::GetTagWireType(tag);
  uint64_t v;
  if (wire == WireFormatLite::WIRETYPE_VARINT) {
    if (!in.ReadVarint64(&v)) return Varints::kMalformed;
    ++*count;
    return Varints::kCounted;
  }
  if (wire != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return Varints::kOtherWireType;
  uint32_t len;
  if (!in.ReadVarint32(&len)) return Varints::kMalformed;
  CodedInputStream::Limit lim = in.PushLimit(static_cast<int>(len));
  while (in.BytesUntilLimit() > 0) {
    if (!in.ReadVarint64(&v)) return Varints::kMalformed;
    ++*count;
  }
  in.PopLimit(lim);
  return Varints::kCounted;
}

// The rank a TensorSpec's bytes declare: its dims, packed or not.
bool CountRank(CodedInputStream& in, int64_t* rank) {
  while (uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kDims) {
      const Varints r = CountVarints(in, tag, rank);
      if (r == Varints::kMalformed) return false;
      if (r == Varints::kCounted) continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return false;
  }
  return true;
}

// An attribute map entry's key and string value lengths.
bool EntrySizes(CodedInputStream& in, uint32_t* key, uint32_t* str) {
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    uint32_t len;
    if (field == kEntryKey && ReadLength(in, tag, &len)) {
      *key = len;
      if (!in.Skip(static_cast<int>(len))) return false;
    } else if (field == kEntryValue && ReadLength(in, tag, &len)) {
      CodedInputStream::Limit lim = in.PushLimit(static_cast<int>(len));
      while (uint32_t t = in.ReadTag()) {
        uint32_t n;
        if (WireFormatLite::GetTagFieldNumber(t) == kAttrStr && ReadLength(in, t, &n)) {
          *str = n;
          if (!in.Skip(static_cast<int>(n))) return false;
        } else if (!WireFormatLite::SkipField(&in, t)) {
          return false;
        }
      }
      in.PopLimit(lim);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  return true;
}

// What a ShmTensors' bytes declare: how many of each list (counted across
// every occurrence, as the parser merges them), and the longest region name.
struct ShmCounts {
  int64_t lists[6] = {};  // by field number
  uint32_t longest_name = 0;
};

bool CountShm(CodedInputStream& in, ShmCounts* c) {
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (field == kShmArgOffsets || field == kShmResultOffsets) {
      const Varints r = CountVarints(in, tag, &c->lists[field]);
      if (r == Varints::kMalformed) return false;
      if (r == Varints::kCounted) continue;
    }
    if ((field == kShmRegion || field == kShmArgRegions || field == kShmResultRegions) &&
        wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t len;
      if (!in.ReadVarint32(&len)) return false;
      c->longest_name = std::max(c->longest_name, len);
      ++c->lists[field];
      if (!in.Skip(static_cast<int>(len))) return false;
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckHeaderLimits(absl::string_view header, const HeaderLimits& limits) {
  if (static_cast<int64_t>(header.size()) > limits.max_header_bytes) {
    return Over(absl::StrCat("the call header is ", header.size(), " bytes"),
                limits.max_header_bytes, "max_header_bytes");
  }
  CodedInputStream in(reinterpret_cast<const uint8_t*>(header.data()),
                      static_cast<int>(header.size()));
  int64_t args = 0, results = 0, attributes = 0, aliases = 0;
  ShmCounts shm;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    uint32_t len = 0;
    // Other fields, and these with an unexpected wire type, are skipped, as
    // the parser skips them (as unknown fields). Bytes that cannot be
    // skipped do not parse: the parser refuses them.
    const bool wanted = field == kHandler || field == kPlatforms || field == kArgs ||
                        field == kResults || field == kAttributes || field == kAliases ||
                        field == kCallId || field == kShm;
    if (!wanted ||
        WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return absl::OkStatus();
      continue;
    }
    if (!in.ReadVarint32(&len)) return absl::OkStatus();
    CodedInputStream::Limit lim = in.PushLimit(static_cast<int>(len));
    if (field == kHandler || field == kPlatforms) {
      if (len > limits.max_name_bytes) {
        return Over(absl::StrCat(field == kHandler ? "the handler" : "a platform", " name is ", len,
                                 " bytes"),
                    limits.max_name_bytes, "max_name_bytes");
      }
    } else if (field == kCallId) {
      if (len > limits.max_call_id_bytes) {
        return Over(absl::StrCat("the call_id is ", len, " bytes"), limits.max_call_id_bytes,
                    "max_call_id_bytes");
      }
    } else if (field == kAliases) {
      if (++aliases > limits.max_tensors) {
        return Over("the call header has more input_output_aliases entries", limits.max_tensors,
                    "max_tensors");
      }
    } else if (field == kShm) {
      if (!CountShm(in, &shm)) return absl::OkStatus();
      for (int f = kShmArgOffsets; f <= kShmResultRegions; ++f) {
        if (shm.lists[f] > limits.max_tensors) {
          return Over("the call's shm lists more offsets or regions", limits.max_tensors,
                      "max_tensors");
        }
      }
      if (shm.longest_name > limits.max_name_bytes) {
        return Over(absl::StrCat("a shared-memory region name is ", shm.longest_name, " bytes"),
                    limits.max_name_bytes, "max_name_bytes");
      }
    } else if (field == kArgs || field == kResults) {
      int64_t& n = field == kArgs ? args : results;
      if (args + results + 1 > limits.max_tensors) {
        return Over("the call header declares more tensors (args plus results)", limits.max_tensors,
                    "max_tensors");
      }
      int64_t rank = 0;
      if (!CountRank(in, &rank)) return absl::OkStatus();
      if (rank > limits.max_rank) {
        return Over(absl::StrCat(field == kArgs ? "args[" : "results[", n, "] has rank ", rank),
                    limits.max_rank, "max_rank");
      }
      ++n;
    } else {  // an attribute
      if (++attributes > limits.max_attributes) {
        return Over("the call header has more attributes", limits.max_attributes, "max_attributes");
      }
      uint32_t key = 0, str = 0;
      if (!EntrySizes(in, &key, &str)) return absl::OkStatus();
      if (key > limits.max_name_bytes) {
        return Over(absl::StrCat("an attribute name is ", key, " bytes"), limits.max_name_bytes,
                    "max_name_bytes");
      }
      if (str > limits.max_string_bytes) {
        return Over(absl::StrCat("a string attribute is ", str, " bytes"), limits.max_string_bytes,
                    "max_string_bytes");
      }
    }
    // Skip what the field holds beyond what was read.
    if (!in.Skip(in.BytesUntilLimit())) return absl::OkStatus();
    in.PopLimit(lim);
  }
  return absl::OkStatus();
}

absl::Status CheckNameLimits(absl::string_view handler, absl::string_view platform,
                             const HeaderLimits& limits) {
  if (static_cast<int64_t>(handler.size()) > limits.max_name_bytes) {
    return Over(absl::StrCat("the handler name is ", handler.size(), " bytes"),
                limits.max_name_bytes, "max_name_bytes");
  }
  if (static_cast<int64_t>(platform.size()) > limits.max_name_bytes) {
    return Over(absl::StrCat("a platform name is ", platform.size(), " bytes"),
                limits.max_name_bytes, "max_name_bytes");
  }
  return absl::OkStatus();
}

absl::Status ValidateHeaderLimits(const HeaderLimits& l) {
  for (auto [value, flag] :
       {std::pair<int64_t, const char*>{l.max_header_bytes, "max_header_bytes"},
        {l.max_tensors, "max_tensors"},
        {l.max_rank, "max_rank"},
        {l.max_attributes, "max_attributes"},
        {l.max_name_bytes, "max_name_bytes"},
        {l.max_string_bytes, "max_string_bytes"},
        {l.max_call_id_bytes, "max_call_id_bytes"}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be positive; got ", value, "."));
    }
  }
  return absl::OkStatus();
}

}  // namespace farcall
