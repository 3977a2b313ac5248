// The fit recovers known parameters from measurements synthesised by the model itself, and a
// malformed measurements file is refused with its JSON path.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "hardware/calibration/fit.hpp"
#include "hardware/compute_model.hpp"
#include "tools/cli/calibrate.hpp"
#include "tools/io/input_error.hpp"
#include "tools/io/scenario.hpp"

using namespace scaleout;

TEST_CASE("the fit recovers GEMM, memory and attention parameters from synthetic data", "[hardware][calibration]") {
  const GpuSpec gpu = load_gpu("h200");
  ComputeProfile truth = default_profile(gpu);
  truth.gemm_efficiency[static_cast<std::size_t>(Dtype::bf16)] = 0.63;
  truth.gemm_k_half = 90;
  truth.memory_efficiency = 0.82;
  truth.kernel_latency = Time::from_us(4.0);
  truth.attention_fwd_efficiency = 0.55;
  truth.attention_bwd_efficiency = 0.41;
  truth.attention_seq_half = 512;
  const ComputeModel cm(gpu, truth);
  std::vector<KernelMeasurement> rows;
  for (std::int64_t h : {1024, 2048, 4096, 8192})
    for (std::int64_t t : {2048, 8192, 16384}) {
      for (auto [m, n, k] : {std::tuple{t, 3 * h, h}, {t, h, 4 * h}, {t, 4 * h, h}, {h, 4 * h, t}, {t, h, h / 4}}) {
        Kernel g;
        g.kind = KernelKind::gemm;
        g.gemm = GemmShape{m, n, k, 1};
        rows.push_back({g, cm.time(g).seconds()});
      }
    }
  for (double bytes = 1e6; bytes < 1e10; bytes *= 3) {
    Kernel mk;
    mk.bytes = bytes;
    rows.push_back({mk, cm.time(mk).seconds()});
  }
  for (std::int64_t s : {512, 1024, 2048, 4096, 8192, 16384})
    for (KernelKind kind : {KernelKind::attention_fwd, KernelKind::attention_bwd}) {
      Kernel a;
      a.kind = kind;
      a.attn = AttentionShape{2, 32, s, 128, true};
      rows.push_back({a, cm.time(a).seconds()});
    }
  const FitReport rep = fit_profile(gpu, rows, default_profile(gpu));
  CHECK(rep.profile.gemm_eff(Dtype::bf16) == Approx(0.63).epsilon(0.02));
  CHECK(rep.profile.gemm_k_half == Approx(90).epsilon(0.05));
  CHECK(rep.profile.memory_efficiency == Approx(0.82).epsilon(0.01));
  CHECK(rep.profile.kernel_latency.us() == Approx(4.0).epsilon(0.02));
  CHECK(rep.profile.attention_fwd_efficiency == Approx(0.55).epsilon(0.02));
  CHECK(rep.profile.attention_bwd_efficiency == Approx(0.41).epsilon(0.02));
  CHECK(rep.gemm.held_out > 0);
  CHECK(rep.gemm.worst_rel_error < 0.02);
}

TEST_CASE("the fit recovers a known streaming bandwidth and ramp from synthetic GEMVs", "[hardware][calibration]") {
  // GEMVs take latency + ramp / 2 + bytes / (B * e) past the ramp: the fit must find e and the
  // ramp (both on its grid: 0.0025 and 0.05 us) from times the model gives for a known truth.
  const GpuSpec gpu = load_gpu("h200");
  ComputeProfile truth = default_profile(gpu);
  truth.kernel_latency = Time::from_us(1.5);
  truth.gemm_memory_efficiency = 0.93;
  truth.gemm_stream_ramp = Time::from_us(6.5);
  const ComputeModel cm(gpu, truth);
  std::vector<KernelMeasurement> rows;
  auto add = [&](Kernel k) { rows.push_back({k, cm.time(k).seconds()}); };
  for (std::int64_t h : {1024, 2048, 4096, 8192})
    for (std::int64_t t : {2048, 8192, 16384}) {
      Kernel g;
      g.kind = KernelKind::gemm;
      g.gemm = GemmShape{t, 4 * h, h, 1};
      add(g);
    }
  for (std::int64_t m : {1, 8, 64})
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {12288, 4096}, {8192, 8192}, {4096, 16384},
                        {128256, 4096}, {2048, 1024}}) {
      Kernel g;
      g.kind = KernelKind::gemm;
      g.gemm = GemmShape{m, n, k, 1};
      add(g);
    }
  for (double bytes = 1e6; bytes < 1e10; bytes *= 3) {
    Kernel mk;
    mk.bytes = bytes;
    add(mk);
  }
  const FitReport rep = fit_profile(gpu, rows, default_profile(gpu));
  CHECK(rep.profile.gemm_memory_efficiency == Approx(0.93).margin(0.003));
  CHECK(rep.profile.gemm_stream_ramp.us() == Approx(6.5).margin(0.06));
  CHECK(rep.gemm.worst_rel_error < 0.01);
}

TEST_CASE("the fit recovers each dtype's unaligned efficiency from synthetic data", "[hardware][calibration]") {
  // Off the vectorised path an unaligned bf16 GEMM (2-byte loads) loses more than a tf32 one
  // (4-byte): the fit finds each dtype's own fraction, and the profile reads it back.
  const GpuSpec gpu = load_gpu("h200");
  ComputeProfile truth = default_profile(gpu);
  truth.gemm_unaligned_efficiency_by_dtype[static_cast<std::size_t>(Dtype::bf16)] = 0.2;
  truth.gemm_unaligned_efficiency_by_dtype[static_cast<std::size_t>(Dtype::tf32)] = 0.45;
  const ComputeModel cm(gpu, truth);
  std::vector<KernelMeasurement> rows;
  for (Dtype d : {Dtype::bf16, Dtype::tf32})
    for (std::int64_t h : {1024, 2048, 4096, 8192})
      for (auto [m, n, k] : {std::tuple{std::int64_t(4096), 3 * h, h}, {16384, h, 4 * h}, {8192, 4 * h, h}, {4096, h + 1, h},
                             {8192, 2 * h, h - 3}, {4096, 4 * h + 1, h}}) {
        Kernel g;
        g.kind = KernelKind::gemm;
        g.dtype = d;
        g.gemm = GemmShape{m, n, k, 1};
        rows.push_back({g, cm.time(g).seconds()});
      }
  const FitReport rep = fit_profile(gpu, rows, default_profile(gpu));
  CHECK(rep.profile.unaligned_eff(Dtype::bf16) == Approx(0.2).epsilon(0.03));
  CHECK(rep.profile.unaligned_eff(Dtype::tf32) == Approx(0.45).epsilon(0.03));
  CHECK(rep.profile.unaligned_eff(Dtype::fp8) == rep.profile.gemm_unaligned_efficiency);  // none measured: the pooled one
  CHECK(rep.gemm.worst_rel_error < 0.03);
}

TEST_CASE("the fit finds how math and streaming overlap near the ridge point", "[hardware][calibration]") {
  // Products from GEMV-like to square, timed by a model whose math and streaming overlap as
  // (tc^3 + tm^3)^(1/3): the fit picks that exponent from its grid and recovers the rest.
  const GpuSpec gpu = load_gpu("h200");
  ComputeProfile truth = default_profile(gpu);
  truth.kernel_latency = Time::from_us(1.5);
  truth.gemm_memory_efficiency = 0.9;
  truth.gemm_stream_ramp = Time::from_us(4.0);
  truth.gemm_overlap_exponent = 3.0;
  const ComputeModel cm(gpu, truth);
  std::vector<KernelMeasurement> rows;
  auto add = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    Kernel g;
    g.kind = KernelKind::gemm;
    g.gemm = GemmShape{m, n, k, 1};
    rows.push_back({g, cm.time(g).seconds()});
  };
  for (std::int64_t h : {1024, 2048, 4096, 8192})
    for (std::int64_t t : {2048, 8192, 16384}) add(t, 4 * h, h);
  for (std::int64_t m : {1, 8, 64, 128, 256, 512})
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {12288, 4096}, {8192, 8192}, {4096, 16384}}) add(m, n, k);
  for (double bytes = 1e6; bytes < 1e10; bytes *= 3) {
    Kernel mk;
    mk.bytes = bytes;
    rows.push_back({mk, cm.time(mk).seconds()});
  }
  const FitReport rep = fit_profile(gpu, rows, default_profile(gpu));
  CHECK(rep.profile.gemm_overlap_exponent == 3.0);
  CHECK(rep.profile.gemm_memory_efficiency == Approx(0.9).margin(0.01));
  CHECK(rep.gemm.worst_rel_error < 0.02);
  // The plain max (exponent 0) is what a profile without the key gets.
  CHECK(overlap(3.0, 1.0, 0.0) == 3.0);
  CHECK(overlap(2.0, 2.0, 2.0) == Approx(2.0 * std::sqrt(2.0)));
}

TEST_CASE("the fit reads the unaligned GEMMs' one tile off their wave counts", "[hardware][calibration]") {
  // cuBLASLt runs unaligned GEMMs with one tile shape; the harness records the heuristic's wave
  // count (tiles / SMs without split-K). Synthetic rows from a truth with a 128 x 256 unaligned
  // tile: the fit finds the tile, and with it the unaligned efficiency.
  const GpuSpec gpu = load_gpu("h200");
  ComputeProfile truth = default_profile(gpu);
  truth.gemm_unaligned_tile = {128, 256, 1.0};
  truth.gemm_unaligned_efficiency_by_dtype[static_cast<std::size_t>(Dtype::bf16)] = 0.2;
  const ComputeModel cm(gpu, truth);
  std::vector<KernelMeasurement> rows;
  for (std::int64_t h : {1024, 2048, 4096, 8192})
    for (auto [m, n, k] : {std::tuple{std::int64_t(4096), 3 * h, h}, {16384, h, 4 * h}, {1000, h + 1, 777}, {4095, h + 1, h - 3},
                           {2047, 2 * h + 1, h + 1}, {3001, h - 1, 3001}}) {
      Kernel g;
      g.kind = KernelKind::gemm;
      g.dtype = Dtype::bf16;
      g.gemm = GemmShape{m, n, k, 1};
      KernelMeasurement row{g, cm.time(g).seconds()};
      // The wave count cuBLASLt reports: the truth's tile for unaligned rows, no split-K.
      row.waves = std::ceil(double(m) / 128) * std::ceil(double(n) / 256) / gpu.sms;
      rows.push_back(row);
    }
  const FitReport rep = fit_profile(gpu, rows, default_profile(gpu));
  CHECK(rep.profile.gemm_unaligned_tile.m == 128);
  CHECK(rep.profile.gemm_unaligned_tile.n == 256);
  CHECK(rep.profile.unaligned_eff(Dtype::bf16) == Approx(0.2).epsilon(0.03));
  CHECK(rep.gemm.worst_rel_error < 0.03);
  // Without wave counts there is nothing to read it from: the tiles are chosen among as before.
  for (auto& r : rows) r.waves = -1;
  CHECK(fit_profile(gpu, rows, default_profile(gpu)).profile.gemm_unaligned_tile.m == 0);
  // Where the harness recorded each row's tile, the fit reads it directly, and tells 128 x 256
  // from 256 x 128 (which give the same wave counts on these shapes).
  for (auto& r : rows) r.tile_m = 128, r.tile_n = 256;
  const FitReport recorded = fit_profile(gpu, rows, default_profile(gpu));
  CHECK(recorded.profile.gemm_unaligned_tile.m == 128);
  CHECK(recorded.profile.gemm_unaligned_tile.n == 256);
  CHECK(recorded.gemm.worst_rel_error < 0.03);
  // Too few rows agree on one tile: none is taken.
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i].tile_m = 64 << (i % 3);
  CHECK(fit_profile(gpu, rows, default_profile(gpu)).profile.gemm_unaligned_tile.m == 0);
}

TEST_CASE("FP8 split accumulation is fitted to the ratio of each pair, whatever the GEMM model's own error", "[hardware][calibration]") {
  const GpuSpec gpu = load_gpu("h200");
  ComputeProfile truth = default_profile(gpu);
  truth.fp8_split_accumulate = 1.17;
  const ComputeModel cm(gpu, truth);
  std::vector<KernelMeasurement> rows;
  int i = 0;
  for (std::int64_t h : {2048, 4096, 8192})
    for (auto [m, n, k] : {std::tuple{std::int64_t(4096), 3 * h, h}, {4096, h, 4 * h}, {4 * h, h, 4096}, {2048, h, h / 2}})
      for (bool split : {false, true}) {
        Kernel g;
        g.kind = KernelKind::gemm;
        g.dtype = Dtype::fp8;
        g.gemm = GemmShape{m, n, k, 1};
        g.gemm.split_accumulate = split;
        KernelMeasurement r{g, cm.time(g).seconds()};
        // Both rows of a pair off by the same factor (a shape the GEMM model misses): the ratio
        // is what is fitted, so it must not matter.
        r.seconds *= 1.0 + 0.1 * (i % 3);
        r.accumulate_pair = true;
        rows.push_back(r);
        i += split;
      }
  const AccumulateFit fit = fit_fp8_split_accumulate(gpu, default_profile(gpu), rows);
  REQUIRE(fit.pairs.size() == 12);
  CHECK(fit.factor == Approx(1.17).margin(0.002));
  CHECK(fit.ratio.held_out == 3);
  CHECK(fit.ratio.worst_rel_error < 0.002);
  // The factor stretches an FP8 product's math only when it is flagged, and never a BF16 one.
  ComputeProfile p = default_profile(gpu);
  p.fp8_split_accumulate = 1.3;
  const ComputeModel slow(gpu, p), plain(gpu, default_profile(gpu));
  Kernel g;
  g.kind = KernelKind::gemm;
  g.dtype = Dtype::fp8;
  g.gemm = GemmShape{8192, 8192, 8192, 1};
  CHECK(slow.time(g).seconds() == plain.time(g).seconds());
  g.gemm.split_accumulate = true;
  CHECK(slow.time(g).seconds() == Approx(1.3 * plain.time(g).seconds()).epsilon(0.01));
  g.dtype = Dtype::bf16;
  CHECK(slow.time(g).seconds() == plain.time(g).seconds());
}

TEST_CASE("a malformed measurements file is refused with the JSON path", "[hardware][calibration]") {
  const std::string file = "malformed_measurements.json";
  auto write = [&](const char* text) { std::ofstream(file) << text; };
  auto error = [&]() -> std::string {
    try {
      read_measurements(file);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "NVIDIA H200"},
            "measurements": [{"kind": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "time_s": "fast"}]})");
  CHECK(error() == file + ": /measurements/0/time_s: expected a non-negative number");
  write(R"({"schema": "other", "gpu": {"name": "x"}, "measurements": []})");
  CHECK(error().find("/schema: expected \"scaleout-measurements/1\"") != std::string::npos);
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"}, "measurements": [{"kind": "warp"}]})");
  CHECK(error().find("/measurements/0/kind: expected gemm") != std::string::npos);
  write(R"({"schema": "scaleout-measurements/1", "gpu": {}, "measurements": []})");
  CHECK(error().find("/gpu/name") != std::string::npos);
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "time_s": 1e-5, "waves": "many"}]})");
  CHECK(error() == file + ": /measurements/0/waves: expected a non-negative number");
  // null: a value the harness could not read (non-finite), taken as absent.
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "time_s": 1e-5, "waves": null,
                              "workspace_bytes": null}]})");
  REQUIRE(read_measurements(file).size() == 1);
  CHECK(read_measurements(file).front().waves < 0);
  // The algorithm's tile and split, where the harness read them; variant rows (other algorithms
  // than the heuristic's first) are kept in the file but not fitted.
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "fp8", "m": 128, "n": 4096, "k": 16384, "time_s": 2.7e-5,
                              "tile_m": 128, "tile_n": 256, "split_k": 4},
                             {"kind": "gemm_variant", "variant": "split", "dtype": "fp8", "m": 128, "n": 4096,
                              "k": 16384, "time_s": 2.5e-5, "split_k": 8}]})");
  {
    const auto rows = read_measurements(file);
    REQUIRE(rows.size() == 1);
    CHECK(rows.front().tile_m == 128);
    CHECK(rows.front().tile_n == 256);
    CHECK(rows.front().split_k == 4);
  }
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "time_s": 1e-5, "split_k": 1.5}]})");
  CHECK(error() == file + ": /measurements/0/split_k: expected a whole number from -1 to 65536");
  // -1: cuBLASLt decides the split at run time (tf32 algorithm 43), read as not recorded; a tile
  // has both sides or none.
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "tf32", "m": 128, "n": 64, "k": 64, "time_s": 1e-5,
                              "tile_m": 64, "tile_n": 128, "split_k": -1}]})");
  CHECK(read_measurements(file).front().split_k == 0);
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "time_s": 1e-5, "tile_m": -1,
                              "tile_n": 64}]})");
  CHECK(error() == file + ": /measurements/0/tile_m: expected a whole number from 1 to 65536");
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64, "time_s": 1e-5, "tile_m": 64}]})");
  CHECK(error() == file + ": /measurements/0/tile_n: expected tile_m and tile_n together");
  // The harness's novel_gemm rows are GEMMs to check a profile on, never to fit it.
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm_novel", "dtype": "bf16", "m": 3072, "n": 6144, "k": 4096, "time_s": 1e-4}]})");
  {
    const auto rows = read_measurements(file);
    REQUIRE(rows.size() == 1);
    CHECK(rows.front().novel);
    CHECK(rows.front().kernel.kind == KernelKind::gemm);
    const GpuSpec gpu = load_gpu("h200");
    CHECK(fit_profile(gpu, rows, default_profile(gpu)).gemm.fitted == 0);
  }
  // The fp8_acc phase's rows: GEMMs timed with fast accumulation on and off, kept out of the fit.
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm_fp8acc", "dtype": "fp8", "layout": "nt", "m": 4096, "n": 4096, "k": 4096,
                              "time_s": 1e-4, "fast_accum": true},
                             {"kind": "gemm_fp8acc", "dtype": "fp8", "layout": "nt", "m": 4096, "n": 4096, "k": 4096,
                              "time_s": 1.2e-4, "fast_accum": false}]})");
  {
    const auto rows = read_measurements(file);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].accumulate_pair);
    CHECK_FALSE(rows[0].kernel.gemm.split_accumulate);
    CHECK(rows[1].kernel.gemm.split_accumulate);
    const GpuSpec gpu = load_gpu("h200");
    CHECK(fit_profile(gpu, rows, default_profile(gpu)).gemm.fitted == 0);
    const auto pairs = accumulate_pairs(rows, 1000);
    REQUIRE(pairs.size() == 1);
    CHECK(pairs[0].measured_ratio == Approx(1.2));
  }
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm_fp8acc", "dtype": "fp8", "m": 64, "n": 64, "k": 64, "time_s": 1e-5}]})");
  CHECK(error() == file + ": /measurements/0/fast_accum: expected true or false (an fp8_acc row says how it accumulated)");
  // A plain gemm row is FP8's forward product: with fast accumulation, or it is refused.
  write(R"({"schema": "scaleout-measurements/1", "gpu": {"name": "x"},
            "measurements": [{"kind": "gemm", "dtype": "fp8", "m": 64, "n": 64, "k": 64, "time_s": 1e-5, "fast_accum": false}]})");
  CHECK(error().find("/measurements/0/fast_accum: expected true on a gemm row") != std::string::npos);
  write("{not json");
  CHECK(error().find("invalid JSON") != std::string::npos);
  std::remove(file.c_str());
}
