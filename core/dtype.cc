#include "core/dtype.h"
#include "absl/strings/string_view.h"

#include <array>

namespace farcall {
namespace {

struct DTypeInfo {
  DType dtype;
  int64_t item_size;
  absl::string_view name;
  DTypeKind kind;
};

constexpr std::array<DTypeInfo, 20> kInfo = {{
    {DType::kPred, 1, "bool", DTypeKind::kBool},
    {DType::kS8, 1, "int8", DTypeKind::kSigned},
    {DType::kS16, 2, "int16", DTypeKind::kSigned},
    {DType::kS32, 4, "int32", DTypeKind::kSigned},
    {DType::kS64, 8, "int64", DTypeKind::kSigned},
    {DType::kU8, 1, "uint8", DTypeKind::kUnsigned},
    {DType::kU16, 2, "uint16", DTypeKind::kUnsigned},
    {DType::kU32, 4, "uint32", DTypeKind::kUnsigned},
    {DType::kU64, 8, "uint64", DTypeKind::kUnsigned},
    {DType::kF16, 2, "float16", DTypeKind::kFloat},
    {DType::kF32, 4, "float32", DTypeKind::kFloat},
    {DType::kF64, 8, "float64", DTypeKind::kFloat},
    {DType::kC64, 8, "complex64", DTypeKind::kComplex},
    {DType::kBF16, 2, "bfloat16", DTypeKind::kFloat},
    {DType::kC128, 16, "complex128", DTypeKind::kComplex},
    {DType::kF8E5M2, 1, "float8_e5m2", DTypeKind::kFloat},
    {DType::kF8E4M3FN, 1, "float8_e4m3fn", DTypeKind::kFloat},
    {DType::kF8E4M3B11FNUZ, 1, "float8_e4m3b11fnuz", DTypeKind::kFloat},
    {DType::kF8E5M2FNUZ, 1, "float8_e5m2fnuz", DTypeKind::kFloat},
    {DType::kF8E4M3FNUZ, 1, "float8_e4m3fnuz", DTypeKind::kFloat},
}};

const DTypeInfo* Find(DType d) {
  for (const DTypeInfo& i : kInfo)
    if (i.dtype == d) return &i;
  return nullptr;
}

}  // namespace

const std::vector<DType>& AllDTypes() {
  static const std::vector<DType>* all = [] {
    auto* v = new std::vector<DType>();
    for (const DTypeInfo& i : kInfo) v->push_back(i.dtype);
    return v;
  }();
  return *all;
}

std::optional<DType> DTypeFromNumber(int32_t n) {
  const DTypeInfo* i = Find(static_cast<DType>(n));
  if (i == nullptr) return std::nullopt;
  return i->dtype;
}

int64_t ItemSize(DType d) {
  const DTypeInfo* i = Find(d);
  return i ? i->item_size : 0;
}

absl::string_view DTypeName(DType d) {
  const DTypeInfo* i = Find(d);
  return i ? i->name : "invalid";
}

std::optional<DType> DTypeFromName(absl::string_view name) {
  for (const DTypeInfo& i : kInfo)
    if (i.name == name) return i.dtype;
  return std::nullopt;
}

DTypeKind KindOf(DType d) {
  const DTypeInfo* i = Find(d);
  return i ? i->kind : DTypeKind::kBool;
}

}  // namespace farcall
