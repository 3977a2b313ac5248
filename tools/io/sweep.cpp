#include "tools/io/sweep.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "sim/engine/check.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

namespace scaleout {
namespace fs = std::filesystem;

namespace {

std::string describe_value(const OrderedJson& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// "/training/micro_batch", "training/micro_batch" and "training.micro_batch" name the same path;
// the dotted form is the one columns and params use.
std::string normalize_path(const std::string& key, const std::string& file, const std::string& where) {
  std::string p = key;
  if (!p.empty() && p.front() == '/') p.erase(0, 1);
  for (char& c : p)
    if (c == '/') c = '.';
  if (p.empty() || p.front() == '.' || p.back() == '.' || p.find("..") != std::string::npos ||
      p.find('=') != std::string::npos)
    throw InputError(file, where, "expected a scenario path like \"training.micro_batch\"");
  return p;
}

// Which section swept each path first, so that two sections cannot fight over one path.
class PathClaims {
 public:
  explicit PathClaims(Sweep& s) : s_(s) {}
  void claim(const std::string& path, const std::string& where) {
    const auto [it, fresh] = owner_.emplace(path, where);
    if (!fresh) throw InputError(s_.file, where, "\"" + path + "\" is already swept by " + it->second);
    s_.paths.push_back(path);
  }
  // List entries share their paths with each other, never with the grid or a zip.
  void claim_for_list(const std::string& path, const std::string& where) {
    const auto it = owner_.find(path);
    if (it != owner_.end() && it->second.rfind("/list", 0) != 0)
      throw InputError(s_.file, where, "\"" + path + "\" is already swept by " + it->second);
    if (it == owner_.end()) {
      owner_.emplace(path, "/list");
      s_.paths.push_back(path);
    }
  }

 private:
  Sweep& s_;
  std::map<std::string, std::string> owner_;
};

SweepAxis read_axis(const std::string& key, const OrderedJson& values, const std::string& file,
                    const std::string& where, PathClaims& claims) {
  SweepAxis axis;
  axis.path = normalize_path(key, file, where);
  claims.claim(axis.path, where);
  if (!values.is_array() || values.empty())
    throw InputError(file, where, "expected a non-empty array of values, got " + describe_value(values));
  axis.values.assign(values.begin(), values.end());
  return axis;
}

SweepZip read_zip(const OrderedJson& group, const std::string& file, const std::string& where, PathClaims& claims) {
  if (!group.is_object() || group.empty())
    throw InputError(file, where,
                     "expected an object of equal-length arrays {path: [values]}, got " + describe_value(group));
  SweepZip zip;
  std::string first;
  for (const auto& [key, values] : group.items()) {
    const std::string w = where + "/" + key;
    zip.axes.push_back(read_axis(key, values, file, w, claims));
    if (first.empty())
      first = w;
    else if (zip.axes.back().values.size() != zip.axes.front().values.size())
      throw InputError(file, w,
                       "has " + std::to_string(zip.axes.back().values.size()) + " values but " + first + " has " +
                           std::to_string(zip.axes.front().values.size()) + " (zipped axes move together)");
  }
  return zip;
}

OrderedJson params_object(const Sweep& s, std::size_t index) {
  OrderedJson o = OrderedJson::object();
  for (const auto& [path, value] : s.params(index)) o[path] = value;
  return o;
}

std::vector<std::size_t> radices(const Sweep& s) {
  std::vector<std::size_t> r;
  for (const auto& a : s.grid) r.push_back(a.values.size());
  for (const auto& z : s.zips) r.push_back(z.size());
  if (!s.list.empty()) r.push_back(s.list.size());
  return r;
}

}  // namespace

std::size_t Sweep::size() const {
  std::size_t n = 1;
  for (const std::size_t r : radices(*this)) n *= r;
  return n;
}

SweepAssignment Sweep::params(std::size_t index) const {
  SCALEOUT_CHECK(index < size(), "a point index within the sweep");
  const std::vector<std::size_t> r = radices(*this);
  std::vector<std::size_t> digit(r.size());
  for (std::size_t k = r.size(); k-- > 0;) {
    digit[k] = index % r[k];
    index /= r[k];
  }
  SweepAssignment out;
  std::size_t k = 0;
  for (const auto& a : grid) out.emplace_back(a.path, a.values[digit[k++]]);
  for (const auto& z : zips) {
    for (const auto& a : z.axes) out.emplace_back(a.path, a.values[digit[k]]);
    ++k;
  }
  if (!list.empty())
    for (const auto& [path, value] : list[digit[k]].items()) out.emplace_back(path, value);
  return out;
}

Sweep parse_sweep(const std::string& text, const std::string& file) {
  Json j;
  OrderedJson oj;  // the same document with its keys in file order: axes and columns follow it
  try {
    j = Json::parse(text);
    oj = OrderedJson::parse(text);
  } catch (const Json::parse_error& e) {
    throw InputError(file + ": invalid JSON: " + e.what());
  }
  JsonReader r(j, file, "");
  Sweep s;
  s.file = file;
  s.name = r.string_or("name", fs::path(file).stem().string());
  s.description = r.string_or("description", "");
  if (r.has("comment")) {
    const Json& c = r.raw("comment");
    const bool ok =
        c.is_string() || (c.is_array() && std::all_of(c.begin(), c.end(), [](const Json& x) { return x.is_string(); }));
    if (!ok) r.fail("comment", "expected a string or an array of strings, got " + describe(c));
  } else {
    r.ignore("comment");
  }

  const Json& base = r.raw("base");
  if (base.is_string()) {
    const fs::path p = (fs::path(file).parent_path() / base.get<std::string>()).lexically_normal();
    if (!is_file(p.string()))
      r.fail("base",
             "cannot open the scenario file \"" + p.string() + "\" (a base file is relative to the sweep file)");
    s.base = load_json_file(p.string());
    s.base_file = p.string();
    if (!s.base.is_object()) throw InputError(s.base_file, "", "expected a scenario object, got " + describe(s.base));
  } else if (base.is_object()) {
    s.base = base;
    s.base_file = file;
    s.inline_base = true;
  } else {
    r.fail("base", "expected a scenario file (relative to the sweep file) or a scenario object, got " + describe(base));
  }

  PathClaims claims(s);
  if (r.has("grid")) {
    if (!r.raw("grid").is_object()) r.fail("grid", "expected an object {path: [values]}, got " + describe(j["grid"]));
    for (const auto& [key, values] : oj["grid"].items())
      s.grid.push_back(read_axis(key, values, file, "/grid/" + key, claims));
  } else {
    r.ignore("grid");
  }
  if (r.has("zip")) {
    const OrderedJson& z = oj["zip"];
    if (z.is_array()) {
      if (z.empty()) r.fail("zip", "expected a zip group or a non-empty array of them, got []");
      for (std::size_t i = 0; i < z.size(); ++i)
        s.zips.push_back(read_zip(z[i], file, "/zip/" + std::to_string(i), claims));
    } else {
      s.zips.push_back(read_zip(z, file, "/zip", claims));
    }
    r.ignore("zip");
  } else {
    r.ignore("zip");
  }
  if (r.has("list")) {
    r.ignore("list");
    const OrderedJson& l = oj["list"];
    if (!l.is_array() || l.empty())
      r.fail("list", "expected a non-empty array of objects {path: value}, got " + describe(j["list"]));
    for (std::size_t i = 0; i < l.size(); ++i) {
      const std::string where = "/list/" + std::to_string(i);
      if (!l[i].is_object())
        throw InputError(file, where, "expected an object {path: value}, got " + describe_value(l[i]));
      OrderedJson entry = OrderedJson::object();
      for (const auto& [key, value] : l[i].items()) {
        const std::string path = normalize_path(key, file, where + "/" + key);
        if (entry.contains(path)) throw InputError(file, where + "/" + key, "\"" + path + "\" is given twice");
        claims.claim_for_list(path, where + "/" + key);
        entry[path] = value;
      }
      s.list.push_back(std::move(entry));
    }
  } else {
    r.ignore("list");
  }
  r.finish();

  std::size_t n = 1;
  for (const std::size_t k : radices(s)) {
    if (n > kMaxSweepPoints / k)
      r.fail("", "more than " + std::to_string(kMaxSweepPoints) + " points; split the sweep (or use --shard)");
    n *= k;
  }
  return s;
}

Sweep load_sweep(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file + ": cannot open file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_sweep(text.str(), file);
}

SweepRow run_sweep_point(const Sweep& sweep, std::size_t index) {
  SweepRow row;
  row.index = index;
  const SweepAssignment a = sweep.params(index);
  for (const auto& [path, value] : a) row.params[path] = value;
  try {
    Json j = sweep.base;
    for (const auto& [path, value] : a) {
      try {
        apply_override(j, path + "=" + value.dump());
      } catch (const InputError& e) {
        std::string m = e.what();
        if (m.rfind("--set ", 0) == 0) m.erase(0, 6);
        throw InputError(sweep.file + ": override " + m);
      }
    }
    row.result = simulate_scenario_json(parse_scenario(j, sweep.base_file), sweep.baselines.get(), baseline_key(j));
  } catch (const InputError& e) {
    row.error = e.what();
    // An inline base is the sweep file's /base: say so in the path.
    const std::string prefix = sweep.file + ": /";
    if (sweep.inline_base && row.error.rfind(prefix, 0) == 0) {
      const std::string rest = row.error.substr(prefix.size());
      row.error = sweep.file + ": /base" + (!rest.empty() && rest.front() == ':' ? "" : "/") + rest;
    }
  } catch (const std::exception& e) {
    // A broken invariant on one point should not lose the others; the command reports it (exit 1).
    row.error = std::string("internal error: ") + e.what();
    row.internal_error = true;
  }
  return row;
}

std::string jsonl_line(const SweepRow& row) {
  constexpr auto replace = Json::error_handler_t::replace;
  std::string s = "{\"index\":" + std::to_string(row.index) + ",\"params\":" + row.params.dump(-1, ' ', false, replace);
  if (row.result)
    s += ",\"result\":" + row.result->dump(-1, ' ', false, replace);
  else
    s += ",\"error\":" + Json(row.error).dump(-1, ' ', false, replace);
  s += "}\n";
  return s;
}

SweepRow parse_jsonl_row(std::string_view line, const std::string& file, const std::string& where) {
  const OrderedJson o = OrderedJson::parse(line, nullptr, false);
  if (o.is_discarded() || !o.is_object()) throw InputError(file, where, "not a JSON object");
  SweepRow row;
  if (!o.contains("index") || !o["index"].is_number_unsigned())
    throw InputError(file, where + "/index", "expected a point index");
  row.index = o["index"].get<std::size_t>();
  if (!o.contains("params") || !o["params"].is_object())
    throw InputError(file, where + "/params", "expected an object");
  row.params = o["params"];
  const bool has_result = o.contains("result"), has_error = o.contains("error");
  if (has_result == has_error) throw InputError(file, where, "expected either \"result\" or \"error\"");
  for (const auto& [key, value] : o.items())
    if (key != "index" && key != "params" && key != "result" && key != "error")
      throw InputError(file, where + "/" + key, "unknown key");
  if (has_result) {
    if (!o["result"].is_object()) throw InputError(file, where + "/result", "expected an object");
    row.result = Json::parse(o["result"].dump());
  } else {
    if (!o["error"].is_string()) throw InputError(file, where + "/error", "expected a string");
    row.error = o["error"].get<std::string>();
    row.internal_error = row.error.rfind("internal error: ", 0) == 0;
  }
  return row;
}

namespace {

template <class J>
void flatten(const J& j, const std::string& prefix, std::vector<std::pair<std::string, const J*>>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    out.emplace_back(prefix, &j);
  }
}

template <class J>
std::string cell(const J& v) {
  std::string s;
  if (v.is_null()) return s;
  if (v.is_string())
    s = v.template get<std::string>();
  else
    s = v.dump(-1, ' ', false, J::error_handler_t::replace);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';  // one row, one line: resume reads line by line
  return s;
}

std::string quote(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string q = "\"";
  for (const char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

const std::string kHeadline[] = {"fits",
                                 "step_time_s",
                                 "tokens_per_s",
                                 "mfu",
                                 "memory.peak_bytes",
                                 "memory.required_bytes",
                                 "memory.capacity_bytes"};

// One write(2) (repeated only when the kernel writes part of it), then fdatasync.
void write_durably(int fd, const std::string& file, const std::string& text) {
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw InputError(file + ": write failed: " + std::strerror(errno));
    off += static_cast<std::size_t>(n);
  }
  if (::fdatasync(fd) != 0 && errno != EINVAL) throw InputError(file + ": fdatasync failed: " + std::strerror(errno));
}

std::string join_csv(const std::vector<std::string>& cells) {
  std::string s;
  for (std::size_t i = 0; i < cells.size(); ++i) s += (i ? "," : "") + quote(cells[i]);
  return s + "\n";
}

std::vector<std::string> param_cells(const Sweep& sweep, const OrderedJson& params) {
  std::vector<std::string> out;
  for (const auto& p : sweep.paths) out.push_back(params.contains(p) ? cell(params[p]) : std::string());
  return out;
}

}  // namespace

bool result_column_less(const std::string& a, const std::string& b) {
  const auto rank = [](const std::string& c) {
    return std::size_t(std::find(std::begin(kHeadline), std::end(kHeadline), c) - std::begin(kHeadline));
  };
  if (rank(a) != rank(b)) return rank(a) < rank(b);
  // The key order of nested JSON objects: component by component.
  const auto parts = [](const std::string& c) {
    std::vector<std::string_view> v;
    for (std::size_t pos = 0;;) {
      const std::size_t dot = c.find('.', pos);
      v.emplace_back(std::string_view(c).substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
      if (dot == std::string::npos) return v;
      pos = dot + 1;
    }
  };
  const auto pa = parts(a), pb = parts(b);
  return std::lexicographical_compare(pa.begin(), pa.end(), pb.begin(), pb.end());
}

std::vector<std::string> csv_result_columns(const Json& result) {
  std::vector<std::pair<std::string, const Json*>> leaves;
  flatten(result, "", leaves);
  std::vector<std::string> cols;
  for (const auto& [k, v] : leaves) cols.push_back(k);
  std::sort(cols.begin(), cols.end(), result_column_less);
  return cols;
}

std::string csv_header(const Sweep& sweep, const std::vector<std::string>& result_columns) {
  std::vector<std::string> cells{"index"};
  cells.insert(cells.end(), sweep.paths.begin(), sweep.paths.end());
  cells.insert(cells.end(), result_columns.begin(), result_columns.end());
  cells.emplace_back("error");
  return join_csv(cells);
}

std::string csv_line(const Sweep& sweep, const std::vector<std::string>& result_columns, const SweepRow& row) {
  std::vector<std::string> cells{std::to_string(row.index)};
  for (auto& c : param_cells(sweep, row.params)) cells.push_back(std::move(c));
  std::unordered_map<std::string, std::string> values;
  if (row.result) {
    std::vector<std::pair<std::string, const Json*>> leaves;
    flatten(*row.result, "", leaves);
    for (const auto& [k, v] : leaves) values.emplace(k, cell(*v));
  }
  for (const auto& c : result_columns) {
    const auto it = values.find(c);
    cells.push_back(it == values.end() ? std::string() : it->second);
  }
  cells.push_back(cell(Json(row.error)));
  return join_csv(cells);
}

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

ResultsFormat results_format_for(const std::string& file) {
  const std::string ext = fs::path(file).extension().string();
  if (ext == ".csv") return ResultsFormat::csv;
  if (ext == ".jsonl") return ResultsFormat::jsonl;
  throw InputError(file + ": expected a results file ending in .csv or .jsonl");
}

ResultsFile::ResultsFile(const std::string& file, const Sweep& sweep, bool resume)
    : file_(file), sweep_(sweep), format_(results_format_for(file)) {
  done_.assign(sweep.size(), false);
  struct stat st {};
  const bool exists = ::stat(file.c_str(), &st) == 0 && st.st_size > 0;
  if (exists && !resume)
    throw InputError(file + ": already exists; pass --resume to continue it, or remove it to start over");
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(file + ": cannot open for writing: " + std::strerror(errno));
  if (exists) {
    try {
      read_existing();
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
}

ResultsFile::~ResultsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultsFile::read_existing() {
  std::string text;
  {
    std::ifstream in(file_, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    text = os.str();
  }
  // A kill in the middle of a write leaves a torn last line: cut it off, the point runs again.
  const std::size_t end = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (end < text.size()) {
    if (::ftruncate(fd_, static_cast<off_t>(end)) != 0)
      throw InputError(file_ + ": cannot cut off the torn last line: " + std::strerror(errno));
    text.resize(end);
  }
  std::size_t pos = 0, lineno = 0;
  const std::size_t fixed = 1 + sweep_.paths.size();
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    const std::string where = "line " + std::to_string(++lineno);
    if (line.empty()) continue;
    std::size_t index = 0;
    if (format_ == ResultsFormat::jsonl) {
      const SweepRow row = parse_jsonl_row(line, file_, where);
      index = row.index;
      if (index >= done_.size() || row.params != params_object(sweep_, index))
        throw InputError(
            file_, where,
            "point " + std::to_string(index) + " is not this sweep's (was the file written by another sweep?)");
    } else if (!has_header_) {
      const std::vector<std::string> h = split_csv_line(line);
      const std::vector<std::string> head = split_csv_line(csv_header(sweep_, {}));
      bool ok = h.size() >= fixed + 1 && h.back() == "error";
      for (std::size_t i = 0; ok && i < fixed; ++i) ok = h[i] == head[i];
      if (!ok)
        throw InputError(file_, where,
                         "the header is not this sweep's (expected index, the swept paths, the result "
                         "fields, error; was the file written by another sweep?)");
      columns_.assign(h.begin() + static_cast<std::ptrdiff_t>(fixed), h.end() - 1);
      has_header_ = true;
      continue;
    } else {
      const std::vector<std::string> f = split_csv_line(line);
      const auto [ptr, ec] = std::from_chars(f[0].data(), f[0].data() + f[0].size(), index);
      bool ok = ec == std::errc() && ptr == f[0].data() + f[0].size() && index < done_.size() &&
                f.size() == fixed + columns_.size() + 1;
      if (ok) {
        const std::vector<std::string> expect = param_cells(sweep_, params_object(sweep_, index));
        for (std::size_t i = 0; ok && i < expect.size(); ++i) ok = f[1 + i] == expect[i];
      }
      if (!ok) throw InputError(file_, where, "not a row of this sweep (was the file written by another sweep?)");
    }
    if (!done_[index]) {
      done_[index] = true;
      ++done_count_;
    }
  }
}

void ResultsFile::append(const std::vector<SweepRow>& rows) {
  std::string text;
  if (format_ == ResultsFormat::csv) {
    std::vector<std::string> columns = columns_;
    for (const SweepRow& row : rows)
      if (row.result)
        for (auto& c : csv_result_columns(*row.result))
          if (std::find(columns.begin(), columns.end(), c) == columns.end()) columns.push_back(std::move(c));
    std::sort(columns.begin(), columns.end(), result_column_less);
    if (!has_header_) {
      columns_ = std::move(columns);
      text = csv_header(sweep_, columns_);
      has_header_ = true;
    } else if (columns != columns_) {
      rewrite_with_columns(std::move(columns));
    }
  }
  for (const SweepRow& row : rows)
    text += format_ == ResultsFormat::jsonl ? jsonl_line(row) : csv_line(sweep_, columns_, row);
  write_all(text);
}

void ResultsFile::write_all(const std::string& text) { write_durably(fd_, file_, text); }

void ResultsFile::rewrite_with_columns(std::vector<std::string> columns) {
  std::string text;
  {
    std::ifstream in(file_, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    text = os.str();
  }
  const std::size_t fixed = 1 + sweep_.paths.size();
  std::string out = csv_header(sweep_, columns);
  std::size_t pos = text.find('\n');
  SCALEOUT_CHECK(pos != std::string::npos, "a CSV results file with rows starts with its header");
  for (++pos; pos < text.size();) {
    const std::size_t nl = text.find('\n', pos);
    const std::vector<std::string> f = split_csv_line(std::string_view(text).substr(pos, nl - pos));
    pos = nl + 1;
    SCALEOUT_CHECK(f.size() == fixed + columns_.size() + 1, "rows of a results file match its header");
    std::vector<std::string> cells(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(fixed));
    for (const auto& c : columns) {
      const auto it = std::find(columns_.begin(), columns_.end(), c);
      cells.push_back(it == columns_.end() ? std::string() : f[fixed + std::size_t(it - columns_.begin())]);
    }
    cells.push_back(f.back());
    out += join_csv(cells);
  }
  const std::string tmp = file_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(tmp + ": cannot open for writing: " + std::strerror(errno));
  try {
    write_durably(fd, tmp, out);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), file_.c_str()) != 0)
    throw InputError(file_ + ": cannot replace it with " + tmp + ": " + std::strerror(errno));
  ::close(fd_);
  fd_ = ::open(file_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) throw InputError(file_ + ": cannot reopen: " + std::strerror(errno));
  columns_ = std::move(columns);
}

}  // namespace scaleout
