#include "tools/cli/commands.hpp"

#include <array>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "tools/cli/calibrate.hpp"
#include "tools/cli/goodput.hpp"
#include "tools/cli/plan.hpp"
#include "tools/cli/collective.hpp"
#include "tools/cli/sweep.hpp"
#include "tools/cli/validate.hpp"
#include "tools/io/report.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

namespace scaleout {
namespace {

int g_exit = 0;

struct RunOptions {
  std::string scenario;
  std::vector<std::string> sets;
  std::string format = "text";
  std::string trace;
};

void run_command(const RunOptions& o) {
  const Scenario s = load_scenario(o.scenario, o.sets);
  const StepResult r = simulate_scenario(s, !o.trace.empty());
  if (!o.trace.empty()) write_trace(o.trace, r);
  const double base = single_gpu_baseline(s);
  if (o.format == "json") std::cout << result_json(s, r, base).dump(2) << "\n";
  else write_text_report(std::cout, s, r, base);
}

void list_command(const std::string& what) {
  if (what == "models") {
    std::printf("%-16s %-5s %6s %6s %5s %4s %7s %7s %9s\n", "name", "arch", "layers", "hidden", "heads", "kv", "ffn",
                "vocab", "params");
    for (const auto& n : zoo_names("models")) {
      const TransformerSpec m = load_model(n);
      std::printf("%-16s %-5s %6lld %6lld %5lld %4lld %7lld %7lld %8.2fB\n", n.c_str(),
                  m.arch == Arch::gpt ? "gpt" : "llama", (long long)m.layers, (long long)m.hidden, (long long)m.heads,
                  (long long)m.kv_heads, (long long)m.ffn, (long long)m.vocab, count_params(m).total() / 1e9);
    }
  } else {
    std::printf("%-10s %-28s %10s %10s %5s %12s  %s\n", "name", "description", "memory", "HBM", "SMs", "bf16 dense",
                "profile");
    for (const auto& n : zoo_names("gpus")) {
      const GpuSpec g = load_gpu(n);
      const ComputeProfile p = default_profile_for(g);
      std::printf("%-10s %-28s %7.1f GB %6.2f TB/s %5d %7.0f TFLOPS  %s\n", n.c_str(), g.description.substr(0, 28).c_str(),
                  g.memory.value / 1e9, g.hbm_bandwidth.value / 1e12, g.sms, g.peak(Dtype::bf16).value / 1e12,
                  p.measured_on == "datasheet" ? "datasheet" : p.name.c_str());
    }
  }
}

}  // namespace

int command_exit_code() { return g_exit; }

void register_commands(CLI::App& app) {
  auto run_opts = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "Simulate one training step of a scenario");
  run->add_option("scenario", run_opts->scenario, "Scenario file (JSON)")->required();
  run->add_option("--set", run_opts->sets, "Override a field: PATH=VALUE, e.g. training.micro_batch=4");
  run->add_option("--format", run_opts->format, "Output format")->check(CLI::IsMember({"text", "json"}));
  run->add_option("--trace", run_opts->trace, "Write a Chrome/Perfetto trace of the step to this file");
  run->callback([run_opts] { run_command(*run_opts); });

  auto what = std::make_shared<std::string>();
  CLI::App* list = app.add_subcommand("list", "List the shipped models or GPUs");
  list->add_option("what", *what, "models or gpus")->required()->check(CLI::IsMember({"models", "gpus"}));
  list->callback([what] { list_command(*what); });

  auto vopts = std::make_shared<ValidateOptions>();
  CLI::App* validate = app.add_subcommand("validate", "Compare predictions with measured or published runs");
  CLI::App* single = validate->add_subcommand("single-gpu", "Single-GPU steps measured by validation/single_gpu");
  single->add_option("measurements", vopts->measurements, "steps.jsonl")->required();
  single->add_option("--profile", vopts->profile, "auto, datasheet, or a profile file")->default_val("auto");
  single->add_option("--gpu", vopts->gpu, "GPU the measurements ran on")->default_val("h200");
  single->callback([vopts] { validate_single_gpu(*vopts, std::cout); });
  auto popts = std::make_shared<std::array<std::string, 3>>();
  CLI::App* parallel = validate->add_subcommand("parallel", "Published Megatron runs (SC21 Table 1, Korthikanti Table 5)");
  parallel->add_option("runs", (*popts)[0], "reference_runs.json")->required();
  parallel->add_option("--only", (*popts)[1], "Only rows whose id contains this");
  parallel->add_option("--network", (*popts)[2], "analytic or flow (simulation.network of every row)")
      ->check(CLI::IsMember({"analytic", "flow"}))
      ->default_val("analytic");
  parallel->callback([popts] { validate_parallel((*popts)[0], (*popts)[1], std::cout, (*popts)[2]); });
  validate->require_subcommand(1);

  auto copts = std::make_shared<CalibrateOptions>();
  CLI::App* calibrate = app.add_subcommand("calibrate", "Fit hardware profiles to measurements");
  CLI::App* fit = calibrate->add_subcommand(
      "fit", "Fit a profile to harness measurements: a compute profile from scaleout-harness's file, the links of a "
             "profile from scaleout-links's (schema scaleout-links/1, detected)");
  fit->add_option("measurements", copts->measurements,
                  "measurements.json from scaleout-harness, or links.json from scaleout-links")
      ->required();
  fit->add_option("-o,--out", copts->out, "Profile to write (JSON)")->required();
  fit->add_option("--gpu", copts->gpu, "Zoo GPU the measurements ran on (default: from the file)");
  fit->add_option("--attention-impl", copts->attention_impl,
                  "Attention rows to fit: torch_flash (PyTorch SDPA's flash backend), torch_cudnn, cudnn, own")
      ->default_val("torch_flash");
  fit->add_option("--residuals", copts->residuals, "Write every row's measured and predicted time (CSV)");
  fit->add_option("--links", copts->links, "Also fit this scaleout-links file into the profile's \"links\" section");
  fit->add_option("--cluster", copts->cluster,
                  "Links: the cluster measured (shipped name or file; default one node of the GPU, as many GPUs as measured)");
  fit->add_option("--profile", copts->profile,
                  "Links only: the profile to add \"links\" to (default: the GPU's shipped profile, if any)");
  fit->callback([copts] { calibrate_fit(*copts, std::cout); });
  auto hopts = std::make_shared<std::array<std::string, 3>>();
  CLI::App* host = calibrate->add_subcommand("host", "Fit a profile's host overheads to the calibration rows of steps.jsonl");
  host->add_option("steps", (*hopts)[0], "steps.jsonl from validation/single_gpu")->required();
  host->add_option("--profile", (*hopts)[1], "Profile to start from (file)")->required();
  host->add_option("-o,--out", (*hopts)[2], "Profile to write")->required();
  auto host_only = std::make_shared<bool>(false);
  host->add_flag("--host-only", *host_only, "Fit only the host costs (for a kernel-calibrated profile)");
  host->callback([hopts, host_only] { calibrate_host((*hopts)[0], (*hopts)[1], (*hopts)[2], std::cout, *host_only); });
  auto kopts = std::make_shared<std::array<std::string, 4>>();
  CLI::App* check = calibrate->add_subcommand(
      "check", "A profile's error on harness measurements it was not fitted to (another run, day or machine)");
  check->add_option("measurements", (*kopts)[0], "measurements.json from scaleout-harness")->required();
  check->add_option("--profile", (*kopts)[1], "Profile to check (file)")->required();
  check->add_option("--gpu", (*kopts)[2], "Zoo GPU the measurements ran on (default: from the file)");
  check->add_option("--residuals", (*kopts)[3], "Write every row's measured and predicted time (CSV)");
  check->callback([kopts] { calibrate_check((*kopts)[0], (*kopts)[1], (*kopts)[2], (*kopts)[3], std::cout); });
  auto aopts = std::make_shared<std::array<std::string, 4>>();
  CLI::App* acc = calibrate->add_subcommand(
      "fp8-accumulate", "Fit what FP8 GEMMs without fast accumulation cost (gemm_fp8_split_accumulate) to the harness's fp8_acc pairs");
  acc->add_option("measurements", (*aopts)[0], "measurements.json from scaleout-harness --only fp8_acc")->required();
  acc->add_option("--profile", (*aopts)[1], "Profile to start from (file)")->required();
  acc->add_option("-o,--out", (*aopts)[2], "Profile to write")->required();
  acc->add_option("--gpu", (*aopts)[3], "Zoo GPU the measurements ran on (default: from the file)");
  acc->callback([aopts] { calibrate_fp8_accumulate((*aopts)[0], (*aopts)[1], (*aopts)[3], (*aopts)[2], std::cout); });
  calibrate->require_subcommand(1);
  register_sweep_command(app);
  register_collective_command(app);
  register_plan_command(app);
  register_goodput_command(app);
}

}  // namespace scaleout
