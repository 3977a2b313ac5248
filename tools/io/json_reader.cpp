#include "tools/io/json_reader.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace scaleout {

std::string describe(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

JsonReader::JsonReader(const Json& j, std::string file, std::string path)
    : j_(j), file_(std::move(file)), path_(std::move(path)) {
  if (!j_.is_object()) throw InputError(file_, path_, "expected an object, got " + describe(j_));
}

void JsonReader::fail(const std::string& key, const std::string& what) const {
  throw InputError(file_, key.empty() ? path_ : path(key), what);
}

const Json& JsonReader::get(const std::string& key) {
  read_.insert(key);
  if (!j_.contains(key)) fail(key, "missing required field");
  return j_.at(key);
}

const Json& JsonReader::raw(const std::string& key) { return get(key); }

std::int64_t JsonReader::integer(const std::string& key, std::int64_t min, std::int64_t max) {
  const Json& v = get(key);
  std::int64_t x = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      fail(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + describe(v));
    x = v.get<std::int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9e18) {
    x = static_cast<std::int64_t>(v.get<double>());
  } else {
    fail(key, "expected an integer, got " + describe(v));
  }
  if (x < min || x > max)
    fail(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + describe(v));
  return x;
}

std::int64_t JsonReader::integer_or(const std::string& key, std::int64_t fallback, std::int64_t min, std::int64_t max) {
  if (!has(key)) {
    read_.insert(key);
    return fallback;
  }
  return integer(key, min, max);
}

double JsonReader::number(const std::string& key, double min, double max) {
  const Json& v = get(key);
  if (!v.is_number()) fail(key, "expected a number, got " + describe(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < min || x > max) {
    std::ostringstream os;
    os << "expected a number in [" << min << ", " << max << "], got " << describe(v);
    fail(key, os.str());
  }
  return x;
}

double JsonReader::number_or(const std::string& key, double fallback, double min, double max) {
  if (!has(key)) {
    read_.insert(key);
    return fallback;
  }
  return number(key, min, max);
}

bool JsonReader::boolean(const std::string& key) {
  const Json& v = get(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + describe(v));
  return v.get<bool>();
}

bool JsonReader::boolean_or(const std::string& key, bool fallback) {
  if (!has(key)) {
    read_.insert(key);
    return fallback;
  }
  return boolean(key);
}

std::string JsonReader::string(const std::string& key) {
  const Json& v = get(key);
  if (!v.is_string()) fail(key, "expected a string, got " + describe(v));
  return v.get<std::string>();
}

std::string JsonReader::string_or(const std::string& key, const std::string& fallback) {
  if (!has(key)) {
    read_.insert(key);
    return fallback;
  }
  return string(key);
}

std::string JsonReader::choice(const std::string& key, const std::vector<std::string>& options) {
  const std::string s = string(key);
  for (const auto& o : options)
    if (o == s) return s;
  std::string list;
  for (const auto& o : options) list += (list.empty() ? "\"" : ", \"") + o + "\"";
  fail(key, "expected one of " + list + ", got \"" + s + "\"");
}

std::string JsonReader::choice_or(const std::string& key, const std::vector<std::string>& options,
                                  const std::string& fallback) {
  if (!has(key)) {
    read_.insert(key);
    return fallback;
  }
  return choice(key, options);
}

double JsonReader::quantity(const std::string& key, QuantityKind kind) {
  const Json& v = get(key);
  if (!v.is_string()) fail(key, "expected " + quantity_help(kind) + " as a string, got " + describe(v));
  try {
    return parse_quantity(v.get<std::string>(), kind);
  } catch (const std::invalid_argument& e) {
    fail(key, e.what());
  }
}

double JsonReader::quantity_or(const std::string& key, QuantityKind kind, double fallback) {
  if (!has(key)) {
    read_.insert(key);
    return fallback;
  }
  return quantity(key, kind);
}

std::vector<std::string> JsonReader::strings_or(const std::string& key) {
  std::vector<std::string> out;
  if (!has(key)) {
    read_.insert(key);
    return out;
  }
  const Json& v = get(key);
  if (!v.is_array()) fail(key, "expected an array of strings, got " + describe(v));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) throw InputError(file_, path(key) + "/" + std::to_string(i), "expected a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

JsonReader JsonReader::object(const std::string& key) { return JsonReader(get(key), file_, path(key)); }

void JsonReader::ignore(const std::string& key) { read_.insert(key); }

void JsonReader::finish() const {
  for (auto it = j_.begin(); it != j_.end(); ++it)
    if (!read_.count(it.key())) throw InputError(file_, path(it.key()), "unknown key");
}

bool is_file(const std::string& file) noexcept {
  std::error_code ec;
  return std::filesystem::is_regular_file(file, ec);
}

Json load_json_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw InputError(file + ": cannot open file");
  try {
    return Json::parse(in);
  } catch (const Json::parse_error& e) {
    throw InputError(file + ": invalid JSON: " + e.what());
  }
}

}  // namespace scaleout
