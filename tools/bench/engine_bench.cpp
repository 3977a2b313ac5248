// Benchmarks (Google Benchmark; not part of the test suite): the event queue's throughput and
// whole simulated steps of the scenarios the speed issue names. Run:
//   ./build/tools/bench/scaleout_bench --benchmark_counters_tabular=true
// or tools/bench/table.sh for the README's table (each step in a process of its own, so that the
// peak_MB counter, the process's peak resident memory, is that step's).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sim/engine/simulator.hpp"
#include "sim/engine/stream.hpp"
#include "tools/cli/huge_pages.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

// Events scheduled at pseudo-random times, popped in order: heap push/pop with closures.
static void BM_EventQueue(benchmark::State& state) {
  const auto n = static_cast<std::int64_t>(state.range(0));
  for (auto _ : state) {
    Simulator sim;
    std::uint64_t x = 88172645463325252ull, sum = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      sim.schedule_at(Time::from_ps(std::int64_t(x % 1000000000)), [&sum, i] { sum += std::uint64_t(i); });
    }
    sim.run();
    benchmark::DoNotOptimize(sum);
  }
  state.counters["events/s"] = benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EventQueue)->Arg(1 << 16)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

// Tasks on two streams with cross-stream dependencies, as the step simulation builds them.
static void BM_Streams(benchmark::State& state) {
  const auto n = static_cast<std::int64_t>(state.range(0));
  for (auto _ : state) {
    Simulator sim;
    StreamExecutor ex(sim);
    const StreamId host = ex.add_stream(), gpu = ex.add_stream();
    for (std::int64_t i = 0; i < n; ++i) {
      const TaskId h = ex.add(host, Time::from_us(5));
      ex.add(gpu, Time::from_us(double(i % 7) + 1), {h});
    }
    ex.start();
    sim.run();
    benchmark::DoNotOptimize(ex.finished_count());
  }
  state.counters["tasks/s"] = benchmark::Counter(2.0 * double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Streams)->Arg(1 << 16)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

static void run_scenario_with(benchmark::State& state, const std::string& rel, const std::vector<std::string>& sets) {
  const Scenario s = load_scenario(data_dir() + "/" + rel, sets);
  std::uint64_t events = 0;
  for (auto _ : state) {
    const StepResult r = simulate_scenario(s);
    events = r.events;
    benchmark::DoNotOptimize(r.step_time_s);
  }
  state.counters["gpus"] = double(s.gpus());
  state.counters["events"] = double(events);
  state.counters["events/s"] = benchmark::Counter(double(events) * double(state.iterations()), benchmark::Counter::kIsRate);
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  state.counters["peak_MB"] = double(u.ru_maxrss) / 1024.0;  // the whole process's so far (Linux: kB)
}

static void run_scenario(benchmark::State& state, const std::string& rel) { run_scenario_with(state, rel, {}); }
// The same plans on the flow-level network (NCCL's algorithms as flows on the cluster graph).
static void run_flow(benchmark::State& state, const std::string& rel) {
  run_scenario_with(state, rel, {"simulation.network=flow"});
}
// Every GPU simulated (no folding): what stragglers and link faults need.
static void run_unfolded(benchmark::State& state, const std::string& rel, std::vector<std::string> sets) {
  sets.push_back("simulation.fold=off");
  run_scenario_with(state, rel, sets);
}
BENCHMARK_CAPTURE(run_scenario, llama3_8b_8gpu, std::string("scenarios/parallel/llama3-8b-8xh100.json"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scenario, dp_1024gpu, std::string("scenarios/parallel/gpt2-xl-dp-1024xa100.json"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scenario, gpt3_175b_1024gpu, std::string("scenarios/parallel/gpt3-175b-1024-a100.json"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scenario, llama3_405b_16384gpu, std::string("scenarios/parallel/llama3-405b-16k-h100.json"))->Unit(benchmark::kMillisecond);

// The heaviest one-GPU scenario shipped: 80 layers with LoRA adapters on every linear layer.
BENCHMARK_CAPTURE(run_scenario, llama2_70b_qlora_1gpu, std::string("scenarios/seed/70b-qlora-h100.json"))->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(run_flow, llama3_8b_8gpu, std::string("scenarios/parallel/llama3-8b-8xh100.json"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_flow, dp_1024gpu, std::string("scenarios/parallel/gpt2-xl-dp-1024xa100.json"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_flow, gpt3_175b_1024gpu, std::string("scenarios/parallel/gpt3-175b-1024-a100.json"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_flow, llama3_405b_16384gpu, std::string("scenarios/parallel/llama3-405b-16k-h100.json"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_unfolded, llama3_8b_8gpu, std::string("scenarios/parallel/llama3-8b-8xh100.json"), std::vector<std::string>{})
    ->Unit(benchmark::kMillisecond);
// 64 GPUs: Llama-3-8B over 8 nodes, DP 64 with FSDP, every GPU simulated.
BENCHMARK_CAPTURE(run_unfolded, llama3_8b_64gpu, std::string("scenarios/parallel/llama3-8b-8xh100.json"),
                  std::vector<std::string>{"cluster.nodes=8", "parallelism.dp=64", "training.global_batch=64"})
    ->Unit(benchmark::kMillisecond);

// A straggler (GPU 12345 20 % slower): folded by symmetry classes, exact for every GPU.
BENCHMARK_CAPTURE(run_scenario_with, llama3_405b_16384gpu_straggler, std::string("scenarios/parallel/llama3-405b-16k-h100.json"),
                  std::vector<std::string>{R"(faults.stragglers=[{"gpu":12345,"slowdown":1.2}])"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scenario_with, llama3_8b_64gpu_straggler, std::string("scenarios/parallel/llama3-8b-8xh100.json"),
                  std::vector<std::string>{"cluster.nodes=8", "parallelism.dp=64", "training.global_batch=64",
                                           R"(faults.stragglers=[{"gpu":5,"slowdown":1.2}])"})
    ->Unit(benchmark::kMillisecond);

// 64 GPUs with pipelines (8 nodes of H100, Llama-3-8B at 8K tokens): TP 2 x PP 4 x DP 8, 1F1B,
// 32 micro-batches; TP 4 x PP 8 x DP 2, interleaved (2 chunks), 128 micro-batches; the same on
// the flow network.
static const std::vector<std::string> kPipe64a{"cluster.nodes=8", "parallelism.fsdp=", "parallelism.dp=8", "parallelism.tp=2",
                                               "parallelism.pp=4", "training.global_batch=256"};
static const std::vector<std::string> kPipe64b{"cluster.nodes=8", "parallelism.fsdp=", "parallelism.dp=2", "parallelism.tp=4",
                                               "parallelism.pp=8", "parallelism.pp_schedule=interleaved",
                                               "parallelism.virtual_stages=2", "training.global_batch=256"};
BENCHMARK_CAPTURE(run_scenario_with, llama3_8b_64gpu_tp2_pp4, std::string("scenarios/parallel/llama3-8b-8xh100.json"), kPipe64a)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scenario_with, llama3_8b_64gpu_tp4_pp8_interleaved, std::string("scenarios/parallel/llama3-8b-8xh100.json"),
                  kPipe64b)
    ->Unit(benchmark::kMillisecond);
// The same interleaved plan with one GPU 20 % slow: 32 symmetry classes, every micro-batch simulated
// (a straggler's lag in a pipeline is not extrapolated).
static std::vector<std::string> with_straggler(std::vector<std::string> sets) {
  sets.push_back(R"(faults.stragglers=[{"gpu":5,"slowdown":1.2}])");
  return sets;
}
BENCHMARK_CAPTURE(run_scenario_with, llama3_8b_64gpu_tp4_pp8_interleaved_straggler,
                  std::string("scenarios/parallel/llama3-8b-8xh100.json"), with_straggler(kPipe64b))
    ->Unit(benchmark::kMillisecond);
static void run_flow_with(benchmark::State& state, const std::string& rel, std::vector<std::string> sets) {
  sets.push_back("simulation.network=flow");
  run_scenario_with(state, rel, sets);
}
BENCHMARK_CAPTURE(run_flow_with, llama3_8b_64gpu_tp4_pp8_interleaved, std::string("scenarios/parallel/llama3-8b-8xh100.json"),
                  kPipe64b)
    ->Unit(benchmark::kMillisecond);

// 64 H100 on a graph with one NIC at a quarter of its bandwidth: TP 4 x DP 16, every GPU simulated.
BENCHMARK_CAPTURE(run_scenario_with, llama3_8b_64gpu_flow_slow_nic, std::string("scenarios/parallel/llama3-8b-8xh100.json"),
                  std::vector<std::string>{
                      R"(cluster.topology={"nodes": 8, "gpus_per_node": 8, "node": "nvswitch", "nics_per_node": 8, "network": "infiniband-ndr", "fabric": "single-switch", "levels": 1})",
                      "cluster.nodes=8", "parallelism.fsdp=", "parallelism.dp=16", "parallelism.tp=4", "training.global_batch=64",
                      R"(faults.links=[{"nic": [3, 2], "bandwidth_factor": 0.25}])"})
    ->Unit(benchmark::kMillisecond);

// As the CLI: a fresh process's page faults on the task arrays are not what a user's run pays.
int main(int argc, char** argv) {
  scaleout::restart_with_huge_pages(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
