#pragma once
// Collectives as algorithms: a collective over a group of ranks becomes phases of flows on the
// topology (FlowNetwork), so that collectives running at the same time contend where they share
// links. Sizes follow nccl-tests: `bytes` is the per-rank buffer of all-reduce, broadcast and
// reduce, the gathered output of all-gather, the input of reduce-scatter, the send buffer of
// all-to-all, and what each rank sends to the next of the group in send_recv.
//
// Algorithms (NCCL's, and those an MPI library would use):
//   ring          one ring per NIC rail (channels), pipelined: every member moves in lockstep, so a
//                 channel is one coupled flow; all-reduce moves 2(p-1)/p S per rank and takes
//                 2(p-1) steps of latency.
//   tree          NCCL's double binary tree for all-reduce: a chain inside each node, a binary tree
//                 between nodes and its mirror, each carrying half the data up and down pipelined.
//   nvls          NVLink SHARP (Hopper and later, one NVSwitch node): the switch reduces and
//                 multicasts; each GPU sends and receives S (p+1)/p.
//   nvls_tree     NVLS inside each node and a double binary tree between nodes among the GPUs
//                 of the same local index (each 1/m of the data), pipelined (NCCL's NVLS_TREE).
//   hierarchical  reduce-scatter inside nodes, all-reduce between nodes among GPUs of the same
//                 local index, all-gather inside nodes (phases with a barrier between them).
//   direct        every rank to every other rank at once (all-to-all; one step of all-gather etc.).
//   halving_doubling  recursive halving reduce-scatter then recursive doubling all-gather
//                 (Thakur, Rabenseifner & Gropp 2005), a phase per step.
//
// Latency is NCCL's own model (src/graph/tuning.cc, NVIDIA/nccl commit b6475625, NCCL 2.19): a
// base latency per algorithm and protocol plus a per-step hardware latency by link class
// (NVLink, PCIe, network), e.g. ring all-reduce: base + (2(p-1) - 2 nodes) intra + 2 nodes inter.
// Protocols (LL, LL128, Simple) cost bandwidth as NCCL models it (LL moves 8-byte lines carrying
// 4 bytes and is capped by llMaxBw; LL128 120 of every 128 bytes). The choice of algorithm and
// protocol per size is NCCL's: the lowest latency + bytes / bandwidth among ring, tree, NVLS and NVLS tree
// (NCCL's tree is the hierarchical one across nodes: chains inside, binary trees between). The
// explicit hierarchical, direct and halving_doubling algorithms run only when asked for, except
// direct for all-to-all and send/recv, which is what NCCL does for those.
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hardware/kernel.hpp"  // CollectiveKind
#include "hardware/topology.hpp"
#include "sim/network/flow_network.hpp"

namespace scaleout {

enum class CollectiveAlgorithm : std::uint8_t { ring, tree, nvls, nvls_tree, hierarchical, direct, halving_doubling };
enum class Protocol : std::uint8_t { ll, ll128, simple };

const char* collective_name(CollectiveKind k);        // "all_reduce", ...
const char* algorithm_name(CollectiveAlgorithm a);    // "ring", ...
const char* protocol_name(Protocol p);                // "LL", "LL128", "Simple"
// Accepts "allreduce", "all_reduce", "all-reduce" and the like.
std::optional<CollectiveKind> parse_collective(std::string_view s);
std::optional<CollectiveAlgorithm> parse_algorithm(std::string_view s);
std::optional<Protocol> parse_protocol(std::string_view s);

// nccl-tests' bus bandwidth factor: busbw = algbw * factor (all-reduce 2(n-1)/n, all-gather,
// reduce-scatter and all-to-all (n-1)/n, broadcast, reduce and send_recv 1).
double bus_bandwidth_factor(CollectiveKind k, int n);

struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::all_reduce;
  std::vector<int> ranks;
  double bytes = 0;
  std::optional<CollectiveAlgorithm> algorithm;  // absent: chosen per size as NCCL does
  std::optional<Protocol> protocol;              // absent: chosen with the algorithm
  int root = 0;                                  // position in `ranks` (broadcast, reduce)
  int tag = 0;                                   // flow label: separates concurrent collectives' ECMP paths
};

struct CollectiveChoice {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  Protocol protocol = Protocol::simple;
  double latency_s = 0;    // NCCL's latency for this algorithm and protocol
  double estimate_s = 0;   // the tuner's estimate (latency + bytes / modelled bandwidth)
};

// Why a spec cannot run (unknown or repeated ranks, an algorithm that does not implement the
// collective or does not fit the group), or nullopt when it can.
std::optional<std::string> check_collective(const Topology& topo, const CollectiveSpec& spec);

// The algorithm and protocol NCCL would pick (or the forced ones, with the protocol chosen).
CollectiveChoice choose_collective(const Topology& topo, const CollectiveSpec& spec);

// Runs the collective on the network; `done` runs when the last rank has finished. The spec must
// pass check_collective (an internal error otherwise).
void run_collective(FlowNetwork& net, const CollectiveSpec& spec, std::function<void()> done);

// Collectives that are always launched together (a folded rank's group and the sibling groups
// that run alongside it), planned once for a network. run_collectives starts them all; `done`
// runs when the first has finished. On links no other flow uses, a run is worked out apart
// (once per batch or spec) and costs one event; it is carried back onto the network, exactly
// where it had got to, as soon as another flow comes onto one of its links.
struct CollectiveBatch;
std::shared_ptr<const CollectiveBatch> prepare_collectives(FlowNetwork& net, const std::vector<CollectiveSpec>& specs);
void run_collectives(FlowNetwork& net, const std::shared_ptr<const CollectiveBatch>& batch, std::function<void()> done);

// The batch run alone on an idle network from time zero (worked out once per batch): when its
// first collective ends, and whether every collective of it ends then with no byte of it still on
// a link. Such a batch, launched on links that nothing else ever uses, always takes exactly
// `first_end` and leaves them free as it ends.
struct AloneTiming {
  Time first_end;
  bool ends_together = false;
};
AloneTiming batch_alone(FlowNetwork& net, const CollectiveBatch& batch);
// Every link the batch's flows cross, sorted, once each.
std::span<const LinkId> batch_links(const CollectiveBatch& batch);

// From now on, every collective of a batch launched on `net` that ends at another instant than the
// batch's first is told to `skew` (its index in the batch, its end minus the first's). A step
// folded by classes launches a class's collective with the sibling groups of the same classes
// beside it; none ending apart shows the classes behaved alike.
void watch_batches(FlowNetwork& net, std::function<void(const CollectiveBatch&, std::size_t index, Time skew)> skew);

// One collective alone on an idle network: its time in seconds, and the choice made.
double time_collective(const Topology& topo, const CollectiveSpec& spec, CollectiveChoice* choice = nullptr);

}  // namespace scaleout
