// Sweep files: expansion of grid, zip and list axes into numbered points, strict errors with the
// JSON path, invalid points as error rows, and results files that resume after a torn write.
#include "tools/io/sweep.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace scaleout;

namespace {

const char* kBase = R"("base": {"model": "gpt3-125m", "cluster": {"gpu": "h100-sxm"},
                                "training": {"seq_len": 256, "micro_batch": 1}})";

std::string sweep_text(const std::string& axes) {
  return std::string("{") + kBase + (axes.empty() ? "" : ", " + axes) + "}";
}

std::string error_of(const std::string& text) {
  try {
    parse_sweep(text, "sw.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// "path=value; path=value" of a point, for compact expectations.
std::string point(const Sweep& s, std::size_t i) {
  std::string out;
  for (const auto& [p, v] : s.params(i)) out += (out.empty() ? "" : "; ") + p + "=" + v.dump();
  return out;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/sweep_test_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_file(const std::string& f) {
  std::ifstream in(f);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

TEST_CASE("no axes: one point, the base", "[io][sweep]") {
  const Sweep s = parse_sweep(sweep_text(""), "sw.json");
  CHECK(s.size() == 1);
  CHECK(s.params(0).empty());
  CHECK(s.name == "sw");
}

TEST_CASE("grid axes form a cartesian product, the first axis varying slowest", "[io][sweep]") {
  const Sweep s = parse_sweep(
      sweep_text(R"("grid": {"training.micro_batch": [1, 2, 4], "cluster.gpu": ["a100-80g", "h100-sxm"]})"), "sw.json");
  REQUIRE(s.size() == 6);
  CHECK(point(s, 0) == R"(training.micro_batch=1; cluster.gpu="a100-80g")");
  CHECK(point(s, 1) == R"(training.micro_batch=1; cluster.gpu="h100-sxm")");
  CHECK(point(s, 2) == R"(training.micro_batch=2; cluster.gpu="a100-80g")");
  CHECK(point(s, 5) == R"(training.micro_batch=4; cluster.gpu="h100-sxm")");
  // Columns follow the file's order, not the alphabet.
  CHECK(s.paths == std::vector<std::string>{"training.micro_batch", "cluster.gpu"});
}

TEST_CASE("zip axes move together; grid x zip x list in nested-loop order", "[io][sweep]") {
  const Sweep s = parse_sweep(sweep_text(R"(
      "grid": {"cluster.gpu": ["a100-80g", "h100-sxm"]},
      "zip": {"training.precision": ["bf16-mixed", "bf16"], "training.optimizer": ["adamw", "adamw-8bit"]},
      "list": [{"training.seq_len": 512}, {"training.seq_len": 1024, "/training/micro_batch": 2}])"),
                              "sw.json");
  REQUIRE(s.size() == 2 * 2 * 2);
  CHECK(point(s, 0) ==
        R"(cluster.gpu="a100-80g"; training.precision="bf16-mixed"; training.optimizer="adamw"; training.seq_len=512)");
  CHECK(
      point(s, 1) ==
      R"(cluster.gpu="a100-80g"; training.precision="bf16-mixed"; training.optimizer="adamw"; training.seq_len=1024; training.micro_batch=2)");
  CHECK(point(s, 2) ==
        R"(cluster.gpu="a100-80g"; training.precision="bf16"; training.optimizer="adamw-8bit"; training.seq_len=512)");
  CHECK(
      point(s, 7) ==
      R"(cluster.gpu="h100-sxm"; training.precision="bf16"; training.optimizer="adamw-8bit"; training.seq_len=1024; training.micro_batch=2)");
  CHECK(s.paths == std::vector<std::string>{"cluster.gpu", "training.precision", "training.optimizer",
                                            "training.seq_len", "training.micro_batch"});
}

TEST_CASE("several zip groups multiply", "[io][sweep]") {
  const Sweep s = parse_sweep(sweep_text(R"("zip": [{"training.seq_len": [256, 512, 1024]},
                                                   {"training.micro_batch": [1, 2], "training.global_batch": [4, 8]}])"),
                              "sw.json");
  REQUIRE(s.size() == 6);
  CHECK(point(s, 1) == "training.seq_len=256; training.micro_batch=2; training.global_batch=8");
  CHECK(point(s, 4) == "training.seq_len=1024; training.micro_batch=1; training.global_batch=4");
}

TEST_CASE("bad sweep files name the file and the JSON path", "[io][sweep]") {
  CHECK(error_of(sweep_text(R"("grids": {})")) == "sw.json: /grids: unknown key");
  CHECK(error_of(R"({"grid": {}})") == "sw.json: /base: missing required field");
  CHECK(error_of(R"({"base": 3})").find("sw.json: /base: expected a scenario file") == 0);
  CHECK(error_of(R"({"base": "no-such.json"})").find("sw.json: /base: cannot open the scenario file") == 0);
  CHECK(error_of(sweep_text(R"("grid": {"training.micro_batch": []})")) ==
        "sw.json: /grid/training.micro_batch: expected a non-empty array of values, got []");
  CHECK(error_of(sweep_text(R"("grid": {"training.micro_batch": 4})")) ==
        "sw.json: /grid/training.micro_batch: expected a non-empty array of values, got 4");
  CHECK(error_of(sweep_text(R"("grid": [1, 2])")).find("sw.json: /grid: expected an object") == 0);
  CHECK(error_of(sweep_text(R"("zip": {"a.b": [1, 2], "a.c": [1, 2, 3]})")) ==
        "sw.json: /zip/a.c: has 3 values but /zip/a.b has 2 (zipped axes move together)");
  CHECK(error_of(sweep_text(R"("zip": [{"a.b": [1]}, 5])")).find("sw.json: /zip/1: expected an object") == 0);
  CHECK(error_of(sweep_text(R"("list": [{"a.b": 1}, 2])")).find("sw.json: /list/1: expected an object") == 0);
  CHECK(error_of(sweep_text(R"("list": [])")).find("sw.json: /list: expected a non-empty array") == 0);
  CHECK(error_of(sweep_text(R"("grid": {"a..b": [1]})")).find("sw.json: /grid/a..b: expected a scenario path") == 0);
  CHECK(error_of(sweep_text(R"("grid": {"a=b": [1]})")).find("sw.json: /grid/a=b: expected a scenario path") == 0);
  CHECK(error_of(sweep_text(R"("grid": {"training.seq_len": [1]}, "list": [{"/training/seq_len": 2}])")) ==
        "sw.json: /list/0//training/seq_len: \"training.seq_len\" is already swept by /grid/training.seq_len");
  CHECK(error_of(sweep_text(R"("grid": {"training.seq_len": [1]}, "zip": {"training.seq_len": [2]})")) ==
        "sw.json: /zip/training.seq_len: \"training.seq_len\" is already swept by /grid/training.seq_len");
  CHECK(error_of(sweep_text(R"("comment": 5)")).find("sw.json: /comment: expected a string or an array") == 0);
  CHECK(error_of("{\"base\": ").find("sw.json: invalid JSON") == 0);
  std::string thousand = "1";
  for (int i = 1; i < 1000; ++i) thousand += ",1";
  const std::string big =
      R"("grid": {"a.a": [)" + thousand + R"(], "a.b": [)" + thousand + R"(], "a.c": [1,2,3,4,5,6,7,8,9,10,11]})";
  CHECK(error_of(sweep_text(big)).find("sw.json: /: more than 10000000 points") == 0);
}

TEST_CASE("a base file is found relative to the sweep file", "[io][sweep]") {
  TempDir dir;
  std::filesystem::create_directory(dir.path / "sweeps");
  std::ofstream(dir.file("base.json")) << R"({"model": "gpt3-125m", "cluster": {"gpu": "h100-sxm"},
                                             "training": {"seq_len": 256}})";
  std::ofstream(dir.file("sweeps/s.json")) << R"({"base": "../base.json", "grid": {"training.micro_batch": [1, 2]}})";
  const Sweep s = load_sweep(dir.file("sweeps/s.json"));
  CHECK(s.size() == 2);
  CHECK_FALSE(s.inline_base);
  const SweepRow row = run_sweep_point(s, 1);
  REQUIRE(row.result);
  CHECK((*row.result)["micro_batches"] == 1);
}

TEST_CASE("each point simulates the base with its overrides; invalid points are error rows", "[io][sweep]") {
  const Sweep s = parse_sweep(sweep_text(R"("list": [{"training.micro_batch": 2, "training.global_batch": 8},
                                                    {"training.micro_batch": 3, "training.global_batch": 8},
                                                    {"training.recompute": "sometimes"},
                                                    {"training.seq_len.x": 1},
                                                    {"cluster.gpu": "h900"}])"),
                              "sw.json");
  const SweepRow ok = run_sweep_point(s, 0);
  REQUIRE(ok.result);
  CHECK(ok.error.empty());
  CHECK((*ok.result)["micro_batches"] == 4);
  CHECK(ok.params.dump() == R"({"training.micro_batch":2,"training.global_batch":8})");

  const SweepRow bad = run_sweep_point(s, 1);
  CHECK_FALSE(bad.result);
  CHECK_FALSE(bad.internal_error);
  // The inline base is the sweep file's /base.
  CHECK(bad.error == "sw.json: /base/training/global_batch: 8 is not a multiple of micro_batch=3");
  CHECK(run_sweep_point(s, 2).error.find("sw.json: /base/training/recompute: expected one of") == 0);
  CHECK(run_sweep_point(s, 3).error.find("sw.json: override training.seq_len.x=1: ") == 0);
  CHECK(run_sweep_point(s, 4).error.find("sw.json: /base/cluster/gpu: unknown GPU \"h900\"") == 0);
}

TEST_CASE("points that differ only in their plan share the single-GPU baseline, and report it unchanged", "[io][sweep]") {
  // Four plans of 4 and 8 GPUs and two global batches: the baseline's times are worked out once
  // per model, training and GPU (baseline_key drops the plan, the node shape and the global
  // batch), and every row is what the point simulated alone reports.
  const Sweep s = parse_sweep(sweep_text(R"("list": [{"cluster.gpus_per_node": 4, "parallelism.dp": 4, "training.global_batch": 8},
                                                    {"cluster.gpus_per_node": 4, "parallelism.tp": 2, "parallelism.dp": 2, "training.global_batch": 4},
                                                    {"cluster.gpus_per_node": 8, "parallelism.dp": 8, "parallelism.zero": 3, "training.global_batch": 16},
                                                    {"cluster.gpus_per_node": 4, "parallelism.dp": 4, "training.global_batch": 8, "training.seq_len": 512}])"),
                              "sw.json");
  for (std::size_t i = 0; i < s.size(); ++i) {
    INFO("point " << i);
    const SweepRow row = run_sweep_point(s, i);
    REQUIRE(row.result);
    Json j = s.base;
    for (const auto& [path, value] : s.params(i)) apply_override(j, path + "=" + value.dump());
    const Json alone = simulate_scenario_json(parse_scenario(j, "sw.json"));
    CHECK(row.result->dump() == alone.dump());
    CHECK((*row.result)["speedup_vs_one_gpu"].get<double>() > 1.0);
    CHECK(s.baselines->find(baseline_key(j)).has_value());
  }
  // The first three share one key; the longer sequence has its own.
  Json a = s.base, b = s.base;
  for (const auto& [path, value] : s.params(0)) apply_override(a, path + "=" + value.dump());
  for (const auto& [path, value] : s.params(2)) apply_override(b, path + "=" + value.dump());
  CHECK(baseline_key(a) == baseline_key(b));
  for (const auto& [path, value] : s.params(3)) apply_override(b, path + "=" + value.dump());
  CHECK(baseline_key(a) != baseline_key(b));
}

TEST_CASE("rows round-trip through JSONL, and CSV rows quote what needs it", "[io][sweep]") {
  const Sweep s =
      parse_sweep(sweep_text(R"("grid": {"training.micro_batch": [1, 3], "model": [{"base": "gpt3-125m", "layers": 2}]},
                                             "list": [{"training.global_batch": 2}])"),
                  "sw.json");
  const SweepRow ok = run_sweep_point(s, 0), bad = run_sweep_point(s, 1);
  REQUIRE(ok.result);
  REQUIRE_FALSE(bad.result);
  for (const SweepRow& row : {ok, bad}) {
    const std::string line = jsonl_line(row);
    CHECK(line.back() == '\n');
    CHECK(line.find('\n') == line.size() - 1);
    const SweepRow back = parse_jsonl_row(std::string_view(line).substr(0, line.size() - 1), "r.jsonl", "line 1");
    CHECK(jsonl_line(back) == line);
  }
  CHECK(jsonl_line(ok).rfind(
            R"({"index":0,"params":{"training.micro_batch":1,"model":{"base":"gpt3-125m","layers":2},)", 0) == 0);

  const std::vector<std::string> cols = csv_result_columns(*ok.result);
  CHECK(std::is_sorted(cols.begin(), cols.end(), result_column_less));
  REQUIRE(cols.size() > 7);
  CHECK(std::vector<std::string>(cols.begin(), cols.begin() + 7) ==
        std::vector<std::string>{"fits", "step_time_s", "tokens_per_s", "mfu", "memory.peak_bytes",
                                 "memory.required_bytes", "memory.capacity_bytes"});
  CHECK(std::find(cols.begin(), cols.end(), "memory.breakdown_bytes.activations") != cols.end());
  CHECK(csv_header(s, cols).rfind("index,training.micro_batch,model,training.global_batch,fits,", 0) == 0);
  const std::vector<std::string> head = split_csv_line(csv_header(s, cols).substr(0, csv_header(s, cols).size() - 1));
  for (const SweepRow& row : {ok, bad}) {
    const std::string line = csv_line(s, cols, row);
    const std::vector<std::string> f = split_csv_line(line.substr(0, line.size() - 1));
    REQUIRE(f.size() == head.size());
    CHECK(f[0] == std::to_string(row.index));
    CHECK(f[2] == R"({"base":"gpt3-125m","layers":2})");  // quoted in the file, whole in the cell
    CHECK(f.back() == row.error);
  }
  CHECK(split_csv_line(R"(1,"a,""b""",,x)") == std::vector<std::string>{"1", "a,\"b\"", "", "x"});
}

TEST_CASE("a results file refuses to overwrite, resumes, and cuts a torn last line", "[io][sweep]") {
  TempDir dir;
  const Sweep s = parse_sweep(
      sweep_text(R"("grid": {"training.micro_batch": [1, 2, 4]}, "list": [{"training.global_batch": 4}])"), "sw.json");
  for (const std::string ext : {"jsonl", "csv"}) {
    const std::string f = dir.file("r." + ext);
    {
      ResultsFile out(f, s, false);
      out.append({run_sweep_point(s, 2), run_sweep_point(s, 0)});
    }
    {
      // A kill in the middle of a write.
      ResultsFile scratch(dir.file("scratch." + ext), s, false);
      scratch.append({run_sweep_point(s, 1)});
      const std::string row = read_file(dir.file("scratch." + ext));
      std::ofstream(f, std::ios::app) << row.substr(row.size() - 40, 20);
    }
    CHECK_THROWS_WITH(ResultsFile(f, s, false), Catch::Contains("already exists; pass --resume"));
    {
      ResultsFile out(f, s, true);
      CHECK(out.done_count() == 2);
      CHECK(out.done(0));
      CHECK_FALSE(out.done(1));
      CHECK(out.done(2));
      out.append({run_sweep_point(s, 1)});
    }
    const std::string text = read_file(f);
    CHECK(std::count(text.begin(), text.end(), '\n') == (ext == "csv" ? 4 : 3));
    CHECK(text.find("\n\n") == std::string::npos);
    ResultsFile again(f, s, true);
    CHECK(again.done_count() == 3);

    // Rows of another sweep are refused.
    const Sweep other = parse_sweep(
        sweep_text(R"("grid": {"training.micro_batch": [1, 8, 4]}, "list": [{"training.global_batch": 8}])"),
        "other.json");
    CHECK_THROWS_WITH(ResultsFile(f, other, true), Catch::Contains("another sweep"));
  }
  CHECK_THROWS_WITH(ResultsFile(dir.file("r.txt"), s, false), Catch::Contains("ending in .csv or .jsonl"));
}

TEST_CASE("CSV columns are the union of the rows' result fields, in one order whatever the arrival", "[io][sweep]") {
  TempDir dir;
  const Sweep s = parse_sweep(sweep_text(R"("grid": {"training.micro_batch": [1, 2, 3]})"), "sw.json");
  auto row = [](std::size_t i, Json result) {
    SweepRow r;
    r.index = i;
    r.params["training.micro_batch"] = i + 1;
    if (result.is_null())
      r.error = "bad, \"really\"";
    else
      r.result = std::move(result);
    return r;
  };
  const SweepRow a = row(0, Json{{"fits", true}, {"zeta", 1}, {"memory", {{"peak_bytes", 5}}}});
  const SweepRow b = row(1, Json{{"fits", false}, {"alpha", 2}, {"memory", {{"breakdown_bytes", {{"other", 3}}}}}});
  const SweepRow e = row(2, Json());
  const std::string one = dir.file("one.csv"), two = dir.file("two.csv");
  {
    ResultsFile out(one, s, false);
    out.append({e});
    out.append({a});  // widens the header: the error row is rewritten with empty cells
    out.append({b});
    CHECK(out.result_columns() ==
          std::vector<std::string>{"fits", "memory.peak_bytes", "alpha", "memory.breakdown_bytes.other", "zeta"});
  }
  {
    ResultsFile out(two, s, false);
    out.append({b, a, e});
  }
  const std::string text = read_file(one);
  CHECK(text.substr(0, text.find('\n')) ==
        "index,training.micro_batch,fits,memory.peak_bytes,alpha,memory.breakdown_bytes.other,zeta,error");
  CHECK(text.find("\n2,3,,,,,,\"bad, \"\"really\"\"\"\n") != std::string::npos);
  CHECK(text.find("\n0,1,true,5,,,1,\n") != std::string::npos);
  CHECK(text.find("\n1,2,false,,2,3,,\n") != std::string::npos);
  // The same lines, whatever order the rows came in.
  auto lines = [](std::string t) {
    std::vector<std::string> v;
    for (std::size_t p = 0, nl; (nl = t.find('\n', p)) != std::string::npos; p = nl + 1)
      v.push_back(t.substr(p, nl - p));
    std::sort(v.begin() + 1, v.end());
    return v;
  };
  CHECK(lines(text) == lines(read_file(two)));
  CHECK_FALSE(std::filesystem::exists(one + ".tmp"));
  ResultsFile resumed(one, s, true);
  CHECK(resumed.done_count() == 3);
}

TEST_CASE("the single-GPU baseline reads neither the network model, the cluster graph nor its link faults", "[io][sweep]") {
  // A lone GPU sends nothing: on_one_gpu simulates it on the analytic network, so a flow-network
  // scenario with a slow NIC has the baseline of the same job on the analytic network, and the
  // sweeps' cache key drops what it does not read.
  const Json flow = Json::parse(R"({"model": "gpt3-125m",
      "cluster": {"gpu": "h100-sxm", "topology": {"nodes": 2, "gpus_per_node": 8, "node": "nvswitch", "nics_per_node": 8,
                                                   "network": "infiniband-ndr", "fabric": "rail-optimized", "levels": 2}},
      "training": {"seq_len": 256, "micro_batch": 1, "global_batch": 32},
      "parallelism": {"dp": 16},
      "simulation": {"network": "flow"},
      "faults": {"links": [{"nic": [1, 3], "bandwidth_factor": 0.25}]}})");
  Json plain = flow;
  plain["cluster"] = Json{{"gpu", "h100-sxm"}, {"nodes", 2}, {"gpus_per_node", 8}};
  plain.erase("simulation");
  plain.erase("faults");
  const Scenario a = parse_scenario(flow, "flow.json"), b = parse_scenario(plain, "plain.json");
  REQUIRE(a.network == "flow");
  REQUIRE(on_one_gpu(a).network == "analytic");
  CHECK(on_one_gpu(a).link_faults.empty());
  const double ta = single_gpu_baseline(a), tb = single_gpu_baseline(b);
  CHECK(ta > 0);
  CHECK(ta == tb);
  CHECK(baseline_key(flow) == baseline_key(plain));
}
