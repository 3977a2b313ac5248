// The link fit recovers known link and algorithm figures from NCCL timings synthesised by the
// simulator's own collective model (with 1 % noise), a malformed links file is refused with its
// JSON path, and a profile's "links" reach `scaleout collective`.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "hardware/calibration/link_fit.hpp"
#include "sim/network/collectives.hpp"
#include "tools/cli/calibrate.hpp"
#include "tools/cli/collective.hpp"
#include "tools/io/cluster.hpp"
#include "tools/io/input_error.hpp"
#include "tools/io/scenario.hpp"

using namespace scaleout;

namespace {

// Deterministic noise in [-amplitude, amplitude].
double noise(std::size_t i, double amplitude) {
  std::uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return amplitude * (2.0 * double(x >> 11) / double(1ull << 53) - 1.0);
}

// The rows scaleout-links takes on 8 GPUs, timed by `truth`.
LinkMeasurements synthesise(const ClusterSpec& truth, double amplitude) {
  LinkMeasurements m;
  m.gpu_name = "NVIDIA H200";
  m.gpu_count = 8;
  m.measured_on = "synthetic";
  auto add = [&](CollectiveKind k, std::vector<int> ranks, const char* algo) {
    for (double b = 8; b <= 8.0 * (1 << 30); b *= 4) {
      LinkRow r;
      r.kind = k;
      r.ranks = ranks;
      r.algorithm = algo;
      r.bytes = b;
      r.seconds = predict_link_row(truth, r) * (1 + noise(m.rows.size(), amplitude));
      m.rows.push_back(r);
    }
  };
  for (int n : {2, 4, 8}) {
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i) ranks.push_back(i);
    add(CollectiveKind::all_reduce, ranks, "ring");
    add(CollectiveKind::all_reduce, ranks, "tree");
    add(CollectiveKind::all_reduce, ranks, "auto");
    add(CollectiveKind::all_gather, ranks, "auto");
    add(CollectiveKind::reduce_scatter, ranks, "auto");
    add(CollectiveKind::broadcast, ranks, "auto");
    add(CollectiveKind::all_to_all, ranks, "auto");
    add(CollectiveKind::send_recv, ranks, "auto");
  }
  return m;
}

}  // namespace

TEST_CASE("the link fit recovers link, ring and tree figures from the simulator's own timings", "[hardware][calibration]") {
  // Closed form on one NVSwitch node (ring, Simple): t = base + 2(p-1)(hw + ring step) + 2(p-1)/p S / (B e eta);
  // the fit must invert exactly that, so figures moved away from the defaults must come back.
  const ClusterSpec base = load_cluster("dgx-h200");
  ClusterSpec truth = base;
  truth.nvlink_efficiency = 0.70;
  truth.tuning.step_latency_s[0] = 0.8e-6;
  truth.tuning.ring_step_latency_s = 0.3e-6;
  truth.tuning.ring_bus_efficiency = 0.9;
  truth.tuning.tree_step_latency_s = 1.5e-6;
  truth.tuning.tree_bus_efficiency = 0.8;
  const LinkMeasurements m = synthesise(truth, 0.01);
  const LinkFitReport rep = fit_links(m, base);

  REQUIRE(rep.classes[0].fitted);
  CHECK_FALSE(rep.classes[0].from_copies);
  CHECK(rep.classes[0].efficiency == Approx(0.70).epsilon(0.03));
  CHECK(rep.classes[0].step_latency_s == Approx(0.8e-6).margin(0.3e-6));
  REQUIRE(rep.ring.fitted);
  CHECK(rep.ring.bus_efficiency == Approx(0.9).epsilon(0.03));
  CHECK(rep.ring.step_latency_s == Approx(0.3e-6).margin(0.2e-6));
  REQUIRE(rep.tree.fitted);
  CHECK(rep.tree.bus_efficiency == Approx(0.8).epsilon(0.03));
  CHECK(rep.tree.step_latency_s == Approx(1.5e-6).margin(0.3e-6));
  CHECK_FALSE(rep.classes[1].fitted);  // no PCIe between these GPUs
  // Held out: every 4th size and the 4-GPU groups; large messages within the noise.
  CHECK(rep.stats.held_out > 50);
  CHECK(rep.stats.held_out_large > 10);
  CHECK(rep.stats.busbw_median_rel_error < 0.02);
  CHECK(rep.stats.held_out_median_rel_error < 0.02);
  // The profile section carries what was fitted.
  REQUIRE(rep.links.nvlink_efficiency);
  CHECK(*rep.links.nvlink_efficiency == Approx(rep.classes[0].efficiency));
  CHECK(rep.links.tuning.ring_bus_efficiency == Approx(rep.ring.bus_efficiency));
}

TEST_CASE("without noise the link fit reproduces every row", "[hardware][calibration]") {
  const ClusterSpec base = load_cluster("dgx-h200");
  ClusterSpec truth = base;
  truth.nvlink_efficiency = 0.75;
  truth.tuning.ring_bus_efficiency = 0.95;
  truth.tuning.tree_bus_efficiency = 0.85;
  const LinkMeasurements m = synthesise(truth, 0.0);  // the report points into it
  const LinkFitReport rep = fit_links(m, base);
  for (const auto& r : rep.residuals)
    if (std::fabs(r.predicted_s / r.row->seconds - 1) > 1e-3)
      WARN(collective_name(r.row->kind) << " " << r.row->ranks.size() << " " << r.row->algorithm << " " << r.row->bytes
                                        << " " << r.row->seconds << " " << r.predicted_s << " " << r.algorithm);
  CHECK(rep.stats.held_out_worst_rel_error < 1e-3);
  CHECK(rep.stats.fitted_median_rel_error < 1e-4);
}

TEST_CASE("a PCIe machine's link class is fitted from cudaMemcpyPeer copies when NCCL gave none", "[hardware][calibration]") {
  const ClusterSpec base = load_cluster("pcie-h100-8");
  ClusterSpec truth = base;
  truth.pcie_efficiency = 0.6;
  truth.tuning.step_latency_s[1] = 2e-6;
  LinkMeasurements m;
  m.gpu_name = "NVIDIA H100 PCIe";
  m.gpu_count = 8;
  for (int dst : {1, 2, 5})
    for (double b = 8; b <= 1e9; b *= 4) {
      LinkRow r;
      r.source = LinkRow::Source::p2p;
      r.method = "memcpy";
      r.link = "pcie";
      r.src = 0;
      r.dst = dst;
      r.bytes = b;
      r.seconds = predict_link_row(truth, r);
      m.rows.push_back(r);
    }
  const LinkFitReport rep = fit_links(m, base);
  REQUIRE(rep.classes[1].fitted);
  CHECK(rep.classes[1].from_copies);
  CHECK(rep.classes[1].efficiency == Approx(0.6).epsilon(0.01));
  CHECK(rep.classes[1].step_latency_s == Approx(2e-6).margin(0.05e-6));
  // The copies' own line, latency + bytes / bandwidth, mixes pairs behind one PCIe switch with pairs
  // through the host bridge: near the link's figure, not on it.
  REQUIRE_FALSE(rep.copies.empty());
  CHECK(rep.copies[0].bandwidth == Approx(0.6 * base.pcie_bandwidth.value).epsilon(0.1));
}

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/scaleout_link_fit_test_" + name;
  std::ofstream(path) << text;
  return path;
}

const char* kHeader = R"("schema": "scaleout-links/1", "kind": "links", "date": "2026-12-03T00:00:00Z",
  "driver": "580.0", "nccl_version": "2.28.9", "gpu": {"name": "NVIDIA H200", "count": 2, "memory_bytes": 1},
  "topology": {"nvidia_smi_topo_m": "GPU0 X NV18\nGPU1 NV18 X", "link_classes": []}, "p2p": [], )";

std::string error_of(const std::string& path) {
  try {
    read_link_measurements(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a malformed links file is refused with the file and the JSON path", "[hardware][calibration]") {
  const std::string row = R"({"op": "all_reduce", "ranks": [0, 1], "algorithm": "ring", "bytes": 1024, "time_s": 1e-5,
    "min_s": 1e-5, "max_s": 1e-5, "reps": 5, "inner": 10, "algbw_gbps": 0.1, "busbw_gbps": 0.1})";
  const std::string good = write_temp("good.json", std::string("{") + kHeader + R"("collectives": [)" + row + "]}");
  const LinkMeasurements m = read_link_measurements(good);
  REQUIRE(m.rows.size() == 1);
  CHECK(m.rows[0].kind == CollectiveKind::all_reduce);
  CHECK(m.rows[0].algorithm == "ring");
  CHECK(m.measured_on.find("NCCL 2.28.9") != std::string::npos);

  std::string bad = row;
  bad.replace(bad.find("1e-5"), 4, "\"fast\"");
  CHECK_THAT(error_of(write_temp("time.json", std::string("{") + kHeader + R"("collectives": [)" + row + "," + bad + "]}")),
             Catch::Contains("time.json: /collectives/1/time_s: expected a number"));
  bad = row;
  bad.replace(bad.find("[0, 1]"), 6, "[0, 7]");
  CHECK_THAT(error_of(write_temp("rank.json", std::string("{") + kHeader + R"("collectives": [)" + bad + "]}")),
             Catch::Contains("rank.json: /collectives/0/ranks/1: expected a GPU index in [0, 1]"));
  bad = row;
  bad.replace(bad.find("\"op\""), 4, "\"colour\": 1, \"op\"");
  CHECK_THAT(error_of(write_temp("key.json", std::string("{") + kHeader + R"("collectives": [)" + bad + "]}")),
             Catch::Contains("key.json: /collectives/0/colour: unknown key"));
  bad = row;
  bad.replace(bad.find("\"ring\""), 6, "\"nvls\"");
  CHECK_THAT(error_of(write_temp("algo.json", std::string("{") + kHeader + R"("collectives": [)" + bad + "]}")),
             Catch::Contains("algo.json: /collectives/0/algorithm"));
  CHECK_THAT(error_of(write_temp("schema.json", R"({"schema": "scaleout-measurements/1"})")),
             Catch::Contains("schema.json: /schema: expected \"scaleout-links/1\""));
  // A row the harness could not take is skipped, not an error.
  const std::string failed = write_temp(
      "failed.json", std::string("{") + kHeader +
                         R"("collectives": [{"op": "all_reduce", "ranks": [0, 1], "algorithm": "auto", "error": "ncclCommInitAll: unhandled cuda error"}]})");
  CHECK(read_link_measurements(failed).rows.empty());
}

TEST_CASE("a profile's links reach scaleout collective; unknown keys in them are errors", "[hardware][calibration]") {
  const std::string profile = write_temp("profile.json", R"({"name": "t", "measured_on": "test", "links": {
    "measured_on": "synthetic", "nvlink": {"efficiency": 0.5, "step_latency_us": 0},
    "ring": {"step_latency_us": 0, "bus_efficiency": 1.0}}})");
  CollectiveOptions o;
  o.cluster = "dgx-h200";
  o.op = "all_gather";
  o.sizes = "1GiB";
  o.format = "json";
  o.profile = "datasheet";
  std::ostringstream a, b;
  collective_command(o, a);
  o.profile = profile;
  collective_command(o, b);
  const double t_datasheet = Json::parse(a.str())[0]["time_s"].get<double>();
  const double t_profile = Json::parse(b.str())[0]["time_s"].get<double>();
  // All-gather of 1 GiB is bandwidth-bound: half the NVLink efficiency (0.824 -> 0.5) takes 0.824 / 0.5 as long.
  CHECK(t_profile / t_datasheet == Approx(0.824 / 0.5).epsilon(0.01));

  const std::string bad = write_temp("bad_profile.json", R"({"name": "t", "measured_on": "test", "links": {
    "measured_on": "x", "nvlink": {"efficiency": 0.5, "latency": "1 us"}}})");
  o.profile = bad;
  std::ostringstream c;
  CHECK_THROWS_WITH(collective_command(o, c), Catch::Contains("bad_profile.json: /links/nvlink/latency: unknown key"));
  // A cluster file that sets its own efficiency keeps it.
  ClusterSpec explicit_spec = load_cluster("dgx-h200");
  explicit_spec.explicit_nvlink_efficiency = true;
  LinkProfile l;
  l.nvlink_efficiency = 0.5;
  CHECK(apply_link_profile(explicit_spec, l).nvlink_efficiency == Approx(explicit_spec.nvlink_efficiency));
}
