#pragma once
// Sweep files and their results: a base scenario plus axes over any scenario path, expanded into
// numbered points; each point becomes one row of a results file (.csv or .jsonl) that is appended
// as it finishes and can be resumed after a kill.
//
// Points. The points are the product of every grid axis, every zip group and the list: one value
// per grid axis, one position per zip group (its axes move together) and one list entry. Point
// `index` enumerates them as nested loops over grid axes (file order), then zip groups, then the
// list, the last varying fastest (Python's itertools.product order). An absent section counts as
// one empty choice, so a sweep with no axes has the single point 0: the base. The overrides of a
// point are applied to the base JSON in that same order through apply_override (the `--set` of
// `scaleout run`), so any scenario path can be swept and a list entry may refine ("model.layers")
// what a grid axis set ("model"); the same path may not be swept by two sections.
//
// Rows. A row depends only on the sweep and its index, so rows arrive in completion order and the
// files of two runs (any --jobs, --shard, MPI ranks, or a kill and --resume) are identical once
// their rows are sorted by index (the CSV header staying first).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/io/json_reader.hpp"
#include "tools/io/simulate.hpp"

namespace scaleout {

using OrderedJson = nlohmann::ordered_json;

// The fields of a sweep file, for `scaleout sweep --help` (the parser accepts exactly these).
struct SweepField {
  std::string_view name, type, help;
};
inline constexpr SweepField kSweepFields[] = {
    {"base", "file or object", "the scenario every point starts from: a file relative to the sweep file, or inline"},
    {"grid", "{path: [values]}", "axes combined as a cartesian product (first axis varies slowest)"},
    {"zip", "{path: [values]} or [{...}]", "one group (or a list of groups) of equal-length axes varied together"},
    {"list", "[{path: value, ...}]", "explicit points, each a set of overrides"},
    {"name", "string", "the sweep's name (default: the file's stem)"},
    {"description", "string", "what the sweep asks"},
    {"comment", "string or [strings]", "free text, e.g. the command that runs it"},
};

using SweepAssignment = std::vector<std::pair<std::string, OrderedJson>>;  // (path, value), applied in order

struct SweepAxis {
  std::string path;  // dotted: "training.micro_batch"
  std::vector<OrderedJson> values;
};

struct SweepZip {
  std::vector<SweepAxis> axes;  // all of the same length
  std::size_t size() const { return axes.empty() ? 1 : axes.front().values.size(); }
};

struct Sweep {
  std::string file;  // the sweep file, named in errors
  std::string name, description;
  Json base;              // the base scenario's JSON
  std::string base_file;  // what parse_scenario names: the base file, or the sweep file for an inline base
  bool inline_base = false;
  std::vector<SweepAxis> grid;
  std::vector<SweepZip> zips;
  std::vector<OrderedJson> list;   // objects: path -> value
  std::vector<std::string> paths;  // every swept path, in order of first appearance (the CSV columns)
  // The single-GPU baseline's times, shared by the points whose plan is all that differs.
  std::shared_ptr<BaselineCache> baselines = std::make_shared<BaselineCache>();

  std::size_t size() const;
  SweepAssignment params(std::size_t index) const;  // the overrides of one point
};

inline constexpr std::size_t kMaxSweepPoints = 10'000'000;

// `file` names the errors; a base file is found relative to its folder. Bad sweeps throw InputError.
Sweep parse_sweep(const std::string& text, const std::string& file);
Sweep load_sweep(const std::string& file);

// One point, simulated. A point whose scenario is invalid is a row with `error` set, not a throw.
struct SweepRow {
  std::size_t index = 0;
  OrderedJson params = OrderedJson::object();  // path -> value
  std::optional<Json> result;                  // the object of `scaleout run --format json`
  std::string error;                           // the InputError message, or "internal error: ..."
  bool internal_error = false;
};
SweepRow run_sweep_point(const Sweep& sweep, std::size_t index);

// Rows as text, one line each, the newline included. The JSONL line is also the wire format
// between MPI ranks.
std::string jsonl_line(const SweepRow& row);
// Parses a JSONL line; throws InputError naming `file` and `where` when it is not a row.
SweepRow parse_jsonl_row(std::string_view line, const std::string& file, const std::string& where);

// CSV: index, every swept path, the flattened result fields (dotted), error. The result columns
// are the union over the rows, in one canonical order whatever order the rows came in: the
// headline fields (fits, step_time_s, tokens_per_s, mfu, memory.peak_bytes, ...) first, then the
// others in the key order of the result object.
bool result_column_less(const std::string& a, const std::string& b);
std::vector<std::string> csv_result_columns(const Json& result);  // of one result, in that order
std::string csv_header(const Sweep& sweep, const std::vector<std::string>& result_columns);
std::string csv_line(const Sweep& sweep, const std::vector<std::string>& result_columns, const SweepRow& row);
// Splits one CSV line (RFC 4180 quoting, no embedded newlines: csv_line never writes any).
std::vector<std::string> split_csv_line(std::string_view line);

enum class ResultsFormat { csv, jsonl };
ResultsFormat results_format_for(const std::string& file);  // by extension

// A results file open for appending rows of one sweep. Every append is written with one write(2)
// and made durable (fdatasync) before it returns, so a kill at any moment leaves whole rows plus
// at most one torn last line, which resuming cuts off.
class ResultsFile {
 public:
  // Without `resume` an existing non-empty file is refused (so no finished work is overwritten);
  // with it, the rows already there are read, checked against the sweep, and marked done.
  ResultsFile(const std::string& file, const Sweep& sweep, bool resume);
  ~ResultsFile();
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;

  const std::string& file() const { return file_; }
  ResultsFormat format() const { return format_; }
  bool done(std::size_t index) const { return index < done_.size() && done_[index]; }
  std::size_t done_count() const { return done_count_; }
  const std::vector<std::string>& result_columns() const { return columns_; }

  // Appends the rows. A CSV row with a result field that no earlier row had widens the header:
  // the file is rewritten with the new column (to a temporary renamed over it, so a kill leaves
  // the old file or the new one), the earlier rows leaving it empty.
  void append(const std::vector<SweepRow>& rows);

 private:
  void read_existing();
  void write_all(const std::string& text);
  void rewrite_with_columns(std::vector<std::string> columns);
  std::string file_;
  const Sweep& sweep_;
  ResultsFormat format_;
  int fd_ = -1;
  bool has_header_ = false;  // CSV: the first line is written
  std::vector<std::string> columns_;
  std::vector<bool> done_;
  std::size_t done_count_ = 0;
};

}  // namespace scaleout
