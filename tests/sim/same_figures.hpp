#pragma once
// A folded step against the same step with every GPU simulated: GPU 0's figures and each stage's
// peak memory must agree (tests of exact folding by symmetry classes).
#include <catch2/catch.hpp>

#include "sim/training/step.hpp"

namespace scaleout {

inline void check_same_figures(const StepResult& folded, const StepResult& full) {
  CHECK(folded.step_time_s == Approx(full.step_time_s).epsilon(1e-12));
  CHECK(folded.compute_s == Approx(full.compute_s).epsilon(1e-12));
  CHECK(folded.dp_comm_total_s == Approx(full.dp_comm_total_s).epsilon(1e-12).margin(1e-15));
  CHECK(folded.exposed_comm_s == Approx(full.exposed_comm_s).epsilon(1e-9).margin(1e-15));
  CHECK(folded.peer_wait_s == Approx(full.peer_wait_s).epsilon(1e-9).margin(1e-15));
  CHECK(folded.max_peer_wait_s == Approx(full.max_peer_wait_s).epsilon(1e-9).margin(1e-15));
  CHECK(folded.pipeline_bubble_s == Approx(full.pipeline_bubble_s).epsilon(1e-9).margin(1e-15));
  CHECK(folded.host_stall_s == Approx(full.host_stall_s).epsilon(1e-9).margin(1e-15));
  CHECK(folded.peak_bytes == Approx(full.peak_bytes).epsilon(1e-12));
  REQUIRE(folded.rank_peak_bytes.size() == full.rank_peak_bytes.size());
  for (std::size_t i = 0; i < full.rank_peak_bytes.size(); ++i)
    CHECK(folded.rank_peak_bytes[i] == Approx(full.rank_peak_bytes[i]).epsilon(1e-12));
  CHECK(folded.kernels == full.kernels);
}

}  // namespace scaleout
