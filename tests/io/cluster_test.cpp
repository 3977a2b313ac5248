// Cluster files: the shipped ones parse and are connected; bases and defaults; strict errors that
// name the file and the JSON path.
#include <catch2/catch.hpp>

#include "tools/io/cluster.hpp"

using namespace scaleout;

namespace {

std::string error_of(const Json& j) {
  try {
    parse_cluster(j, "c.json", "");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every shipped cluster parses and is connected", "[io]") {
  const auto names = cluster_names();
  REQUIRE(names.size() >= 8);
  for (const auto& n : names) {
    INFO(n);
    std::string file;
    const ClusterSpec c = load_cluster(n, &file);
    const Topology t = cluster_topology(c, file, "");
    CHECK(t.gpu_count() == c.gpus());
  }
}

TEST_CASE("dgx-a100: 8 A100 on NVSwitch with 8 HDR NICs; the 4-node form inherits it", "[io]") {
  const ClusterSpec a = load_cluster("dgx-a100");
  CHECK(a.gpus_per_node == 8);
  CHECK(a.node_kind == NodeKind::nvswitch);
  CHECK(a.nvlink_bandwidth.value == Approx(600e9));
  CHECK(a.nvlink_efficiency == Approx(0.8));
  CHECK(a.nics_per_node == 8);
  CHECK(a.nic_bandwidth.value == Approx(25e9));  // "infiniband-hdr": 200 Gb/s
  CHECK(a.generation == GpuGeneration::ampere);
  CHECK_FALSE(a.nvls);
  const ClusterSpec four = load_cluster("dgx-a100-4n");
  CHECK(four.nodes == 4);
  CHECK(four.gpu == "a100-80g");
  CHECK(four.nic_bandwidth.value == Approx(25e9));
  const ClusterSpec h = load_cluster("dgx-h100");
  CHECK(h.nvls);
  CHECK(h.nic_bandwidth.value == Approx(50e9));
  CHECK(h.nvlink_efficiency == Approx(20.6 / 25));
}

TEST_CASE("defaults come from the GPU of the zoo", "[io]") {
  const ClusterSpec c = parse_cluster(Json{{"gpu", "h100-sxm"}, {"nodes", 2}}, "c.json", "");
  CHECK(c.gpus_per_node == 8);
  CHECK(c.node_kind == NodeKind::nvswitch);
  CHECK(c.nvlink_bandwidth.value == Approx(900e9));
  CHECK(c.nics_per_node == 8);
  CHECK(c.name == "c");
}

TEST_CASE("cluster errors name the file and the JSON path", "[io]") {
  const Json good = {{"gpu", "a100-80g"}, {"nodes", 2}};
  auto with = [&](const char* key, Json v) {
    Json j = good;
    j[key] = std::move(v);
    return error_of(j);
  };
  CHECK_THAT(with("nodez", 3), Catch::Contains("c.json: /nodez: unknown key"));
  CHECK_THAT(with("nic_bandwidth", "200 Gbps"), Catch::Contains("c.json: /nic_bandwidth: unknown unit"));
  CHECK_THAT(with("nic_bandwidth", 200), Catch::Contains("c.json: /nic_bandwidth: expected a bandwidth"));
  CHECK_THAT(with("fabric", "torus"), Catch::Contains("c.json: /fabric: expected one of"));
  CHECK_THAT(with("nodes", 0), Catch::Contains("c.json: /nodes: expected an integer in [1,"));
  CHECK_THAT(with("oversubscription", 0.5), Catch::Contains("c.json: /oversubscription"));
  CHECK_THAT(with("base", "dgx-z"), Catch::Contains("c.json: /base: unknown cluster \"dgx-z\""));
  CHECK_THAT(with("gpu", "h900"), Catch::Contains("c.json: /gpu: unknown GPU"));
  CHECK_THAT(with("nvls", true), Catch::Contains("c.json: /nvls: NVLink SHARP needs"));
  CHECK_THAT(error_of(Json{{"gpu", "a100-80g"}, {"network", "roce"}}), Catch::Contains("c.json: /nic_bandwidth:"));
  CHECK_THAT(error_of(Json{{"nodes", 2}}), Catch::Contains("c.json: /gpu: missing required field"));
  CHECK_THAT(error_of(Json{{"gpu", "l40s"}, {"node", "nvswitch"}}), Catch::Contains("c.json: /nvlink_bandwidth"));
}

TEST_CASE("a disconnected cluster is an input error naming the key", "[io]") {
  const ClusterSpec c = parse_cluster(Json{{"gpu", "a100-80g"}, {"nodes", 2}, {"nics_per_node", 0}}, "c.json", "/cluster");
  try {
    cluster_topology(c, "c.json", "/cluster");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("c.json: /cluster/nics_per_node: the cluster is not connected"));
  }
}
