#include "hardware/dtype.hpp"

namespace scaleout {

std::optional<Dtype> parse_dtype(std::string_view s) {
  for (std::size_t i = 0; i < kDtypeCount; ++i)
    if (kDtypeNames[i] == s) return static_cast<Dtype>(i);
  return std::nullopt;
}

}  // namespace scaleout
