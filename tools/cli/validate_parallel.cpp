// `scaleout validate parallel`: the published Megatron runs (Narayanan et al. SC21 Table 1,
// Korthikanti et al. 2022 Table 5) as scenarios, the prediction beside the published iteration
// time. Nothing here is fitted to these rows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "tools/cli/validate.hpp"
#include "tools/io/simulate.hpp"

namespace scaleout {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Json reference_scenario(const Json& row) {
  const std::string id = row.at("id").get<std::string>();
  const bool sc21 = id.rfind("megatron-sc21", 0) == 0;
  const std::int64_t gpus = row.at("n_gpus").get<std::int64_t>();
  const std::int64_t h = row.at("hidden").get<std::int64_t>();
  const std::string rc = row.at("activation_recompute").get<std::string>();
  const std::int64_t v = row.value("virtual_pipeline_chunks", Json(1)).is_null() ? 1 : row.value("virtual_pipeline_chunks", Json(1)).get<std::int64_t>();
  const std::int64_t pp = row.at("pp").get<std::int64_t>();
  Json par = {{"dp", row.at("dp")}, {"tp", row.at("tp")}, {"pp", pp},
              {"sequence_parallel", row.value("sequence_parallel", false)}};
  if (pp > 1) {
    par["pp_schedule"] = v > 1 ? "interleaved" : "1f1b";
    if (v > 1) par["virtual_stages"] = v;
  }
  // Megatron (2021) all-reduced the fp16 gradients of its fp16 model.
  if (sc21) par["grad_reduce_dtype"] = "fp16";
  // Megatron's own data parallelism (--DDP-impl, default 'local' in megatron/arguments.py until
  // 2023): LocalDDP.allreduce_gradients() runs once after the backward passes of all
  // micro-batches, one coalesced all-reduce of the flattened gradients per dtype, not overlapped
  // with backward as torch DDP's buckets are.
  par["overlap_grad_reduce"] = false;
  par["ddp_bucket"] = "1 TB";
  // Its pipeline transfers were synchronous (p2p_communication.py: batch_isend_irecv, wait,
  // torch.cuda.synchronize), until overlap_p2p_comm (2023).
  par["pipeline_p2p"] = "blocking";
  return Json{
      {"name", id},
      {"model",
       {{"arch", "gpt"}, {"layers", row.at("n_layers")}, {"hidden", h}, {"heads", row.at("n_heads")},
        {"ffn", row.value("ffn_hidden", Json(4 * h)).is_null() ? Json(4 * h) : row.at("ffn_hidden")},
        {"vocab", row.at("vocab")}, {"tied_embeddings", true}, {"max_positions", row.at("seq_len")}}},
      {"cluster", {{"gpu", "a100-80g"}, {"nodes", std::max<std::int64_t>(1, gpus / 8)}, {"gpus_per_node", std::min<std::int64_t>(8, gpus)},
                   {"nic_bandwidth", "200 Gb/s"}}},
      {"training",
       {{"seq_len", row.at("seq_len")}, {"micro_batch", row.at("micro_batch_size")}, {"global_batch", row.at("global_batch_size")},
        {"precision", sc21 ? "megatron-fp16" : "megatron-bf16"}, {"recompute", rc.rfind("full", 0) == 0 ? "full" : "selective"},
        {"attention", "naive"}, {"dropout", 0.1}}},
      {"parallelism", par}};
}

double published_iteration_time(const Json& row) {
  if (row.contains("iteration_time_s") && row["iteration_time_s"].is_number()) return row["iteration_time_s"].get<double>();
  // SC21 Table 1 gives TFLOP/s per GPU, counted with Megatron's Eq. 3 (recompute included):
  // F = 96 B s l h^2 (1 + s / 6h + V / 16 l h).
  const double B = row.at("global_batch_size").get<double>(), s = row.at("seq_len").get<double>();
  const double l = row.at("n_layers").get<double>(), h = row.at("hidden").get<double>(), V = row.at("vocab").get<double>();
  const double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return F / (row.at("tflops_per_gpu").get<double>() * 1e12 * row.at("n_gpus").get<double>());
}

bool validate_parallel(const std::string& file, const std::string& only, std::ostream& os, const std::string& network) {
  const Json rows = load_json_file(file);
  if (!rows.is_array()) throw InputError(file, "", "expected an array of published runs");
  os << "| run | GPUs | dp/tp/pp/v | published iteration | predicted | error | bubble | exposed comm | peak memory | fits |\n";
  os << "|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n";
  std::vector<double> errs;
  char buf[512];
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    const std::string id = row.value("id", std::string("?"));
    if (!only.empty() && id.find(only) == std::string::npos) continue;
    const bool has_time = (row.contains("iteration_time_s") && row["iteration_time_s"].is_number()) ||
                          (row.contains("tflops_per_gpu") && row["tflops_per_gpu"].is_number());
    if (!has_time) continue;  // Table 4 (per-layer times) and Appendix C rows carry no iteration time
    Json sj = reference_scenario(row);
    sj["simulation"] = {{"network", network}};
    const Scenario s = parse_scenario(sj, file + "#" + id);
    const auto t0 = std::chrono::steady_clock::now();
    const StepResult r = simulate_scenario(s);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double pub = published_iteration_time(row);
    const double err = (r.step_time_s - pub) / pub;
    errs.push_back(std::fabs(err));
    std::snprintf(buf, sizeof buf, "| %s | %lld | %lld/%lld/%lld/%lld | %.2f s | %.2f s | %+.1f%% | %.2f s | %.2f s | %.1f GB | %s |\n",
                  id.c_str(), (long long)s.gpus(), (long long)s.parallelism.dp, (long long)s.parallelism.tp,
                  (long long)s.parallelism.pp, (long long)s.parallelism.virtual_stages, pub, r.step_time_s, 100 * err,
                  r.pipeline_bubble_s, r.exposed_comm_s, r.peak_bytes / 1e9, r.fits ? "yes" : "NO");
    os << buf << std::flush;
    (void)wall;
  }
  const double med = median_of(errs), worst = errs.empty() ? 0 : *std::max_element(errs.begin(), errs.end());
  std::snprintf(buf, sizeof buf, "\nRows: %zu. Iteration time |error|: median %.1f%%, worst %.1f%% (targets: 5%% and 12%%): %s\n",
                errs.size(), 100 * med, 100 * worst, med <= 0.05 && worst <= 0.12 ? "MET" : "NOT MET");
  os << buf;
  return med <= 0.05 && worst <= 0.12;
}

}  // namespace scaleout
