// The compute model against closed forms.
#include <catch2/catch.hpp>

#include <cmath>

#include "hardware/compute_model.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/input_error.hpp"
#include "tools/io/units_parse.hpp"

using namespace scaleout;

TEST_CASE("units: GB/s is bytes, Gb/s is bits, MiB is binary", "[hardware]") {
  CHECK(parse_quantity("900 GB/s", QuantityKind::bandwidth) == Approx(900e9));
  CHECK(parse_quantity("400 Gb/s", QuantityKind::bandwidth) == Approx(50e9));
  CHECK(parse_quantity("81559 MiB", QuantityKind::bytes) == Approx(81559.0 * 1048576.0));
  CHECK(parse_quantity("989.4 TFLOPS", QuantityKind::flops) == Approx(989.4e12));
  CHECK(parse_quantity("2 us", QuantityKind::time_s) == Approx(2e-6));
  CHECK(parse_quantity("1e3 MB", QuantityKind::bytes) == Approx(1e9));
  CHECK_THROWS_AS(parse_quantity("900 GB", QuantityKind::bandwidth), std::invalid_argument);
  CHECK_THROWS_AS(parse_quantity("fast", QuantityKind::bandwidth), std::invalid_argument);
  CHECK_THROWS_AS(parse_quantity("-3 GB", QuantityKind::bytes), std::invalid_argument);
  CHECK_THROWS_AS(parse_quantity("1e999 GB", QuantityKind::bytes), std::invalid_argument);
}

TEST_CASE("a large aligned GEMM runs at the profile's efficiency of peak", "[hardware]") {
  const GpuSpec h100 = load_gpu("h100-sxm");
  ComputeProfile p = default_profile(h100);
  const ComputeModel cm(h100, p);
  // 8192^3: 64 x 32 tiles of 128x256 = 2048 tiles, 15.5 waves on 132 SMs -> 16 waves.
  const GemmShape g{8192, 8192, 8192, 1};
  const double t = cm.gemm_time(g, Dtype::bf16).seconds();
  const double ideal = g.flops() / (h100.peak(Dtype::bf16).value * p.gemm_eff(Dtype::bf16));
  CHECK(t > ideal);
  CHECK(t < ideal * 1.15);
}

TEST_CASE("wave quantisation: one tile more than the SMs costs a second wave", "[hardware]") {
  const GpuSpec h100 = load_gpu("h100-sxm");
  ComputeProfile p = default_profile(h100);
  p.tiles = {{128, 128, 1.0}};
  p.kernel_latency = Time::zero();
  const ComputeModel cm(h100, p);
  // 12 x 11 = 132 tiles of 128x128 fill one wave; 7 x 19 = 133 need two. k = 16384 keeps both
  // compute-bound and leaves no SM idle for split-K.
  const double one = cm.gemm_time({128 * 12, 128 * 11, 16384, 1}, Dtype::bf16).seconds();
  const double two = cm.gemm_time({128 * 7, 128 * 19, 16384, 1}, Dtype::bf16).seconds();
  CHECK(two == Approx(2 * one).epsilon(0.01));
}

TEST_CASE("memory-bound kernels take bytes over achieved bandwidth plus latency", "[hardware]") {
  const GpuSpec h200 = load_gpu("h200");
  const ComputeProfile p = default_profile(h200);
  const ComputeModel cm(h200, p);
  const double bytes = 8e9;
  const double expect = p.kernel_latency.seconds() + bytes / (h200.hbm_bandwidth.value * p.memory_efficiency);
  CHECK(cm.memory_time(bytes).seconds() == Approx(expect).epsilon(1e-6));
}

TEST_CASE("skinny GEMMs are bandwidth-bound", "[hardware]") {
  const GpuSpec h100 = load_gpu("h100-sxm");
  const ComputeModel cm(h100, default_profile(h100));
  // m = 1: a matrix-vector product reads the 8192x8192 bf16 matrix (134 MB) once.
  const double t = cm.gemm_time({1, 8192, 8192, 1}, Dtype::bf16).seconds();
  const double bytes_time = 8192.0 * 8192.0 * 2 / h100.hbm_bandwidth.value;
  CHECK(t > bytes_time);
  CHECK(t < 2 * bytes_time);
}

TEST_CASE("a GEMV streams its weights at the streaming bandwidth after half the ramp", "[hardware]") {
  // Past the ramp, t = latency + ramp / 2 + bytes / (B * e): each added byte of weights costs
  // 1 / (B * e), whatever the GEMV's size.
  const GpuSpec h200 = load_gpu("h200");
  ComputeProfile p = default_profile(h200);
  p.gemm_memory_efficiency = 0.95;
  p.gemm_stream_ramp = Time::from_us(8);
  const ComputeModel cm(h200, p);
  const double rate = h200.hbm_bandwidth.value * 0.95;
  for (std::int64_t k : {4096, 16384, 65536}) {
    const double bytes = (double(k) + double(k) * 8192 + 8192) * 2;  // vector, weights, output in bf16
    const double expect = p.kernel_latency.seconds() + 4e-6 + bytes / rate;
    CHECK(cm.gemm_time({1, 8192, k, 1}, Dtype::bf16).seconds() == Approx(expect).epsilon(1e-4));
  }
  const double t1 = cm.gemm_time({1, 8192, 16384, 1}, Dtype::bf16).seconds();
  const double t2 = cm.gemm_time({1, 8192, 32768, 1}, Dtype::bf16).seconds();
  CHECK(t2 - t1 == Approx((16384.0 * 8192 + 16384) * 2 / rate).epsilon(1e-4));
}

TEST_CASE("a stream within its ramp takes sqrt(2 x ramp), past it x + ramp / 2", "[hardware]") {
  // The rate ramps linearly to full over the ramp R: in time t < R it moves t^2 / (2R) of what
  // full rate moves in one second, so x seconds of full-rate work take sqrt(2 x R).
  CHECK(stream_time(1e-6, 8e-6) == Approx(4e-6));
  CHECK(stream_time(4e-6, 8e-6) == Approx(8e-6));  // the two branches meet at x = R / 2
  CHECK(stream_time(10e-6, 8e-6) == Approx(14e-6));
  CHECK(stream_time(3e-6, 0) == Approx(3e-6));  // no ramp: plain bytes over bandwidth
}

TEST_CASE("without split-K a GEMM of few tiles runs on few SMs", "[hardware]") {
  // A 256 x 256 output is at most 16 tiles (64x64) on 132 SMs: split-K 8 puts the k = 65536
  // reduction on 128 of them, several times faster than 16 CTAs alone.
  const GpuSpec h200 = load_gpu("h200");
  ComputeProfile p = default_profile(h200);
  const double split = ComputeModel(h200, p).gemm_time({256, 256, 65536, 1}, Dtype::bf16).seconds();
  p.gemm_split_k[static_cast<std::size_t>(Dtype::bf16)] = false;
  const double whole = ComputeModel(h200, p).gemm_time({256, 256, 65536, 1}, Dtype::bf16).seconds();
  CHECK(whole / split > 4);
}

TEST_CASE("flash attention: causal halves the forward, backward is 2.5 times", "[hardware]") {
  AttentionShape a{1, 32, 4096, 128, false};
  const double full = a.fwd_flops();
  CHECK(full == Approx(4.0 * 32 * 4096.0 * 4096 * 128));
  a.causal = true;
  CHECK(a.fwd_flops() == Approx(full / 2));
  CHECK(a.bwd_flops() == Approx(2.5 * full / 2));
}

TEST_CASE("split-K takes any number of slices, not only powers of two", "[hardware]") {
  // 44 tiles (128 x 256 of a 1408 x 1024 output) on 132 SMs: three slices fill every SM once,
  // where two leave a third idle (and more than three would need a second wave). cuBLASLt reports such splits (the
  // harness's 3001^3 bf16 row: 288 tiles, 6.55 waves, i.e. split 3).
  const GpuSpec h200 = load_gpu("h200");
  ComputeProfile p = default_profile(h200);
  p.tiles = {{128, 256, 1.0}};
  p.wave_quantization = 1.0;
  const GemmPlan plan = ComputeModel(h200, p).gemm_plan({1408, 1024, 16384, 1}, Dtype::bf16);
  // One wave of 132 CTAs, each a tile over a third of k.
  const double tile_flops = 2.0 * 128 * 256 * std::ceil(16384.0 / 3);
  CHECK(plan.work_s == Approx(tile_flops / (h200.peak(Dtype::bf16).value / h200.sms)).epsilon(1e-9));
}

TEST_CASE("an unaligned GEMM runs the profile's one unaligned tile", "[hardware]") {
  // 1000 x 3000 with k = 777 (unaligned): 8 x 12 = 96 tiles of 128 x 256 leave 36 of 132 SMs idle
  // in its one wave; free to choose, the model would fill them with smaller tiles.
  const GpuSpec h200 = load_gpu("h200");
  ComputeProfile p = default_profile(h200);
  const double free_choice = ComputeModel(h200, p).gemm_time({1000, 3000, 777, 1}, Dtype::bf16).seconds();
  p.gemm_unaligned_tile = {128, 256, 1.0};
  const GemmPlan one = ComputeModel(h200, p).gemm_plan({1000, 3000, 777, 1}, Dtype::bf16);
  CHECK(one.time_s > free_choice);
  p.tiles = {{128, 256, 1.0}};
  p.gemm_unaligned_tile = {0, 0, 1.0};
  CHECK(ComputeModel(h200, p).gemm_plan({1000, 3000, 777, 1}, Dtype::bf16).time_s == Approx(one.time_s));
  // Aligned shapes still choose among the tiles.
  ComputeProfile q = default_profile(h200);
  q.gemm_unaligned_tile = {128, 256, 1.0};
  CHECK(ComputeModel(h200, q).gemm_time({1024, 3072, 768, 1}, Dtype::bf16) ==
        ComputeModel(h200, default_profile(h200)).gemm_time({1024, 3072, 768, 1}, Dtype::bf16));
}

TEST_CASE("multi-tensor (foreach) kernels stream at their element width's measured efficiency", "[hardware]") {
  const GpuSpec h200 = load_gpu("h200");
  ComputeProfile p = default_profile(h200);
  p.multi_tensor_efficiency[static_cast<std::size_t>(Dtype::bf16)] = 0.6;
  const ComputeModel cm(h200, p);
  Kernel k;
  k.kind = KernelKind::memory;
  k.bytes = 4e9;
  k.multi_tensor = true;
  k.dtype = Dtype::bf16;
  CHECK(cm.time(k).seconds() == Approx(p.kernel_latency.seconds() + 4e9 / (h200.hbm_bandwidth.value * 0.6)).epsilon(1e-9));
  // A width the profile did not measure, or a plain elementwise kernel: the streaming efficiency.
  k.dtype = Dtype::fp32;
  CHECK(cm.time(k) == cm.memory_time(4e9));
  k.dtype = Dtype::bf16;
  k.multi_tensor = false;
  CHECK(cm.time(k) == cm.memory_time(4e9));
}

TEST_CASE("unvectorized elementwise kernels stream at their own measured efficiency", "[hardware]") {
  const GpuSpec h200 = load_gpu("h200");
  ComputeProfile p = default_profile(h200);
  Kernel k;
  k.kind = KernelKind::memory;
  k.bytes = 4e9;
  k.access = Kernel::Access::unrolled;
  // Unmeasured: the streaming efficiency.
  CHECK(ComputeModel(h200, p).time(k) == ComputeModel(h200, p).memory_time(4e9));
  p.unrolled_efficiency = 0.5;
  p.strided_efficiency[static_cast<std::size_t>(Dtype::bf16)] = 0.4;
  const ComputeModel cm(h200, p);
  CHECK(cm.time(k).seconds() == Approx(p.kernel_latency.seconds() + 4e9 / (h200.hbm_bandwidth.value * 0.5)).epsilon(1e-9));
  k.access = Kernel::Access::strided;
  CHECK(cm.time(k).seconds() == Approx(p.kernel_latency.seconds() + 4e9 / (h200.hbm_bandwidth.value * 0.4)).epsilon(1e-9));
  k.dtype = Dtype::fp32;  // a width not measured: the streaming efficiency
  CHECK(cm.time(k) == cm.memory_time(4e9));
  k.dtype = Dtype::bf16;
  k.access = Kernel::Access::vectorized;
  CHECK(cm.time(k) == cm.memory_time(4e9));
  Json j = Json::parse(R"({"name": "t", "gpu": "h200", "measured_on": "test", "unrolled_efficiency": 0.53, "strided_efficiency": {"bf16": 0.37, "fp32": 0.6}})");
  const ComputeProfile q = parse_profile(j, "t.json", "", h200);
  CHECK(q.unrolled_efficiency == 0.53);
  CHECK(q.strided_efficiency[static_cast<std::size_t>(Dtype::bf16)] == 0.37);
  CHECK(q.strided_efficiency[static_cast<std::size_t>(Dtype::fp32)] == 0.6);
  j["strided_efficiency"]["bf16"] = 1.4;
  CHECK_THROWS_WITH(parse_profile(j, "t.json", "", h200), Catch::Contains("t.json: /strided_efficiency/bf16"));
}

TEST_CASE("a profile's multi_tensor_efficiency is read by dtype and checked", "[hardware][io]") {
  const GpuSpec h200 = load_gpu("h200");
  Json j = Json::parse(R"({"name": "t", "gpu": "h200", "measured_on": "test", "multi_tensor_efficiency": {"bf16": 0.65, "fp32": 0.78}})");
  const ComputeProfile p = parse_profile(j, "t.json", "", h200);
  CHECK(p.multi_tensor_efficiency[static_cast<std::size_t>(Dtype::bf16)] == 0.65);
  CHECK(p.multi_tensor_efficiency[static_cast<std::size_t>(Dtype::fp32)] == 0.78);
  CHECK(p.multi_tensor_efficiency[static_cast<std::size_t>(Dtype::fp16)] == 0.0);
  auto error_of = [&](const char* text) {
    try {
      parse_profile(Json::parse(text), "t.json", "", h200);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of(R"({"name": "t", "gpu": "h200", "measured_on": "test", "multi_tensor_efficiency": {"bf61": 0.6}})"),
             Catch::Contains("t.json: /multi_tensor_efficiency/bf61: unknown key"));
  CHECK_THAT(error_of(R"({"name": "t", "gpu": "h200", "measured_on": "test", "multi_tensor_efficiency": {"bf16": 1.5}})"),
             Catch::Contains("t.json: /multi_tensor_efficiency/bf16"));
  // FP8 split accumulation: a time factor of at least 1.
  CHECK(parse_profile(Json::parse(R"({"name": "t", "gpu": "h200", "measured_on": "test", "gemm_fp8_split_accumulate": 1.2})"),
                      "t.json", "", h200)
            .fp8_split_accumulate == 1.2);
  CHECK_THAT(error_of(R"({"name": "t", "gpu": "h200", "measured_on": "test", "gemm_fp8_split_accumulate": 0.9})"),
             Catch::Contains("t.json: /gemm_fp8_split_accumulate"));
}
