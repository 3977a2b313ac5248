// The compute model against closed forms.
#include <catch2/catch.hpp>

#include "hardware/compute_model.hpp"
#include "tools/io/scenario.hpp"
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

TEST_CASE("flash attention: causal halves the forward, backward is 2.5 times", "[hardware]") {
  AttentionShape a{1, 32, 4096, 128, false};
  const double full = a.fwd_flops();
  CHECK(full == Approx(4.0 * 32 * 4096.0 * 4096 * 128));
  a.causal = true;
  CHECK(a.fwd_flops() == Approx(full / 2));
  CHECK(a.bwd_flops() == Approx(2.5 * full / 2));
}
