#pragma once
// Closed-form costs of collectives (the alpha-beta model of Thakur et al. 2005 and NCCL's bus
// bandwidth convention): the reference the flow-level network is tested against, and what the
// parallel step uses where no topology is simulated.
//   ring all-reduce:      2(p-1) a + 2(p-1)/p * S / B
//   ring reduce-scatter:  (p-1) a + (p-1)/p * S / B      (S: the full buffer)
//   ring all-gather:      (p-1) a + (p-1)/p * S / B      (S: the gathered buffer)
//   all-to-all (direct):  (p-1) a + (p-1)/p * S / B
//   send/recv:            a + S / B
#include <cstdint>

#include "hardware/kernel.hpp"  // CollectiveKind
#include "sim/engine/time.hpp"

namespace scaleout {

// Seconds for a collective over p ranks of S bytes on links of bandwidth B (bytes/s per rank,
// each direction) and per-step latency a.
double collective_seconds(CollectiveKind kind, std::int64_t p, double bytes, double bandwidth, double latency_s);

// The same over a group whose p ranks span nodes, `per_node` of them in each node (the fewest any
// of its nodes holds). NCCL runs one ring channel per NIC: a ring crosses each node boundary once
// per channel, so the data a node sends between nodes is one rank's, spread over the NICs of its
// members (NCCL's tuning model: bus bandwidth = channels x the network bandwidth per channel).
// Ring collectives run at min(intra-node, per_node x one GPU's NIC share), with NCCL's mix of
// per-step latencies (inter-node for the 2(N-1) steps that cross nodes of N, intra for the rest);
// all-to-all sends (p - per_node)/p of the buffer through the GPU's NIC share and
// (per_node - 1)/p over the node's own links at once.
struct TwoTierLinks {
  double intra_bandwidth, intra_latency_s;  // per GPU and direction, inside a node
  double inter_bandwidth, inter_latency_s;  // one GPU's share of its node's NICs
};
double collective_seconds_across_nodes(CollectiveKind kind, std::int64_t p, std::int64_t per_node, double bytes,
                                       const TwoTierLinks& links);

}  // namespace scaleout
