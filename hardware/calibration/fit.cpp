#include "hardware/calibration/fit.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <Eigen/Dense>

#include "hardware/compute_model.hpp"
#include "sim/engine/check.hpp"

namespace scaleout {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Weighted least squares: minimise sum ((A x - t) / t)^2.
Eigen::VectorXd solve_relative(const std::vector<std::vector<double>>& a, const std::vector<double>& t) {
  const Eigen::Index n = Eigen::Index(t.size()), m = Eigen::Index(a.front().size());
  Eigen::MatrixXd A(n, m);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < m; ++j) A(i, j) = a[i][j] / t[i];
    b(i) = 1.0;
  }
  return A.colPivHouseholderQr().solve(b);
}

FitStats held_out_stats(const ComputeModel& cm, const std::vector<const KernelMeasurement*>& held, std::size_t fitted) {
  FitStats s;
  s.fitted = fitted;
  s.held_out = held.size();
  std::vector<double> err;
  for (const auto* m : held) err.push_back(std::fabs(cm.time(m->kernel).seconds() - m->seconds) / m->seconds);
  s.median_rel_error = median(err);
  s.worst_rel_error = err.empty() ? 0 : *std::max_element(err.begin(), err.end());
  return s;
}

// The work term W of a GEMM under its best tile for the current profile (efficiency 1), with
// the split-K reduction the linear fit must leave out.
struct GemmTerms {
  double w = 0, w_over_k = 0, fixed = 0;
  bool memory_bound = false;
  double tc = 0, tm = 0;  // the plan's math and streaming times
};

GemmTerms gemm_terms(const GpuSpec& gpu, const ComputeProfile& p, const GemmShape& g, Dtype d) {
  const GemmPlan plan = ComputeModel(gpu, p).gemm_plan(g, d);
  return {plan.work_s, plan.work_over_k, plan.split_reduction_s, plan.memory_bound, plan.compute_s, plan.streaming_s};
}

// The math time that overlapped with streaming time tm gives `total`: the inverse of overlap();
// negative when streaming alone takes that long.
double math_part(double total, double tm, double p) {
  if (!(p > 0)) return total;
  if (total <= tm) return -1;
  return std::pow(std::pow(total, p) - std::pow(tm, p), 1.0 / p);
}

}  // namespace

std::vector<AccumulatePair> accumulate_pairs(const std::vector<KernelMeasurement>& rows, int hold_out_every) {
  SCALEOUT_CHECK(hold_out_every >= 1, "accumulate_pairs: hold_out_every must be at least 1");
  std::vector<AccumulatePair> pairs;
  // Pairs: the fast and the split row of one shape, in the file's order of the fast rows.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool>, const KernelMeasurement*> split_of;
  auto key = [](const KernelMeasurement& r) {
    const GemmShape& g = r.kernel.gemm;
    return std::make_tuple(g.m, g.n, g.k, g.batch, g.a_transposed);
  };
  for (const auto& r : rows)
    if (r.accumulate_pair && r.kernel.gemm.split_accumulate && r.seconds > 0) split_of.emplace(key(r), &r);  // the first of a shape
  int n = 0;
  for (const auto& r : rows) {
    if (!r.accumulate_pair || r.kernel.gemm.split_accumulate || !(r.seconds > 0)) continue;
    const auto it = split_of.find(key(r));
    if (it == split_of.end() || it->second == nullptr) continue;
    pairs.push_back({&r, it->second, it->second->seconds / r.seconds, 0, n++ % hold_out_every == hold_out_every - 1});
    it->second = nullptr;  // one pair a shape
  }
  return pairs;
}

AccumulateFit fit_fp8_split_accumulate(const GpuSpec& gpu, const ComputeProfile& profile,
                                       const std::vector<KernelMeasurement>& rows, int hold_out_every) {
  AccumulateFit out;
  out.pairs = accumulate_pairs(rows, hold_out_every);
  if (out.pairs.empty()) return out;
  // The model at a given factor (built once per factor: it copies the profile and its tiles).
  auto model_at = [&](double f) {
    ComputeProfile p = profile;
    p.fp8_split_accumulate = f;
    return ComputeModel(gpu, p);
  };
  auto ratio = [](const ComputeModel& cm, const AccumulatePair& pr) {
    return cm.time(pr.split->kernel).seconds() / cm.time(pr.fast->kernel).seconds();
  };
  // One parameter, a smooth objective: a grid of 0.1 % steps from 1 to 4.
  double best = 1e300;
  for (int i = 0; i <= 3000; ++i) {  // 1 to 4, the range the profile reader accepts
    const double f = 1.0 + 0.001 * i;
    const ComputeModel cm = model_at(f);
    double err = 0;
    for (const auto& pr : out.pairs)
      if (!pr.held_out) err += std::pow(ratio(cm, pr) / pr.measured_ratio - 1.0, 2);
    if (err < best) best = err, out.factor = f;
  }
  const ComputeModel fitted = model_at(out.factor);
  std::vector<double> held;
  for (auto& pr : out.pairs) {
    pr.predicted_ratio = ratio(fitted, pr);
    if (pr.held_out) held.push_back(std::fabs(pr.predicted_ratio / pr.measured_ratio - 1.0));
  }
  out.ratio.fitted = out.pairs.size() - held.size();
  out.ratio.held_out = held.size();
  out.ratio.median_rel_error = median(held);
  out.ratio.worst_rel_error = held.empty() ? 0 : *std::max_element(held.begin(), held.end());
  return out;
}

FitReport fit_profile(const GpuSpec& gpu, const std::vector<KernelMeasurement>& rows, const ComputeProfile& start,
                      int hold_out_every) {
  FitReport rep;
  ComputeProfile p = start;
  if (p.tiles.empty()) p.tiles = default_profile(gpu).tiles;
  std::vector<const KernelMeasurement*> gemm_fit, gemm_held, mem_fit, mem_held, att_fit, att_held;
  int ng = 0, nm = 0, na = 0;
  for (const auto& r : rows) {
    if (!(r.seconds > 0) || r.novel || r.accumulate_pair) continue;
    switch (r.kernel.kind) {
      case KernelKind::gemm: (ng++ % hold_out_every == hold_out_every - 1 ? gemm_held : gemm_fit).push_back(&r); break;
      case KernelKind::memory: (nm++ % hold_out_every == hold_out_every - 1 ? mem_held : mem_fit).push_back(&r); break;
      default: (na++ % hold_out_every == hold_out_every - 1 ? att_held : att_fit).push_back(&r); break;
    }
  }

  // Memory-bound kernels first: they give the bandwidth efficiency and the fixed kernel cost,
  // separately for streams (copy, axpy, Adam) and row reductions (norms, softmax).
  for (bool reduction : {false, true}) {
    std::vector<std::vector<double>> a;
    std::vector<double> t;
    for (const auto* m : mem_fit) {
      if (m->kernel.reduction != reduction) continue;
      a.push_back({1.0, m->kernel.bytes / gpu.hbm_bandwidth.value});
      t.push_back(m->seconds);
    }
    if (a.size() < 2) {
      rep.notes.push_back(std::string("too few ") + (reduction ? "reduction" : "streaming") +
                          " memory-bound measurements; their efficiency and latency kept");
      continue;
    }
    const Eigen::VectorXd x = solve_relative(a, t);
    Time& lat = reduction ? p.reduction_latency : p.kernel_latency;
    double& eff = reduction ? p.reduction_efficiency : p.memory_efficiency;
    if (x(0) > 0) lat = Time::from_seconds(x(0));
    if (x(1) > 0) eff = std::clamp(1.0 / x(1), 0.05, 1.0);
    else rep.notes.push_back("memory fit gave a non-positive slope; efficiency kept");
  }

  // GEMMs per dtype, with the kernel latency from above. Per dtype, split-K is kept or dropped
  // by which fits that dtype's rows better (cuBLAS's heuristics do not split every dtype alike);
  // the wave quantisation is chosen on a grid by the error on all fitted rows.
  auto aligned = [](const KernelMeasurement& m) {
    const auto& sh = m.kernel.gemm;
    const auto align = static_cast<std::int64_t>(std::max(1.0, 16.0 / dtype_bytes(m.kernel.dtype)));
    return sh.n % align == 0 && (sh.a_transposed ? sh.m : sh.k) % align == 0;
  };
  // The tile of cuBLASLt's unaligned GEMMs, read off the wave counts the harness recorded
  // (tiles / SMs for an algorithm without split-K): the candidate shape that gives the most of
  // the fitted unaligned rows their waves, when it gives at least three and two thirds of them;
  // between shapes that give as many, the one whose misses lie closest (relative deviation summed
  // over the rows), and the note says it was a tie.
  // Where the harness recorded the tile each row ran with, the tile is read directly: the one
  // most of the fitted unaligned rows ran, when at least two thirds of them did (the wave counts
  // cannot tell 128 x 256 from 256 x 128; the recorded tiles can).
  std::map<std::pair<int, int>, std::size_t> recorded;
  std::size_t with_tile = 0;
  for (const auto* m : gemm_fit)
    if (!aligned(*m) && m->tile_m > 0 && m->tile_n > 0) {
      ++recorded[{m->tile_m, m->tile_n}];
      ++with_tile;
    }
  const auto most = std::max_element(recorded.begin(), recorded.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  if (with_tile >= 3 && most != recorded.end() && 3 * most->second >= 2 * with_tile) {
    p.gemm_unaligned_tile = {most->first.first, most->first.second, 1.0};
    rep.notes.push_back("unaligned GEMMs run one tile, " + std::to_string(most->first.first) + " x " +
                        std::to_string(most->first.second) + " (recorded for " + std::to_string(most->second) + " of " +
                        std::to_string(with_tile) + " unaligned rows)");
  } else {
    std::vector<const KernelMeasurement*> with_waves;
    for (const auto* m : gemm_fit)
      if (!aligned(*m) && m->waves > 0 && !m->workspace) with_waves.push_back(m);
    const double sms = std::max(1, gpu.sms);
    struct Candidate {
      GemmTile tile;
      std::size_t hits = 0;
      double dev = 0;
    };
    std::vector<Candidate> candidates;
    for (int tm : {64, 128, 256})
      for (int tn : {64, 128, 256}) {
        Candidate c{{tm, tn, 1.0}};
        for (const auto* m : with_waves) {
          const auto& g = m->kernel.gemm;
          const double tiles = std::ceil(double(g.m) / tm) * std::ceil(double(g.n) / tn) * double(g.batch);
          const double off = std::fabs(tiles / sms - m->waves);
          if (off <= 0.005 * std::max(1.0, m->waves)) ++c.hits;
          c.dev += off / std::max(m->waves, 1e-9);
        }
        candidates.push_back(c);
      }
    const Candidate& top = *std::min_element(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.hits != b.hits ? a.hits > b.hits : a.dev < b.dev;
    });
    const std::size_t best = top.hits;
    const GemmTile best_tile = top.tile;
    const bool tied = std::count_if(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.hits == best; }) > 1;
    if (best >= 3 && 3 * best >= 2 * with_waves.size()) {
      p.gemm_unaligned_tile = best_tile;
      rep.notes.push_back("unaligned GEMMs run one tile, " + std::to_string(best_tile.m) + " x " + std::to_string(best_tile.n) +
                          " (it gives " + std::to_string(best) + " of " + std::to_string(with_waves.size()) +
                          " measured wave counts" +
                          (tied ? std::string(", as many as another shape; its misses lie closer") : std::string()) + ")");
    } else if (!with_waves.empty()) {
      rep.notes.push_back("no one tile gives the unaligned GEMMs' wave counts; unaligned GEMMs choose among the tiles");
    }
  }
  auto fitted_error = [&](const ComputeProfile& q, bool (*keep)(const KernelMeasurement&, Dtype), Dtype d) {
    const ComputeModel qm(gpu, q);
    std::vector<double> e;
    for (const auto* m : gemm_fit)
      if (keep(*m, d)) e.push_back(std::fabs(qm.time(m->kernel).seconds() - m->seconds) / m->seconds);
    return median(e) + 0.25 * (e.empty() ? 0 : *std::max_element(e.begin(), e.end()));
  };
  auto fit_dtype = [&](ComputeProfile& q, Dtype d) {
    const auto di = static_cast<std::size_t>(d);
    for (int iter = 0; iter < 4; ++iter) {
      std::vector<std::vector<double>> a;
      std::vector<double> t;
      for (const auto* m : gemm_fit) {
        if (m->kernel.dtype != d) continue;
        const GemmTerms g = gemm_terms(gpu, q, m->kernel.gemm, d);
        if (g.memory_bound || !aligned(*m)) continue;
        // The math time: what is left of the measured time once the fixed cost and split-K's
        // reduction epilogue are taken off and the streaming it overlapped with is undone.
        const double tc = math_part(m->seconds - q.kernel_latency.seconds() - g.fixed, g.tm, q.gemm_overlap_exponent);
        if (tc <= 0) continue;
        a.push_back({g.w, g.w_over_k});
        t.push_back(tc);
      }
      if (a.size() < 3) break;
      const Eigen::VectorXd x = solve_relative(a, t);
      if (!(x(0) > 0)) {
        rep.notes.push_back(std::string("GEMM fit for ") + std::string(to_string(d)) + " gave a non-positive rate term");
        break;
      }
      q.gemm_efficiency[di] = std::clamp(1.0 / x(0), 0.02, 1.0);
      // k_half per dtype; bf16's (the fullest grid) is also the default for the others.
      const double kh = std::clamp(x(1) / x(0), 0.0, 4096.0);
      q.gemm_k_half_by_dtype[di] = kh;
      if (d == Dtype::bf16) q.gemm_k_half = kh;
    }
  };
  auto fit_gemms = [&](ComputeProfile& q) {
    for (Dtype d : {Dtype::bf16, Dtype::fp16, Dtype::tf32, Dtype::fp8, Dtype::fp32, Dtype::fp64, Dtype::int8, Dtype::nf4}) {
      const auto di = static_cast<std::size_t>(d);
      ComputeProfile with = q, without = q;
      with.gemm_split_k[di] = true;
      without.gemm_split_k[di] = false;
      fit_dtype(with, d);
      fit_dtype(without, d);
      auto of_dtype = [](const KernelMeasurement& m, Dtype x) { return m.kernel.dtype == x; };
      // Split-K stays unless dropping it fits this dtype's rows strictly better.
      q = fitted_error(without, of_dtype, d) < fitted_error(with, of_dtype, d) ? without : with;
    }
  };
  // Bandwidth-bound GEMMs: their streaming bandwidth and ramp, t = L + stream_time(bytes /
  // (B * e), ramp), from the aligned fitted rows the model puts on the memory side (GEMV-like,
  // skinny and small products). Not linear in the ramp: least relative squares on a grid of the
  // ramp (0 to 20 us by 0.05 us) and the efficiency (0.30 to 1 by 0.0025).
  auto fit_stream = [&](ComputeProfile& q) {
    for (int iter = 0; iter < 3; ++iter) {
      std::vector<double> full, t, tc, red;  // bytes over the HBM bandwidth; measured time; math time; split-K epilogue
      for (const auto* m : gemm_fit) {
        const auto& g = m->kernel.gemm;
        if (!aligned(*m)) continue;
        const GemmTerms terms = gemm_terms(gpu, q, g, m->kernel.dtype);
        if (!terms.memory_bound) continue;
        const double bytes = double(g.batch) * dtype_bytes(m->kernel.dtype) *
                             (double(g.m) * double(g.k) + double(g.k) * double(g.n) + double(g.m) * double(g.n));
        full.push_back(bytes / gpu.hbm_bandwidth.value);
        t.push_back(m->seconds);
        tc.push_back(terms.tc);
        red.push_back(terms.fixed);
      }
      if (t.size() < 3) {
        if (iter == 0) rep.notes.push_back("fewer than three bandwidth-bound GEMMs; their bandwidth and ramp kept");
        break;
      }
      double best = 1e300, best_ramp = 0, best_eff = q.gemm_memory_efficiency;
      for (int ri = 0; ri <= 400; ++ri) {
        const double ramp = ri * 0.05e-6;
        for (int ei = 0; ei <= 280; ++ei) {
          const double eff = 0.30 + ei * 0.0025;
          double err = 0;
          for (std::size_t i = 0; i < t.size(); ++i)
            err += std::pow((q.kernel_latency.seconds() + overlap(tc[i], stream_time(full[i] / eff, ramp), q.gemm_overlap_exponent) +
                             red[i] - t[i]) / t[i], 2);
          if (err < best) best = err, best_ramp = ramp, best_eff = eff;
        }
      }
      q.gemm_stream_ramp = Time::from_seconds(best_ramp);
      q.gemm_memory_efficiency = best_eff;
    }
  };
  // Unaligned GEMMs: the ratio of the aligned model's time to the measured time, median over
  // the fitted unaligned rows: over all of them, and per element size where a dtype has two
  // rows of its own (what an unaligned row can still load at once depends on its element size).
  auto fit_unaligned = [&](ComputeProfile& q, bool last) {
    ComputeProfile as_aligned = q;
    as_aligned.gemm_unaligned_efficiency = 1.0;
    as_aligned.gemm_unaligned_efficiency_by_dtype.fill(0.0);
    const ComputeModel am(gpu, as_aligned);
    std::vector<double> ratios;
    std::array<std::vector<double>, kDtypeCount> by_dtype;
    for (const auto* m : gemm_fit) {
      const auto& g = m->kernel.gemm;
      if (aligned(*m)) continue;
      if (gemm_terms(gpu, q, g, m->kernel.dtype).memory_bound) continue;
      const double pred = am.time(m->kernel).seconds() - q.kernel_latency.seconds();
      const double meas = m->seconds - q.kernel_latency.seconds();
      if (pred > 0 && meas > 0) {
        ratios.push_back(pred / meas);
        by_dtype[static_cast<std::size_t>(m->kernel.dtype)].push_back(pred / meas);
      }
    }
    if (ratios.size() >= 2) q.gemm_unaligned_efficiency = std::clamp(median(ratios), 0.05, 1.0);
    else if (last) rep.notes.push_back("fewer than two compute-bound unaligned GEMMs; unaligned efficiency kept");
    for (std::size_t i = 0; i < kDtypeCount; ++i)
      q.gemm_unaligned_efficiency_by_dtype[i] = by_dtype[i].size() >= 2 ? std::clamp(median(by_dtype[i]), 0.05, 1.0) : 0.0;
  };
  // Which GEMMs are bandwidth-bound depends on both fits: alternate them. The overlap exponent
  // is chosen on a grid (0: the plain max) by the error on the fitted rows, each point with
  // its own unaligned efficiencies (else the unaligned rows, still at the starting profile's, bias the
  // choice).
  auto all_rows = [](const KernelMeasurement&, Dtype) { return true; };
  const ComputeProfile before_gemms = p;
  double best_overall = 1e300;
  ComputeProfile best_overall_p = p;
  for (double ov : {0.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0}) {
    ComputeProfile po = before_gemms;
    po.gemm_overlap_exponent = ov;
    for (int round = 0; round < 3; ++round) {
      double best_err = 1e300;
      ComputeProfile best_p = po;
      for (double wq : {0.0, 0.25, 0.5, 0.75, 1.0}) {
        ComputeProfile q = po;
        q.wave_quantization = wq;
        fit_gemms(q);
        const double err = fitted_error(q, all_rows, Dtype::bf16);
        if (err < best_err) {
          best_err = err;
          best_p = q;
        }
      }
      po = best_p;
      fit_stream(po);
    }
    fit_unaligned(po, false);
    const double err = fitted_error(po, all_rows, Dtype::bf16);
    if (err < best_overall) {
      best_overall = err;
      best_overall_p = po;
    }
  }
  p = best_overall_p;
  fit_unaligned(p, true);

  // Flash attention: efficiency per pass, with the sequence half-point chosen on a grid.
  for (bool bwd : {false, true}) {
    const KernelKind kind = bwd ? KernelKind::attention_bwd : KernelKind::attention_fwd;
    double best_err = 1e300, best_half = p.attention_seq_half, best_eff = 0;
    for (double half : {0.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0}) {
      std::vector<std::vector<double>> a;
      std::vector<double> t;
      for (const auto* m : att_fit) {
        if (m->kernel.kind != kind) continue;
        const auto& s = m->kernel.attn;
        const double shape = double(s.seq) / (double(s.seq) + half) * std::min(1.0, double(s.head_dim) / 128.0 + 0.25);
        const double peak = gpu.peak(Dtype::bf16).value;
        const double flops = bwd ? s.bwd_flops() : s.fwd_flops();
        const double rest = m->seconds - p.kernel_latency.seconds();
        if (rest <= 0) continue;
        a.push_back({flops / (peak * shape)});
        t.push_back(rest);
      }
      if (a.size() < 2) break;
      const Eigen::VectorXd x = solve_relative(a, t);
      if (!(x(0) > 0)) continue;
      double err = 0;
      for (std::size_t i = 0; i < a.size(); ++i) err += std::pow((a[i][0] * x(0) - t[i]) / t[i], 2);
      if (err < best_err) {
        best_err = err;
        best_half = half;
        best_eff = 1.0 / x(0);
      }
    }
    if (best_eff > 0) {
      (bwd ? p.attention_bwd_efficiency : p.attention_fwd_efficiency) = std::clamp(best_eff, 0.01, 1.0);
      if (!bwd) p.attention_seq_half = best_half;
    } else {
      rep.notes.push_back(std::string("no usable flash attention ") + (bwd ? "backward" : "forward") +
                          " measurements; efficiency kept");
    }
  }

  const ComputeModel cm(gpu, p);
  rep.gemm = held_out_stats(cm, gemm_held, gemm_fit.size());
  rep.memory = held_out_stats(cm, mem_held, mem_fit.size());
  rep.attention = held_out_stats(cm, att_held, att_fit.size());
  for (auto* set : {&gemm_fit, &mem_fit, &att_fit})
    for (const auto* m : *set) rep.residuals.push_back({m, cm.time(m->kernel).seconds(), false});
  for (auto* set : {&gemm_held, &mem_held, &att_held})
    for (const auto* m : *set) rep.residuals.push_back({m, cm.time(m->kernel).seconds(), true});
  // The grids above repeat the same warning; keep each once, in order.
  std::vector<std::string> notes;
  for (auto& n : rep.notes)
    if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
  rep.notes = notes;
  rep.profile = p;
  return rep;
}

}  // namespace scaleout
