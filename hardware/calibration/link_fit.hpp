#pragma once
// The link fit: scaleout-links measurements (P2P copies and NCCL collectives on one machine) into
// the link figures of a profile (hardware/link_profile.hpp), by inverting the simulator's own
// collective model (sim/network/collectives.hpp) rather than a formula of its own.
//
// For one row and a fixed algorithm and protocol the simulator's time on an idle network is
//   t = L0 + k * c + X * u
// with L0 its latency and X its transfer time at the current figures, c a per-step latency
// correction taking k steps, and u a bandwidth factor (the inverse of an efficiency ratio). k, L0
// and X are read off the simulator by probing it (a microsecond more per step; 1 % less
// efficiency), so the fit is linear and inverts exactly what `scaleout collective` predicts.
// Weighted least squares (Eigen), relative error as the loss:
//   link classes (nvlink, pcie, network): send/recv rows of NCCL (or, where a class has none,
//     cudaMemcpyPeer rows taken as send/recv) -> the link efficiency and a step latency correction;
//   algorithms (ring, tree): all-reduce with NCCL_ALGO forced, and all-gather, reduce-scatter and
//     broadcast (rings in the model) -> a per-step latency correction and a bus efficiency.
// The plain copies also get a latency + bytes / bandwidth line per class and method, for the report.
// Held out: every 4th size of each series, and every group size but the smallest and the largest;
// all-to-all and unforced all-reduce rows are only compared (the model's direct algorithm and its
// choice between ring and tree, with NVLS off as measured).
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "hardware/cluster.hpp"
#include "hardware/kernel.hpp"
#include "hardware/link_profile.hpp"

namespace scaleout {

struct LinkRow {
  enum class Source { p2p, collective };
  Source source = Source::collective;
  // p2p: from src to dst by "memcpy" (cudaMemcpyPeerAsync) or "kernel" (stores into peer memory).
  int src = 0, dst = 0;
  std::string method;
  std::string link;  // the harness's class of the pair from nvidia-smi topo -m (documentation)
  // collective: NCCL's operation over `ranks`; algorithm "auto", "ring" or "tree" (NCCL_ALGO).
  CollectiveKind kind = CollectiveKind::send_recv;
  std::vector<int> ranks;
  std::string algorithm = "auto";
  double bytes = 0;
  double seconds = 0;
  std::string where;  // "file: /collectives/12", for messages
};

struct LinkMeasurements {
  std::string gpu_name;
  int gpu_count = 0;
  std::string measured_on;  // GPU, driver, NCCL, date
  std::string file;
  std::vector<LinkRow> rows;
};

// A line latency + bytes / bandwidth through plain copies of one class and method.
struct CopyLine {
  std::string link, method;
  double latency_s = 0, bandwidth = 0;
  std::size_t rows = 0;
};

struct LinkClassFit {
  bool fitted = false;
  double efficiency = 0;      // of the cluster's datasheet bandwidth for the class
  double step_latency_s = 0;  // correction to NCCL's per-step latency of the class
  std::size_t rows = 0;
  bool from_copies = false;   // no NCCL send/recv rows: cudaMemcpyPeer rows used instead
};

struct AlgorithmFit {
  bool fitted = false;
  double step_latency_s = 0;
  double bus_efficiency = 1;
  std::size_t rows = 0;
};

struct LinkResidual {
  const LinkRow* row = nullptr;
  bool held_out = false;
  double predicted_s = 0;
  std::string algorithm;  // the model's choice, "ring/Simple"
};

struct LinkFitStats {
  std::size_t fitted = 0, held_out = 0;
  double fitted_median_rel_error = 0;
  double held_out_median_rel_error = 0, held_out_worst_rel_error = 0;
  // Bus bandwidth error of held-out rows of 64 MiB and more (|busbw_model / busbw_measured - 1|).
  std::size_t held_out_large = 0;
  double busbw_median_rel_error = 0, busbw_worst_rel_error = 0;
};

struct LinkFitReport {
  ClusterSpec cluster;  // the cluster measured, with the fitted figures applied
  LinkProfile links;    // the figures for a profile's "links" section
  std::array<LinkClassFit, 3> classes{};  // by LinkKind: nvlink, pcie, network
  AlgorithmFit ring, tree;
  std::vector<CopyLine> copies;
  LinkFitStats stats;
  std::vector<LinkResidual> residuals;
  std::vector<std::string> notes;
};

// Fits the rows measured on (the first GPUs of) `cluster`; its figures are the starting point and
// the reference of the efficiencies. Rows over one rank are ignored. The ranks of every row must be
// GPUs of the cluster (the reader checks it).
LinkFitReport fit_links(const LinkMeasurements& m, const ClusterSpec& cluster);
// The report points into the measurements: they must outlive it.
LinkFitReport fit_links(LinkMeasurements&&, const ClusterSpec&) = delete;

// The simulator's time for one collective row on a cluster (what the fit compares with).
double predict_link_row(const ClusterSpec& cluster, const LinkRow& row, std::string* algorithm = nullptr);

}  // namespace scaleout
