#pragma once
// Strict reading of one JSON object: typed getters that name the file and JSON path on error,
// range checks, and finish() rejecting every key nobody read (a key that nothing reads is a bug
// report waiting to happen).
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/io/input_error.hpp"
#include "tools/io/units_parse.hpp"

namespace scaleout {

using Json = nlohmann::json;

class JsonReader {
 public:
  JsonReader(const Json& j, std::string file, std::string path);

  bool has(const std::string& key) const { return j_.contains(key); }
  const Json& raw(const std::string& key);

  std::int64_t integer(const std::string& key, std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                       std::int64_t max = std::numeric_limits<std::int64_t>::max());
  std::int64_t integer_or(const std::string& key, std::int64_t fallback,
                          std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                          std::int64_t max = std::numeric_limits<std::int64_t>::max());
  double number(const std::string& key, double min = -1e308, double max = 1e308);
  double number_or(const std::string& key, double fallback, double min = -1e308, double max = 1e308);
  bool boolean(const std::string& key);
  bool boolean_or(const std::string& key, bool fallback);
  std::string string(const std::string& key);
  std::string string_or(const std::string& key, const std::string& fallback);
  std::string choice(const std::string& key, const std::vector<std::string>& options);
  std::string choice_or(const std::string& key, const std::vector<std::string>& options, const std::string& fallback);
  double quantity(const std::string& key, QuantityKind kind);
  double quantity_or(const std::string& key, QuantityKind kind, double fallback);
  std::vector<std::string> strings_or(const std::string& key);
  JsonReader object(const std::string& key);
  // Marks a key as read without interpreting it (documentation fields).
  void ignore(const std::string& key);
  void finish() const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  std::string path(const std::string& key) const { return path_ + "/" + key; }
  const std::string& file() const { return file_; }

 private:
  const Json& get(const std::string& key);
  const Json& j_;
  std::string file_, path_;
  std::set<std::string> read_;
};

// Reads a JSON file; a syntax error names the file, line and column.
Json load_json_file(const std::string& file);
// Whether `file` names a regular file; a name the system refuses (too long, a component that is
// not a directory, no permission) is not one, and never throws.
bool is_file(const std::string& file) noexcept;
std::string describe(const Json& j);

}  // namespace scaleout
