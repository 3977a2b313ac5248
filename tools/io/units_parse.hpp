#pragma once
// Quantities with units, as scenario and zoo files write them: "80 GB", "81559 MiB", "3.35 TB/s",
// "400 Gb/s", "989 TFLOPS", "2 us", "1980 MHz", "700 W". GB/s is bytes per second (1e9), Gb/s is
// bits per second; KiB/MiB/GiB are powers of two, KB/MB/GB/TB powers of ten.
#include <string>
#include <string_view>

namespace scaleout {

enum class QuantityKind { bytes, bandwidth, flops, time_s, frequency, power };

// Throws std::invalid_argument with a message saying what was expected.
double parse_quantity(std::string_view text, QuantityKind kind);
std::string quantity_help(QuantityKind kind);

}  // namespace scaleout
