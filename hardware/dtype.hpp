#pragma once
// Numeric formats a kernel can run in, with their storage size.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace scaleout {

enum class Dtype : std::uint8_t { fp64, fp32, tf32, fp16, bf16, fp8, int8, nf4 };
inline constexpr std::size_t kDtypeCount = 8;
inline constexpr std::array<std::string_view, kDtypeCount> kDtypeNames = {"fp64", "fp32", "tf32", "fp16",
                                                                          "bf16", "fp8",  "int8", "nf4"};

constexpr std::string_view to_string(Dtype d) { return kDtypeNames[static_cast<std::size_t>(d)]; }
std::optional<Dtype> parse_dtype(std::string_view s);

// Bytes per element as stored (tf32 is stored as fp32; nf4 packs two weights per byte).
constexpr double dtype_bytes(Dtype d) {
  switch (d) {
    case Dtype::fp64: return 8;
    case Dtype::fp32: case Dtype::tf32: return 4;
    case Dtype::fp16: case Dtype::bf16: return 2;
    case Dtype::fp8: case Dtype::int8: return 1;
    case Dtype::nf4: return 0.5;
  }
  return 4;
}

}  // namespace scaleout
