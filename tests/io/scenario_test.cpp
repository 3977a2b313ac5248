// Bad input: each kind of mistake is refused with the file and the JSON path in the message.
#include <catch2/catch.hpp>

#include <string>

#include "tools/io/scenario.hpp"

using namespace scaleout;

namespace {

Json base_scenario() {
  return Json::parse(R"({
    "model": "llama-2-7b",
    "cluster": {"gpu": "h100-sxm"},
    "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 4, "precision": "bf16-mixed",
                 "optimizer": "adamw", "recompute": "full", "attention": "flash"}
  })");
}

std::string error_of(const Json& j) {
  try {
    parse_scenario(j, "s.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a valid scenario parses with zoo names resolved", "[io]") {
  const Scenario s = parse_scenario(base_scenario(), "s.json");
  CHECK(s.model.hidden == 4096);
  CHECK(s.gpu.name == "h100-sxm");
  CHECK(s.training.recompute == Recompute::full);
  CHECK(s.gpus() == 1);
}

TEST_CASE("unknown keys are refused with their path", "[io]") {
  Json j = base_scenario();
  j["training"]["micro_batchs"] = 2;
  CHECK(error_of(j) == "s.json: /training/micro_batchs: unknown key");
  j = base_scenario();
  j["extra"] = 1;
  CHECK(error_of(j) == "s.json: /extra: unknown key");
}

TEST_CASE("wrong types name what was expected", "[io]") {
  Json j = base_scenario();
  j["training"]["seq_len"] = "long";
  CHECK(error_of(j) == "s.json: /training/seq_len: expected an integer, got \"long\"");
  j = base_scenario();
  j["training"]["recompute"] = "some";
  CHECK(error_of(j).find("/training/recompute: expected one of \"none\", \"selective\", \"full\"") != std::string::npos);
}

TEST_CASE("missing required fields are named", "[io]") {
  Json j = base_scenario();
  j["training"].erase("seq_len");
  CHECK(error_of(j) == "s.json: /training/seq_len: missing required field");
  j = base_scenario();
  j.erase("cluster");
  CHECK(error_of(j) == "s.json: /cluster: missing required field");
}

TEST_CASE("impossible values are refused", "[io]") {
  Json j = base_scenario();
  j["training"]["micro_batch"] = 0;
  CHECK(error_of(j).find("s.json: /training/micro_batch: expected an integer in [1,") == 0);
  j = base_scenario();
  j["training"]["global_batch"] = 3;
  j["training"]["micro_batch"] = 2;
  CHECK(error_of(j).find("/training/global_batch: 3 is not a multiple of micro_batch=2") != std::string::npos);
  j = base_scenario();
  j["parallelism"] = {{"tp", 3}, {"dp", 1}};
  j["cluster"]["gpus_per_node"] = 3;
  CHECK(error_of(j).find("/parallelism/tp: 3 does not divide heads=32") != std::string::npos);
  j = base_scenario();
  j["parallelism"] = {{"dp", 2}};
  CHECK(error_of(j).find("dp*tp*pp*cp = 2 but the cluster has 1 GPUs") != std::string::npos);
  j = base_scenario();
  j["cluster"]["memory"] = "lots";
  CHECK(error_of(j).find("/cluster/memory: expected a size like") != std::string::npos);
  j = base_scenario();
  j["training"]["seq_len"] = 1e30;
  CHECK(error_of(j).find("/training/seq_len: expected an integer") != std::string::npos);
  j = base_scenario();
  j["cluster"]["gpus_per_node"] = 4;
  j["parallelism"] = {{"pp", 4}, {"pp_schedule", "zb-h1"}, {"virtual_stages", 2}};
  CHECK(error_of(j).find("/parallelism/virtual_stages: zb-h1 runs one chunk per stage") != std::string::npos);
  j["parallelism"] = {{"pp", 2}, {"dp", 2}, {"pp_schedule", "zb-h1"}, {"fsdp", "full_shard"}};
  CHECK(error_of(j).find("/parallelism/pp_schedule: zb-h1 with sharded parameters") != std::string::npos);
  j["parallelism"] = {{"pp", 2}, {"dp", 2}, {"pp_schedule", "zb-h1"}, {"zero", 2}};
  CHECK(error_of(j) == "no error");
}

TEST_CASE("unknown zoo names list what is known", "[io]") {
  Json j = base_scenario();
  j["model"] = {{"base", "llama-9-7b"}};
  CHECK(error_of(j).find("s.json: /model/base: unknown model \"llama-9-7b\" (known: codellama-34b,") == 0);
  j = base_scenario();
  j["cluster"]["gpu"] = "h300";
  CHECK(error_of(j).find("s.json: /cluster/gpu: unknown GPU \"h300\"") == 0);
  j = base_scenario();
  j["cluster"]["gpu"] = "../../etc/passwd";
  CHECK(error_of(j).find("unknown GPU") != std::string::npos);
}

TEST_CASE("model overrides on a zoo base, with shape checks", "[io]") {
  Json j = base_scenario();
  j["model"] = {{"base", "llama-2-7b"}, {"layers", 4}};
  CHECK(parse_scenario(j, "s.json").model.layers == 4);
  j["model"] = {{"base", "llama-2-7b"}, {"kv_heads", 5}};
  CHECK(error_of(j).find("/model/kv_heads: 5 does not divide heads=32") != std::string::npos);
}

TEST_CASE("set overrides any path, turning a zoo name into a base", "[io]") {
  Json j = base_scenario();
  apply_override(j, "training.micro_batch=4");
  apply_override(j, "/training/global_batch=8");
  apply_override(j, "model.layers=2");
  apply_override(j, "training.precision=bf16");
  const Scenario s = parse_scenario(j, "s.json");
  CHECK(s.training.micro_batch == 4);
  CHECK(s.model.layers == 2);
  CHECK(s.training.precision.name == "bf16");
  CHECK_THROWS_AS(apply_override(j, "novalue"), InputError);
}

TEST_CASE("a scenario's cluster may name a shipped topology, which sets its links", "[io]") {
  Json j = base_scenario();
  j["cluster"] = {{"gpu", "a100-80g"}, {"topology", "dgx-a100-2n"}};
  j["parallelism"] = {{"dp", 16}};
  j["training"]["global_batch"] = 16;
  const Scenario s = parse_scenario(j, "s.json");
  CHECK(s.nodes == 2);
  CHECK(s.gpus_per_node == 8);
  CHECK(s.intra_node_bandwidth == Approx(300e9));  // 600 GB/s NVLink both ways
  CHECK(s.inter_node_bandwidth > 0);
  j["cluster"]["gpu"] = "h100-sxm";
  CHECK(error_of(j).find("/cluster/topology: cluster \"dgx-a100-2n\" has a100-80g GPUs") != std::string::npos);
}
