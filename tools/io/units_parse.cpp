#include "tools/io/units_parse.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace scaleout {
namespace {

struct Unit {
  std::string_view name;
  double factor;
};

constexpr std::array kBytes = {Unit{"B", 1}, Unit{"KB", 1e3}, Unit{"MB", 1e6}, Unit{"GB", 1e9}, Unit{"TB", 1e12},
                               Unit{"KiB", 1024.0}, Unit{"MiB", 1048576.0}, Unit{"GiB", 1073741824.0},
                               Unit{"TiB", 1099511627776.0}};
constexpr std::array kBandwidth = {Unit{"B/s", 1},     Unit{"KB/s", 1e3},  Unit{"MB/s", 1e6},  Unit{"GB/s", 1e9},
                                   Unit{"TB/s", 1e12}, Unit{"b/s", 0.125}, Unit{"Kb/s", 125.0}, Unit{"Mb/s", 1.25e5},
                                   Unit{"Gb/s", 1.25e8}, Unit{"Tb/s", 1.25e11}, Unit{"GiB/s", 1073741824.0},
                                   Unit{"MiB/s", 1048576.0}};
constexpr std::array kFlops = {Unit{"FLOPS", 1}, Unit{"GFLOPS", 1e9}, Unit{"TFLOPS", 1e12}, Unit{"PFLOPS", 1e15},
                               Unit{"TOPS", 1e12}, Unit{"POPS", 1e15}, Unit{"GOPS", 1e9}};
constexpr std::array kTime = {Unit{"s", 1}, Unit{"ms", 1e-3}, Unit{"us", 1e-6}, Unit{"ns", 1e-9}, Unit{"ps", 1e-12},
                              Unit{"min", 60}, Unit{"h", 3600}, Unit{"d", 86400}};
constexpr std::array kFreq = {Unit{"Hz", 1}, Unit{"kHz", 1e3}, Unit{"MHz", 1e6}, Unit{"GHz", 1e9}};
constexpr std::array kPower = {Unit{"W", 1}, Unit{"kW", 1e3}};

template <std::size_t N>
std::pair<bool, double> lookup(const std::array<Unit, N>& units, std::string_view u) {
  for (const Unit& x : units)
    if (x.name == u) return {true, x.factor};
  return {false, 0};
}

template <std::size_t N>
std::string names(const std::array<Unit, N>& units) {
  std::string s;
  for (const Unit& x : units) s += (s.empty() ? "" : ", ") + std::string(x.name);
  return s;
}

}  // namespace

std::string quantity_help(QuantityKind kind) {
  switch (kind) {
    case QuantityKind::bytes: return "a size like \"80 GB\" (" + names(kBytes) + ")";
    case QuantityKind::bandwidth: return "a bandwidth like \"900 GB/s\" or \"400 Gb/s\" (" + names(kBandwidth) + ")";
    case QuantityKind::flops: return "a rate like \"989 TFLOPS\" (" + names(kFlops) + ")";
    case QuantityKind::time_s: return "a duration like \"2 us\" (" + names(kTime) + ")";
    case QuantityKind::frequency: return "a frequency like \"1980 MHz\" (" + names(kFreq) + ")";
    case QuantityKind::power: return "a power like \"700 W\" (" + names(kPower) + ")";
  }
  return "a quantity";
}

double parse_quantity(std::string_view text, QuantityKind kind) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t j = i;
  while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.' || text[j] == 'e' ||
                             text[j] == 'E' || text[j] == '+' || text[j] == '-'))
    ++j;
  // A unit starting with 'e'/'E' cannot occur in our tables, so eating exponent letters is safe
  // only if a digit follows; back off otherwise.
  while (j > i && (text[j - 1] == 'e' || text[j - 1] == 'E' || text[j - 1] == '+' || text[j - 1] == '-')) --j;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + j, value);
  if (ec != std::errc() || ptr != text.data() + j || j == i)
    throw std::invalid_argument("expected " + quantity_help(kind) + ", got \"" + std::string(text) + "\"");
  std::size_t k = j;
  while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
  std::string_view unit = text.substr(k);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.remove_suffix(1);
  std::pair<bool, double> f{false, 0};
  switch (kind) {
    case QuantityKind::bytes: f = lookup(kBytes, unit); break;
    case QuantityKind::bandwidth: f = lookup(kBandwidth, unit); break;
    case QuantityKind::flops: f = lookup(kFlops, unit); break;
    case QuantityKind::time_s: f = lookup(kTime, unit); break;
    case QuantityKind::frequency: f = lookup(kFreq, unit); break;
    case QuantityKind::power: f = lookup(kPower, unit); break;
  }
  if (!f.first)
    throw std::invalid_argument("unknown unit \"" + std::string(unit) + "\": expected " + quantity_help(kind));
  const double v = value * f.second;
  if (!std::isfinite(v) || v < 0)
    throw std::invalid_argument("expected a finite, non-negative " + quantity_help(kind) + ", got \"" +
                                std::string(text) + "\"");
  return v;
}

}  // namespace scaleout
