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

}  // namespace scaleout
