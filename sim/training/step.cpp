#include "sim/training/step.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_map>

#include "models/step_tape.hpp"
#include "sim/engine/check.hpp"
#include "sim/engine/chunked_vector.hpp"
#include "sim/engine/stream.hpp"
#include "sim/network/collective_model.hpp"
#include "sim/network/collectives.hpp"
#include "sim/network/flow_network.hpp"
#include "sim/training/planner.hpp"

namespace scaleout {

namespace {

struct GroupShape {
  std::int64_t size = 1;
  bool spans_nodes = false;
  std::int64_t per_node = 1;  // members in the node that holds the fewest of them
};

// Stride of each group in the rank numbering, from the placement order (fastest first).
std::int64_t group_stride(const ParallelPlan& p, CommGroup g) {
  if (g == CommGroup::ep) g = CommGroup::dp;  // expert parallelism runs inside the data-parallel group
  std::int64_t stride = 1;
  std::size_t pos = 0;
  const std::string_view o = p.order;
  while (pos < o.size()) {
    const std::size_t dash = o.find('-', pos);
    const std::string_view name = o.substr(pos, dash == std::string_view::npos ? std::string_view::npos : dash - pos);
    const CommGroup here = name == "tp" ? CommGroup::tp : name == "cp" ? CommGroup::cp : name == "dp" ? CommGroup::dp : CommGroup::pp;
    if (here == g) return stride;
    stride *= here == CommGroup::tp ? p.tp : here == CommGroup::cp ? p.cp : here == CommGroup::dp ? p.dp : p.pp;
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  return stride;
}

std::int64_t stage_rank(const ParallelPlan& p, std::int64_t stage) { return stage * group_stride(p, CommGroup::pp); }

// What a peak of tensors needs of the GPU: the peak, the allocator's fragmentation on it, and the
// context's reserve (the plan search's screen and every step's verdict: one formula).
double required_bytes_of(const StepConfig& cfg, double peak) { return peak * (1.0 + cfg.fragmentation) + cfg.context_reserve_bytes; }

// A group of `size` ranks `stride` apart from the representative of `stage`.
GroupShape group_shape_of(const ParallelPlan& p, std::int64_t size, std::int64_t stride, std::int64_t stage) {
  const std::int64_t base = stage_rank(p, stage);
  const std::int64_t gpn = std::max<std::int64_t>(1, p.gpus_per_node);
  const std::int64_t last = base + (size - 1) * stride;
  const bool spans = size > 1 && (base / gpn) != (last / gpn);
  std::int64_t per_node = 1;
  if (spans && stride < gpn) {
    // Members form base + i * stride: count those in the first and last nodes, and the fewest a
    // node in between holds.
    const std::int64_t first_node_end = (base / gpn + 1) * gpn;
    const std::int64_t in_first = (first_node_end - base + stride - 1) / stride;
    const std::int64_t last_node_start = (last / gpn) * gpn;
    const std::int64_t in_last = (last - std::max(last_node_start, base)) / stride + 1;
    per_node = std::min(in_first, in_last);
    if (last / gpn - base / gpn > 1) per_node = std::min(per_node, gpn / stride);
    per_node = std::max<std::int64_t>(per_node, 1);
  }
  return {size, spans, per_node};
}

// The shape of a group given by its members' global ranks (a group of two strides: the
// data-parallel group with the context-parallel ranks in it).
GroupShape group_shape_of_members(const ParallelPlan& p, const std::vector<std::int64_t>& members) {
  const std::int64_t gpn = std::max<std::int64_t>(1, p.gpus_per_node);
  std::vector<std::int64_t> nodes(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) nodes[i] = members[i] / gpn;
  std::sort(nodes.begin(), nodes.end());
  std::int64_t fewest = std::int64_t(members.size()), distinct = 0;
  for (std::size_t i = 0, j = 0; i < nodes.size(); i = j) {
    while (j < nodes.size() && nodes[j] == nodes[i]) ++j;
    fewest = std::min(fewest, std::int64_t(j - i));
    ++distinct;
  }
  const bool spans = distinct > 1;
  return {std::int64_t(members.size()), spans, spans ? std::max<std::int64_t>(fewest, 1) : 1};
}

// A data-parallel group of `stage`'s representative with its context-parallel ranks: every
// (cp, dp) pair with dp below `dp_end` and a multiple of `dp_step` (the whole group: p.dp, 1; the
// experts': p.dp, ep; HYBRID_SHARD's shard group: the node's share, 1).
GroupShape dp_cp_shape(const ParallelPlan& p, std::int64_t dp_end, std::int64_t dp_step, std::int64_t stage) {
  const std::int64_t base = stage_rank(p, stage), scp = group_stride(p, CommGroup::cp), sdp = group_stride(p, CommGroup::dp);
  // A step times the same groups' collectives over and over (every layer's gather under ZeRO-3),
  // and a group holds up to dp * cp members (8,192 in a 16,384-GPU plan search, where listing
  // them per collective was a third of the search's time): their shapes are remembered, per
  // thread (a plan search simulates on several), by what decides them.
  const std::array<std::int64_t, 7> key{std::max<std::int64_t>(1, p.gpus_per_node), base, scp, sdp, p.cp, dp_end, dp_step};
  thread_local std::map<std::array<std::int64_t, 7>, GroupShape> known;
  if (const auto it = known.find(key); it != known.end()) return it->second;
  std::vector<std::int64_t> members;
  for (std::int64_t d = 0; d < dp_end; d += dp_step)
    for (std::int64_t c = 0; c < p.cp; ++c) members.push_back(base + c * scp + d * sdp);
  const GroupShape shape = group_shape_of_members(p, members);
  if (known.size() >= 4096) known.clear();
  known.emplace(key, shape);
  return shape;
}

GroupShape group_shape(const ParallelPlan& p, CommGroup g, std::int64_t stage) {
  if (g == CommGroup::dp && p.cp > 1) return dp_cp_shape(p, p.dp, 1, stage);
  std::int64_t size = 1;
  switch (g) {
    case CommGroup::tp: size = p.tp; break;
    case CommGroup::cp: size = p.cp; break;
    case CommGroup::dp: size = p.dp; break;
    case CommGroup::ep: size = p.ep; break;
    case CommGroup::pp: size = p.pp; break;
  }
  return group_shape_of(p, size, group_stride(p, g), stage);
}

// The links a transfer crosses: the node's own (NVLink or PCIe), or its NIC share between nodes,
// as the bandwidth NCCL reaches on them and the per-step latency.
struct LinkChoice {
  double bandwidth, latency_s;
};
LinkChoice link_for(const LinkParams& l, bool cross_nodes) {
  return cross_nodes ? LinkChoice{l.inter_node_bandwidth * l.inter_node_efficiency, l.inter_node_latency_s}
                     : LinkChoice{l.intra_node_bandwidth * l.intra_node_efficiency, l.intra_node_latency_s};
}

// Whether the representatives of two pipeline stages sit in different nodes.
bool stages_cross_nodes(const ParallelPlan& p, std::int64_t a, std::int64_t b) {
  const std::int64_t gpn = std::max<std::int64_t>(1, p.gpus_per_node);
  return stage_rank(p, a) / gpn != stage_rank(p, b) / gpn;
}

}  // namespace

std::int64_t placement_stride(const ParallelPlan& p, CommGroup g) { return group_stride(p, g); }

std::int64_t hybrid_shard_group(const ParallelPlan& p) {
  if (p.fsdp != FsdpMode::hybrid_shard) return p.dp;
  // The data-parallel ranks a node holds: those within a node's span at the group's stride.
  const std::int64_t stride = group_stride(p, CommGroup::dp), gpn = std::max<std::int64_t>(1, p.gpus_per_node);
  return stride >= gpn ? 1 : std::max<std::int64_t>(1, std::min(p.dp, gpn / stride));
}

namespace {
double collective_time_of(const ParallelPlan& p, CollectiveKind kind, const GroupShape& g, double bytes) {
  if (g.size <= 1) return 0;
  if (g.spans_nodes) {
    const LinkParams& l = p.links;
    const TwoTierLinks tiers{std::max(l.intra_node_bandwidth * l.intra_node_efficiency, 1.0), l.intra_node_latency_s,
                             std::max(l.inter_node_bandwidth * l.inter_node_efficiency, 1.0), l.inter_node_latency_s};
    return collective_seconds_across_nodes(kind, g.size, g.per_node, bytes, tiers);
  }
  const LinkChoice link = link_for(p.links, false);
  return collective_seconds(kind, g.size, bytes, std::max(link.bandwidth, 1.0), link.latency_s);
}
}  // namespace

double collective_time(const StepConfig& cfg, CollectiveKind kind, CommGroup group, double bytes, std::int64_t stage) {
  return collective_time_of(cfg.parallel, kind, group_shape(cfg.parallel, group, stage), bytes);
}

double hybrid_collective_time(const StepConfig& cfg, CollectiveKind kind, bool replicas, double bytes, std::int64_t stage) {
  const ParallelPlan& p = cfg.parallel;
  const std::int64_t sg = hybrid_shard_group(p), stride = group_stride(p, CommGroup::dp);
  // (The shard group: the node's data-parallel ranks and their CP ranks.)
  if (!replicas && p.cp > 1) return collective_time_of(p, kind, dp_cp_shape(p, sg, 1, stage), bytes);
  const GroupShape g = replicas ? group_shape_of(p, p.dp / sg, stride * sg, stage) : group_shape_of(p, sg, stride, stage);
  return collective_time_of(p, kind, g, bytes);
}

double expert_dp_collective_time(const StepConfig& cfg, CollectiveKind kind, double bytes, std::int64_t stage) {
  const ParallelPlan& p = cfg.parallel;
  const std::int64_t e = std::max<std::int64_t>(1, p.ep);
  if (p.cp > 1) return collective_time_of(p, kind, dp_cp_shape(p, p.dp, e, stage), bytes);
  return collective_time_of(p, kind, group_shape_of(p, p.dp / e, group_stride(p, CommGroup::dp) * e, stage), bytes);
}

namespace {

enum Track : int { kHost = 0, kCompute = 1, kDpComm = 2, kSendFwd = 3, kSendBwd = 4 };

struct Chunk {
  const Tape* tape = nullptr;  // shared by every rank of the (virtual) stage
  std::unique_ptr<ChunkPlanner> planner;
};

// A memory change inside a run of kernels (RunChanges, below).
struct RunChange {
  Time offset, floor;  // floor: zero unless the change waits for the host
  double bytes;
  MemCategory category;
};

// A run's changes at one instant (the same busy and floor) are gathered before they are listed
// (simulate_step_round's `group`).
struct InstantGroup {
  TaskId task = 0;
  Time busy, floor;
  std::array<double, kMemCategoryCount> net{};  // per category; 0: untouched or cancelled out
  unsigned touched = 0;                         // bit c: net[c] was changed
  bool open = false, allocated = false;
};
static_assert(kMemCategoryCount <= 8 * sizeof(unsigned));

struct Segment {
  ChunkPlanner::Pass pin;  // the items the record points into
  const std::vector<PlanItem>* items = nullptr;  // recorded from items [start, start + count) of these
  std::size_t start = 0, count = 0;
  Time first_dt, first_launch, host, busy, floor;  // floors and the host clock from the clock at the start
  bool grown = false;
  std::uint64_t launches = 0;
  // Each kernel's time, in order, by the total it adds to: the rank's (compute: forward and
  // backward; recompute; optimizer), a collective's group's. Each total is a sum in order, so a
  // replay adds each list in order: the same sums as kernel by kernel, in tight loops.
  std::array<std::vector<double>, 3> by_rank_total;  // in rank_totals' order
  std::vector<std::pair<CommGroup, double>> comm;
  std::vector<RunChange> changes;  // (empty where has_block: the block keeps them)
  MemoryTracker::Block block;      // the changes summed up, where none waits for the host (has_block)
  bool has_block = false;
  InstantGroup open_group;  // the run's last instant, still gathering (when open)
  // Flow network: its collectives, where each starts in the run (the floor from the clock at the
  // start) and how long it takes (see Claim in simulate_step_round).
  struct Claimed {
    const Kernel* kernel;
    Time offset, floor, dt;
  };
  std::vector<Claimed> claims;
  unsigned aligned_keep = ~0u;        // what its collectives leave of the rank's lock-steps (`aligned`)
  // The lead's clock at its end (a paced lock-step, see Run), and where its collectives waited.
  bool lead_on = false;
  double lead_slowdown = 1.0;
  Time lead_busy, lead_floor;
  struct Waited {
    CommGroup group;
    Time busy, floor, lead_busy, lead_floor, launched;
  };
  std::vector<Waited> waits;
};
// By the stretch's first item, the GPU's slowdown and which of its groups' collectives join its
// runs (a rank of the same stage whose group waits for other ranks syncs where this one did not).
// On the flow network a joining collective's length is its own group's (where the group sits in
// the cluster): records are then the rank's own.
// And the slowdown of the lead it starts paced by (0: none). (Mask bit 27: the stretch's first
// task waits for something, an FSDP layer's gather.)
using SegmentKey = std::tuple<const PlanItem*, double, unsigned, int, double>;
// A stretch emits the same tasks wherever its items have the same content (every layer's ops
// alike): records are also found by their first item's content (and the same slowdown, joins and
// rank part as SegmentKey), then checked item by item.
using AlikeKey = std::tuple<std::uint64_t, double, unsigned, int, double>;

// What emitting a plan item in a run reads: its phase, memory changes (where memory is tracked)
// and kernels (their kind, time, launches and, for collectives, group, kind and size).
bool same_run_content(const PlanItem& a, const PlanItem& b, bool memory) {
  if (a.phase != b.phase || a.host_prologue_tensors != b.host_prologue_tensors) return false;
  if (memory && (a.allocs.size() != b.allocs.size() || a.frees.size() != b.frees.size())) return false;
  for (std::size_t i = 0; memory && i < a.allocs.size(); ++i)
    if (a.allocs[i].category != b.allocs[i].category || a.allocs[i].bytes != b.allocs[i].bytes) return false;
  for (std::size_t i = 0; memory && i < a.frees.size(); ++i)
    if (a.frees[i].category != b.frees[i].category || a.frees[i].bytes != b.frees[i].bytes) return false;
  const std::span<const Kernel> ka = a.kernels(), kb = b.kernels();
  if (ka.size() != kb.size()) return false;
  if (ka.data() == kb.data()) return true;
  for (std::size_t i = 0; i < ka.size(); ++i) {
    const Kernel &x = ka[i], &y = kb[i];
    if (x.kind != y.kind || x.seconds != y.seconds || x.launches != y.launches || x.group != y.group || x.coll != y.coll ||
        x.bytes != y.bytes)
      return false;
  }
  return true;
}

// One word into an FNV-style hash: FNV's prime, then the high bits folded down (byte-wise FNV-1a
// was sixteen dependent multiplies a word).
constexpr std::uint64_t hash_word(std::uint64_t h, std::uint64_t x) {
  h = (h ^ x) * 1099511628211ull;
  return h ^ (h >> 29);
}

std::uint64_t run_content_hash(const PlanItem& a, bool memory) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::uint64_t x) { h = hash_word(h, x); };
  mix(std::uint64_t(a.phase));
  if (memory) {
    mix(a.allocs.size() * 131 + a.frees.size());
    for (const MemOp& m : a.allocs) mix(std::bit_cast<std::uint64_t>(m.bytes));
    for (const MemOp& m : a.frees) mix(std::bit_cast<std::uint64_t>(m.bytes));
  }
  for (const Kernel& k : a.kernels()) {
    mix(std::uint64_t(k.kind) * 7 + std::uint64_t(k.launches));
    mix(std::bit_cast<std::uint64_t>(k.seconds));
  }
  return h;
}

// The tape of each virtual stage, built once for a step (and for both windows of an
// extrapolated one): it depends on the model, the training recipe and the stage, not on the
// rank or the number of micro-batches.
// So are the plans made of them (one book per tape: they do not depend on the number of
// micro-batches either).
struct TapeCache {
  std::map<std::int64_t, Tape> tapes;
  std::map<const Tape*, std::shared_ptr<ChunkPlanner::Book>> books;
  std::vector<int> classes;  // the symmetry classes the step simulates (refined by the rounds that split)
  bool split = false;        // a round found classes that do not hold: simulate again with `classes`
  // On the flow network a collective joins its rank's run where nothing else crossed its batch's
  // links while it ran: a round that finds other traffic there stops its group's collectives
  // joining from that pass on (by kind and the classes standing for the group's members; from the
  // pass, in its ranks' order), and the step is simulated again. Past a few such rounds, none joins.
  std::map<std::pair<int, std::vector<int>>, std::int64_t> join_until;
  int join_rounds = 0;
  std::size_t claims_made = 0;  // the most joined collectives a round claimed (room for the next)
  bool flow_joins_off = false;
  // simulate_step_round's records of runs, kept across rounds (with what they were recorded under).
  std::map<SegmentKey, Segment> segments;
  std::map<AlikeKey, const Segment*> alike;  // into segments
  std::map<SegmentKey, const Segment*> aliases;  // items whose stretch replays one recorded elsewhere
  std::set<AlikeKey> contents_seen;             // contents of stretches met once
  std::set<SegmentKey> seen_once;
  std::map<const std::vector<PlanItem>*, std::pair<ChunkPlanner::Pass, std::vector<PlanItem>>> split_passes;
  std::vector<int> records_classes;
  bool records_track_memory = true, records_flow_joins_off = false;
  // The lists simulate_step's checks of its windows read, recorded only in those windows: each
  // rank's passes in a pipeline's, or with a slow GPU on the analytic network without one
  // (StepResult::pass_starts_ps, settled_in) and, with a slow GPU, what bound each rendezvous's
  // arrivals and each kernel's start (StepResult::arrivals_ps and tasks_ps, same_bindings).
  bool passes = false, bindings = false;
};

struct RankState {
  StreamId streams[5];
  std::vector<Chunk> chunks;
  MemoryTracker mem;
  // first and last compute task of each (forward?, chunk, micro-batch)
  std::map<std::tuple<bool, int, int>, std::pair<TaskId, TaskId>> spans;
  TaskId last_backward = 0;
  bool any_backward = false;
  std::vector<TaskId> dp_tasks;
  TaskId first_optimizer = 0;
  bool has_optimizer = false;
  // The passes in schedule order, with the pipeline send each ends with (if any).
  struct Pass {
    bool forward;
    int chunk, mb;
    TaskId first, last, send;
    bool sends;
    TaskId made_from = 0;  // the first task made for it (those up to the next pass's are its own)
  };
  std::vector<Pass> passes;
};

struct Work {
  bool forward;
  int chunk;
  int mb;
  bool weight = false;  // zero-bubble: the W pass (weight gradients) of micro-batch mb
};

// The heads and tails of per-task lists threaded through one array of links (TaskLists,
// TaskMemOps): a vector per task cost a heap allocation per task.
class TaskChains {
 protected:
  static constexpr std::uint32_t kNone = 0xffffffffu;
  // Appends entries first..last, already linked to each other, to the task's list; link(e) is
  // entry e's link to the next.
  template <class Link>
  void append(TaskId task, std::uint32_t first, std::uint32_t last, Link&& link) {
    if (task >= head_.size()) {
      head_.grow_to(std::size_t(task) + 1, kNone);
      tail_.grow_to(std::size_t(task) + 1, kNone);
    }
    if (tail_[task] == kNone) head_[task] = first;
    else link(tail_[task]) = first;
    tail_[task] = last;
  }
  std::uint32_t head(TaskId task) const { return task < head_.size() ? head_[task] : kNone; }
  void reserve_tasks(std::size_t tasks) {
    head_.reserve(tasks);
    tail_.reserve(tasks);
  }

 private:
  ChunkedVector<std::uint32_t> head_, tail_;
};

// Per-task lists (a task's dependencies) in insertion order.
template <class T>
class TaskLists : TaskChains {
 public:
  void push(TaskId task, const T& value) { push(task, std::span<const T>(&value, 1)); }
  void push(TaskId task, std::span<const T> values) {
    if (values.empty()) return;
    // The values in a row, each linked to the next.
    const auto e = static_cast<std::uint32_t>(nodes_.size());
    for (const T& v : values) nodes_.push_back({v, static_cast<std::uint32_t>(nodes_.size() + 1)});
    nodes_.back().next = kNone;
    append(task, e, static_cast<std::uint32_t>(nodes_.size() - 1), [this](std::uint32_t i) -> std::uint32_t& { return nodes_[i].next; });
  }
  void reserve(std::size_t tasks, std::size_t values) {
    reserve_tasks(tasks);
    nodes_.reserve(values);
  }
  template <class F>
  void for_each(TaskId task, F&& f) const {
    for (std::uint32_t e = head(task); e != kNone; e = nodes_[e].next) f(nodes_[e].value);
  }

 private:
  struct Node {
    T value;
    std::uint32_t next;
  };
  ChunkedVector<Node> nodes_;
};

// What each task allocates when it starts and frees when it ends, in the order listed: one list
// per task threaded through columns (bytes, next, category and whether it frees: 13 bytes a
// change, not a 24-byte node in one of two lists with their own heads).
class TaskMemOps : TaskChains {
 public:
  void push(TaskId task, const MemOp& op, bool frees) { push(task, std::span<const MemOp>(&op, 1), frees); }
  void push(TaskId task, std::span<const MemOp> ops, bool frees) {
    if (off_ || ops.empty()) return;
    const auto e = static_cast<std::uint32_t>(bytes_.size());
    for (const MemOp& op : ops) {
      bytes_.push_back(op.bytes);
      next_.push_back(static_cast<std::uint32_t>(next_.size() + 1));
      tag_.push_back(static_cast<std::uint8_t>(static_cast<unsigned>(op.category) | (frees ? kFrees : 0u)));
    }
    next_.back() = kNone;
    append(task, e, static_cast<std::uint32_t>(next_.size() - 1), [this](std::uint32_t i) -> std::uint32_t& { return next_[i]; });
  }
  void turn_off() { off_ = true; }  // pushes are dropped (a step without memory accounting)
  void reserve(std::size_t tasks, std::size_t ops) {
    if (off_) return;
    reserve_tasks(tasks);
    bytes_.reserve(ops);
    next_.reserve(ops);
    tag_.reserve(ops);
  }
  void release() { *this = TaskMemOps(); }  // gives the memory back (nothing is read again)
  // f(op) for each of the task's allocations (frees = false) or frees, in the order pushed.
  template <class F>
  void for_each(TaskId task, bool frees, F&& f) const {
    for (std::uint32_t e = head(task); e != kNone; e = next_[e])
      if (((tag_[e] & kFrees) != 0) == frees) f(MemOp{static_cast<MemCategory>(tag_[e] & ~kFrees), bytes_[e]});
  }

 private:
  static constexpr unsigned kFrees = 0x80u;
  ChunkedVector<double> bytes_;
  ChunkedVector<std::uint32_t> next_;
  ChunkedVector<std::uint8_t> tag_;
  bool off_ = false;
};

// The memory changes inside runs of kernels, by task. A run's changes are listed while it is its
// rank's open run, so each task's changes are contiguous and tasks come in increasing order: each
// task's first change is enough to find them (4 bytes a task, not a list). A change happens at
// max(run start + offset, floor), and the floor only matters where the host fell behind inside the
// run (floor > the run's release + offset; the start is never before the release): other changes
// keep no floor. Columns of offset, bytes and category: 17 bytes a change, not 40.
// A run replayed from a record (see Segment) lists the record's changes by reference, with the
// shift of its floors: changes listed after them (its last instant, gathered after the replay)
// go to the columns as usual.
class RunChanges {
 public:
  void refer(TaskId task, std::span<const RunChange> changes, Time shift, const MemoryTracker::Block* block) {
    SCALEOUT_CHECK(first_.empty() || task + 1 >= first_.size(), "run changes listed out of task order");
    if (task >= first_.size()) first_.grow_to(std::size_t(task) + 1, static_cast<std::uint32_t>(offset_.size()));
    if (ref_of_.size() <= task) ref_of_.grow_to(std::size_t(task) + 1, 0);
    refs_.push_back({changes, shift, block});
    ref_of_[task] = static_cast<std::uint32_t>(refs_.size());
  }
  void reserve(std::size_t changes) {
    offset_.reserve(changes);
    bytes_.reserve(changes);
    category_.reserve(changes);
  }
  void push(TaskId task, Time release, Time offset, Time floor, double bytes, MemCategory c) {
    SCALEOUT_CHECK(first_.empty() || task + 1 >= first_.size(), "run changes listed out of task order");
    const auto at = static_cast<std::uint32_t>(offset_.size());
    if (task >= first_.size()) first_.grow_to(std::size_t(task) + 1, at);
    if (floor > release + offset) late_.push_back({at, floor});
    offset_.push_back(offset);
    bytes_.push_back(bytes);
    category_.push_back(static_cast<std::uint8_t>(c));
  }
  std::size_t size() const { return offset_.size(); }
  void release() { *this = RunChanges(); }  // gives the memory back (nothing is read again)
  // f(category, signed bytes, offset, floor) for each of the task's changes (floor zero: none),
  // or whole(block) for a record's summed up (MemoryTracker::Block) and f for the rest.
  template <class W, class F>
  void for_each(TaskId task, W&& whole, F&& f) const {
    if (task >= first_.size()) return;
    if (task < ref_of_.size() && ref_of_[task] != 0) {
      const Ref& ref = refs_[ref_of_[task] - 1];
      if (ref.block)
        whole(*ref.block);
      else
        for (const RunChange& c : ref.changes) f(c.category, c.bytes, c.offset, c.floor > Time::zero() ? c.floor + ref.shift : Time::zero());
    }
    const std::uint32_t begin = first_[task];
    const std::uint32_t end = task + 1 < first_.size() ? first_[task + 1] : static_cast<std::uint32_t>(offset_.size());
    for_range(begin, end, f);
  }
  // The same for the changes listed [begin, end), whatever their tasks.
  template <class F>
  void for_range(std::uint32_t begin, std::uint32_t end, F&& f) const {
    if (begin >= end) return;  // most tasks: none listed (a replayed run refers to its record's)
    auto late = std::lower_bound(late_.begin(), late_.end(), begin, [](const auto& l, std::uint32_t i) { return l.first < i; });
    for (std::uint32_t i = begin; i < end; ++i) {
      Time floor = Time::zero();
      if (late != late_.end() && late->first == i) floor = (late++)->second;
      f(static_cast<MemCategory>(category_[i]), bytes_[i], offset_[i], floor);
    }
  }

 private:
  ChunkedVector<std::uint32_t> first_;  // by task; a later task's first ends it
  ChunkedVector<Time> offset_;
  ChunkedVector<double> bytes_;
  ChunkedVector<std::uint8_t> category_;
  std::vector<std::pair<std::uint32_t, Time>> late_;  // (change, floor), in change order
  struct Ref {
    std::span<const RunChange> changes;
    Time shift;
    const MemoryTracker::Block* block;  // the same changes summed up, or null
  };
  ChunkedVector<Ref> refs_;
  ChunkedVector<std::uint32_t> ref_of_;  // by task: 1 + its entry in refs_, 0: none
};

// GPUs that provably behave alike. On the analytic network a GPU's timeline is fixed by its
// stage, its own faults and the timelines of the GPUs it waits for: its TP, CP, DP and EP groups
// and its pipeline neighbours. Colour refinement (start from stage and faults; split GPUs whose
// groups hold different multisets of colours, or whose neighbours differ; repeat until nothing
// splits) gives the coarsest partition stable under those relations, and GPUs of one class then
// have identical timelines (by induction over the events): one of each is simulated. Without
// faults it is one class per stage (plain folding); one straggler adds a few classes per stage
// (its TP peers, its DP peers, their pipeline neighbours), not a rank per GPU.
// On the flow network a GPU's collectives also contend with the flows on their links; the step
// checks that as it runs (watch_batches: every sibling group launched with a class's collective
// must end with it) and splits the classes where one did not (simulate_step_round).
// Returns each GPU's class, GPUs indexed s * Q + q with q = tp_i + tp * (cp_i + cp * dp_i),
// classes numbered in index order.
// The global rank of GPU index i (i = s * Q + q, as symmetry_classes numbers GPUs).
std::int64_t rank_of_index(const ParallelPlan& p, std::int64_t i) {
  const std::int64_t Q = p.tp * p.cp * p.dp, q = i % Q;
  return (q % p.tp) * group_stride(p, CommGroup::tp) + ((q / p.tp) % p.cp) * group_stride(p, CommGroup::cp) +
         (q / (p.tp * p.cp)) * group_stride(p, CommGroup::dp) + (i / Q) * group_stride(p, CommGroup::pp);
}

// Whether the experts' gradients are reduced (and their state sharded) over groups of their own:
// expert parallelism inside a larger data-parallel group, except under HYBRID_SHARD.
bool expert_dp_groups(const ParallelPlan& p) {
  return p.ep > 1 && p.ep < p.dp * p.cp && p.fsdp != FsdpMode::hybrid_shard;
}

std::vector<int> symmetry_classes(const ParallelPlan& p, const std::vector<std::vector<double>>& fault_of) {
  const std::int64_t Q = p.tp * p.cp * p.dp, n = p.pp * Q;
  const std::int64_t ep = std::max<std::int64_t>(1, p.ep);
  // HYBRID_SHARD's shard groups (consecutive data-parallel ranks) and replica groups (the same
  // shard position in each) are groups of their own.
  const std::int64_t sg = hybrid_shard_group(p);
  const bool hybrid = sg < p.dp;
  // The experts' data-parallel groups (the same position in every EP group), where their
  // gradients are reduced apart from the dense ones.
  const bool expert_dp = expert_dp_groups(p);
  std::vector<int> colour(static_cast<std::size_t>(n), 0);
  auto renumber = [&](const auto& key_of) {
    std::map<decltype(key_of(0)), int> ids;
    std::vector<int> out(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out[std::size_t(i)] = ids.emplace(key_of(i), int(ids.size())).first->second;
    return std::make_pair(out, ids.size());
  };
  auto [initial, count] = renumber([&](std::int64_t i) { return std::make_pair(i / Q, fault_of[std::size_t(i)]); });
  colour = std::move(initial);
  for (;;) {
    // The multiset of colours in each group, interned; a GPU's group of kind k is (kind, base
    // index, stride, size) and the signature is computed once per group.
    std::map<std::vector<int>, int> sig_ids;
    auto signature = [&](std::int64_t first, std::int64_t stride, std::int64_t size) {
      std::vector<int> cs;
      cs.reserve(std::size_t(size));
      for (std::int64_t j = 0; j < size; ++j) cs.push_back(colour[std::size_t(first + j * stride)]);
      std::sort(cs.begin(), cs.end());
      return sig_ids.emplace(std::move(cs), int(sig_ids.size())).first->second;
    };
    std::vector<std::array<int, 7>> sig(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t q = i % Q;
      const std::int64_t tp_i = q % p.tp, cp_i = (q / p.tp) % p.cp, dp_i = q / (p.tp * p.cp);
      // Computed at the group's first member and copied to the others.
      if (tp_i == 0) {
        const int g = signature(i, 1, p.tp);
        for (std::int64_t j = 0; j < p.tp; ++j) sig[std::size_t(i + j)][0] = g;
      }
      if (cp_i == 0) {
        const int g = signature(i, p.tp, p.cp);
        for (std::int64_t j = 0; j < p.cp; ++j) sig[std::size_t(i + j * p.tp)][1] = g;
      }
      if (dp_i == 0 && cp_i == 0) {  // the data-parallel group with its context-parallel ranks
        const int g = signature(i, p.tp, p.cp * p.dp);
        for (std::int64_t j = 0; j < p.cp * p.dp; ++j) sig[std::size_t(i + j * p.tp)][2] = g;
      }
      if (dp_i % ep == 0) {
        const std::int64_t size = std::min(ep, p.dp - dp_i);
        const int g = signature(i, p.tp * p.cp, size);
        for (std::int64_t j = 0; j < size; ++j) sig[std::size_t(i + j * p.tp * p.cp)][3] = g;
      }
      if (hybrid && dp_i % sg == 0 && cp_i == 0) {  // a shard group with its CP ranks
        const int g = signature(i, p.tp, p.cp * sg);
        for (std::int64_t j = 0; j < p.cp * sg; ++j) sig[std::size_t(i + j * p.tp)][4] = g;
      }
      if (hybrid && dp_i < sg) {
        const std::int64_t size = p.dp / sg;
        const int g = signature(i, p.tp * p.cp * sg, size);
        for (std::int64_t j = 0; j < size; ++j) sig[std::size_t(i + j * p.tp * p.cp * sg)][5] = g;
      }
      if (expert_dp && dp_i < ep && cp_i == 0) {  // every cp_i, dp_i modulo ep
        std::vector<std::int64_t> members;
        for (std::int64_t d = 0; d < p.dp; d += ep)
          for (std::int64_t c = 0; c < p.cp; ++c) members.push_back(i + p.tp * (c + p.cp * d));
        std::vector<int> cs;
        for (std::int64_t x : members) cs.push_back(colour[std::size_t(x)]);
        std::sort(cs.begin(), cs.end());
        const int g = sig_ids.emplace(std::move(cs), int(sig_ids.size())).first->second;
        for (std::int64_t x : members) sig[std::size_t(x)][6] = g;
      }
    }
    auto [next, next_count] = renumber([&](std::int64_t i) {
      const std::int64_t s = i / Q, q = i % Q;
      const int succ = colour[std::size_t(((s + 1) % p.pp) * Q + q)], pred = colour[std::size_t(((s + p.pp - 1) % p.pp) * Q + q)];
      const auto& g = sig[std::size_t(i)];
      return std::array<int, 10>{colour[std::size_t(i)], g[0], g[1], g[2], g[3], g[4], g[5], g[6], succ, pred};
    });
    colour = std::move(next);
    if (next_count == count) break;
    count = next_count;
  }
  return colour;
}

// Whether some GPU runs slower than the others throughout (a straggler's slowdown or loader delay;
// not a one-time stall).
bool slow_gpu(const StepConfig& cfg) {
  return std::any_of(cfg.faults.stragglers.begin(), cfg.faults.stragglers.end(),
                     [](const Straggler& st) { return st.compute_slowdown != 1.0 || st.loader_delay_s > 0; });
}

// Whether every data-parallel replica waits on the others every micro-batch: one replica, or
// expert groups spanning them all (replicas joined only by the gradient reduction at the end of
// the step keep their own paces until it).
bool replicas_coupled(const ParallelPlan& p) { return p.dp / std::max<std::int64_t>(1, p.ep) == 1; }

// Each GPU's faults as a key (slowdown, loader delay, then its stalls), GPUs indexed as in
// symmetry_classes; a healthy GPU's key is empty.
std::vector<std::vector<double>> faults_by_gpu(const StepConfig& cfg) {
  const ParallelPlan& p = cfg.parallel;
  const std::int64_t Q = p.tp * p.cp * p.dp;
  std::vector<std::vector<double>> out(std::size_t(p.pp * Q));
  const std::int64_t stp = group_stride(p, CommGroup::tp), scp = group_stride(p, CommGroup::cp);
  const std::int64_t sdp = group_stride(p, CommGroup::dp), spp = group_stride(p, CommGroup::pp);
  std::vector<std::vector<std::pair<double, double>>> stalls(out.size());
  for (const Straggler& st : cfg.faults.stragglers) {
    SCALEOUT_CHECK(st.rank >= 0 && st.rank < p.gpus(), "straggler rank outside the plan");
    const std::int64_t i = ((st.rank / spp) % p.pp) * Q + (st.rank / stp) % p.tp +
                           p.tp * ((st.rank / scp) % p.cp + p.cp * ((st.rank / sdp) % p.dp));
    std::vector<double>& f = out[std::size_t(i)];
    if (f.empty()) f = {1.0, 0.0};
    f[0] = std::max(f[0], st.compute_slowdown);
    f[1] = std::max(f[1], st.loader_delay_s);
    if (st.stall_s > 0) stalls[std::size_t(i)].push_back({double(st.stall_micro_batch), st.stall_s});
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::sort(stalls[i].begin(), stalls[i].end());
    for (const auto& [mb, len] : stalls[i]) {
      out[i].push_back(mb);
      out[i].push_back(len);
    }
  }
  return out;
}

// Folded with stragglers (or, on the flow network, link faults): one rank per symmetry class.
// Not where nothing tells a stage's GPUs apart even then: on the flow network without stragglers,
// no pipeline (so no transfers of their own) and one group of each kind in the stage (every GPU
// waits on the same collectives, whose flows run on the real links), as in pure data parallelism
// or FSDP: plain folding is exact there. On the flow network above 4,096 GPUs the classes are not
// worked out (nor on the analytic network above 2^20): the straggler stands for its stage, which
// gets the step time right but not the healthy GPUs' waits.
bool uses_symmetry_classes(const StepConfig& cfg) {
  const ParallelPlan& p = cfg.parallel;
  if (!cfg.fold) return false;
  if (!cfg.topology) return !cfg.faults.stragglers.empty() && p.gpus() <= (std::int64_t(1) << 20);
  const int kinds = int(p.tp > 1) + int(p.cp > 1) + int(p.dp > 1);
  const bool alike = cfg.faults.stragglers.empty() && p.pp == 1 && kinds <= 1 && (p.ep <= 1 || p.ep == p.dp) &&
                     hybrid_shard_group(p) == p.dp;  // HYBRID_SHARD: shard and replica groups
  return (!cfg.faults.stragglers.empty() || cfg.topology->has_faults()) && !alike && p.gpus() <= 4096;
}

std::vector<int> step_classes(const StepConfig& cfg, const std::vector<int>& finer = {}) {
  std::vector<std::vector<double>> keys = faults_by_gpu(cfg);
  for (std::size_t i = 0; i < finer.size(); ++i) keys[i].insert(keys[i].begin(), double(finer[i]));
  // The refinement is the costly part on large plans (16,384 GPUs: about 200M instructions), and
  // a scenario asks for the same classes twice (its work bound, then the step): the last ones are
  // kept, keyed by everything symmetry_classes reads.
  struct Memo {
    std::array<std::int64_t, 7> plan{};
    std::vector<std::vector<double>> keys;
    std::vector<int> classes;
  };
  thread_local Memo memo;
  const ParallelPlan& p = cfg.parallel;
  const std::array<std::int64_t, 7> plan{p.tp, p.cp, p.dp, p.pp, std::max<std::int64_t>(1, p.ep), hybrid_shard_group(p),
                                         std::int64_t(expert_dp_groups(p))};
  if (!memo.classes.empty() && memo.plan == plan && memo.keys == keys) return memo.classes;
  memo.classes = symmetry_classes(p, keys);
  memo.plan = plan;
  memo.keys = std::move(keys);
  return memo.classes;
}

// The collectives (and transfers) a step by classes puts on the flow network, each batch with the
// members of each of its collectives (global ranks).
using ClassBatches = std::vector<std::pair<std::shared_ptr<const CollectiveBatch>, std::vector<CollectiveSpec>>>;

// Forward passes before a stage's first backward in Megatron's 1F1B and interleaved 1F1B
// (megatron/core/pipeline_parallel/schedules.py), out of m * v.
std::int64_t warmup_passes(const ParallelPlan& p, std::int64_t stage, std::int64_t m) {
  const std::int64_t v = p.schedule == PipelineSchedule::interleaved ? p.virtual_stages : 1;
  return std::min(m * v, v == 1 ? p.pp - stage - 1 : (p.pp - stage - 1) * 2 + (v - 1) * p.pp);
}

// Whether pass i of n (warm of them warm-up forwards) opens a steady-state step of interleaved
// 1F1B, which runs a forward and a backward pass between two p2p calls.
bool opens_pair(std::int64_t v, std::int64_t warm, std::int64_t n, std::int64_t i) {
  return v > 1 && i >= warm && i < n - warm && (i - warm) % 2 == 0;
}

std::vector<Work> schedule_one(const ParallelPlan& p, std::int64_t stage, std::int64_t m);

// The stage's passes for a step of m micro-batches: one schedule, or pipeline_runs schedules one
// after another over consecutive shares of them (each filling and draining the pipeline).
std::vector<Work> schedule_for(const ParallelPlan& p, std::int64_t stage, std::int64_t m) {
  const std::int64_t runs = p.pp > 1 ? std::max<std::int64_t>(1, p.pipeline_runs) : 1;
  if (runs == 1 || m % runs != 0) return schedule_one(p, stage, m);
  const std::vector<Work> one = schedule_one(p, stage, m / runs);
  std::vector<Work> w;
  w.reserve(one.size() * std::size_t(runs));
  for (std::int64_t k = 0; k < runs; ++k)
    for (Work x : one) {
      x.mb += int(k * (m / runs));
      w.push_back(x);
    }
  return w;
}

std::vector<Work> schedule_one(const ParallelPlan& p, std::int64_t stage, std::int64_t m) {
  std::vector<Work> w;
  const std::int64_t v = p.schedule == PipelineSchedule::interleaved ? p.virtual_stages : 1;
  if (p.schedule == PipelineSchedule::gpipe || p.pp == 1) {
    for (int c = 0; c < int(v); ++c)
      for (int mb = 0; mb < int(m); ++mb) w.push_back({true, c, mb});
    for (int c = int(v) - 1; c >= 0; --c)
      for (int mb = 0; mb < int(m); ++mb) w.push_back({false, c, mb});
    if (p.pp == 1 && p.schedule != PipelineSchedule::gpipe) {
      // One stage: forward then backward per micro-batch (gradient accumulation).
      w.clear();
      for (int mb = 0; mb < int(m); ++mb) {
        for (int c = 0; c < int(v); ++c) w.push_back({true, c, mb});
        for (int c = int(v) - 1; c >= 0; --c) w.push_back({false, c, mb});
      }
    }
    return w;
  }
  if (p.schedule == PipelineSchedule::zero_bubble) {
    // ZB-H1 as its authors run it (sail-sg/zero-bubble-pipeline-parallelism, the DeepSpeed
    // schedule ZeroBubbleH1Pipeline): 1F1B's warm-up forwards, then `stage` forward/B pairs that
    // defer their W, then F, B, W (the oldest deferred W) until the forwards are done, B, W in
    // the cool-down, and the deferred W passes last. The first stage defers none.
    int f = 0, b = 0, wd = 0;
    auto F = [&] { w.push_back({true, 0, f++}); };
    auto B = [&] { w.push_back({false, 0, b++}); };
    auto W = [&] { w.push_back({false, 0, wd++, true}); };
    for (std::int64_t k = 0; k < p.pp - stage - 1 && f < m; ++k) F();
    for (std::int64_t k = 0; k < stage && f < m; ++k) {
      F();
      B();
    }
    while (f < m) {
      F();
      B();
      W();
    }
    while (b < m) {
      B();
      W();
    }
    while (wd < m) W();
    return w;
  }
  // Megatron's 1F1B and interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py).
  const std::int64_t total = m * v;
  const std::int64_t warm = warmup_passes(p, stage, m);
  std::vector<int> fcount(v, 0), bcount(v, 0);
  auto chunk_of = [&](std::int64_t k, bool fwd) {
    const std::int64_t in_group = k % (p.pp * v);
    const std::int64_t c = in_group / p.pp;
    return int(fwd ? c : v - 1 - c);
  };
  auto F = [&](std::int64_t k) {
    const int c = chunk_of(k, true);
    w.push_back({true, c, fcount[c]++});
  };
  auto B = [&](std::int64_t k) {
    const int c = chunk_of(k, false);
    w.push_back({false, c, bcount[c]++});
  };
  for (std::int64_t k = 0; k < warm; ++k) F(k);
  for (std::int64_t i = 0; i < total - warm; ++i) {
    F(warm + i);
    B(i);
  }
  for (std::int64_t i = total - warm; i < total; ++i) B(i);
  return w;
}

}  // namespace

namespace {

// One round of the step: with the classes on the flow network, a round that finds a class that
// does not hold sets tapes.split and the finer classes and returns at once (simulate_step_with
// runs the next round, this one's state gone).
StepResult simulate_step_round(const StepConfig& cfg, TapeCache& tapes) {
  const TrainingSpec& tr = cfg.training;
  const ParallelPlan& par = cfg.parallel;
  StepResult res;
  const std::int64_t v = par.schedule == PipelineSchedule::interleaved ? std::max<std::int64_t>(1, par.virtual_stages) : 1;
  const std::int64_t m = std::max<std::int64_t>(1, tr.global_batch / std::max<std::int64_t>(1, tr.micro_batch * par.dp));
  res.micro_batches = m;
  const std::int64_t L = cfg.model.layers;
  const std::int64_t chunks_total = par.pp * v;

  // Data-parallel sharding of state.
  const bool fsdp_shards = par.fsdp == FsdpMode::full_shard || par.fsdp == FsdpMode::shard_grad_op ||
                           par.fsdp == FsdpMode::hybrid_shard;
  const std::int64_t shard_group = hybrid_shard_group(par);
  // The GPUs that hold the same weights and sum their gradients: the data-parallel ranks and, in
  // each, the context-parallel ones (Megatron's data-parallel group with context parallelism;
  // torchtitan's FSDP mesh dp_shard_cp). State is sharded over all of them (HYBRID_SHARD: its
  // shard group, the node's data-parallel ranks and their CP ranks).
  const std::int64_t dp_cp = par.dp * par.cp;
  const std::int64_t shard_over = par.fsdp == FsdpMode::hybrid_shard ? shard_group * par.cp : dp_cp;
  ShardPlan shard;
  shard.persistent_grads = tr.precision.master_copy;
  if (par.zero >= 1 || fsdp_shards) shard.optimizer = double(shard_over);
  if (par.zero >= 2 || fsdp_shards) shard.grads = double(shard_over);
  if (par.zero >= 3 || par.fsdp == FsdpMode::full_shard || par.fsdp == FsdpMode::hybrid_shard ||
      par.fsdp == FsdpMode::shard_grad_op)
    shard.params = double(shard_over);
  const bool gather_params = shard.params > 1;
  // HYBRID_SHARD gathers and reduce-scatters inside its shard group (the node), then all-reduces
  // the shards across the replicas: the closed form times each over its own group.
  const bool hybrid_groups = par.fsdp == FsdpMode::hybrid_shard && par.dp > shard_group;
  auto shard_time = [&](CollectiveKind kind, double bytes, std::int64_t stage) {
    return hybrid_groups ? hybrid_collective_time(cfg, kind, false, bytes, stage)
                         : collective_time(cfg, kind, CommGroup::dp, bytes, stage);
  };
  const bool regather_in_backward = gather_params && par.fsdp != FsdpMode::shard_grad_op;
  if (par.offload_optimizer) shard.optimizer = 1e30;  // moments live in host memory
  const double gathered_shard_params = shard.params;
  if (par.offload_params && gather_params) shard.params = 1e30;  // shards live in host memory
  // Experts: their data-parallel group is the dp*cp / ep GPUs holding the same experts, over which
  // Megatron's DDP reduces their gradients and its distributed optimizer shards their state, and
  // ZeRO-3 / FSDP (torchtitan's dp_shard_mod_ep mesh) shard, gather and reduce-scatter them.
  // (HYBRID_SHARD keeps them with the dense layers in its node-local groups: left so.)
  const std::int64_t ep_size = std::max<std::int64_t>(1, par.ep), expert_dp = dp_cp / ep_size;
  const bool expert_groups = ep_size > 1 && par.fsdp != FsdpMode::hybrid_shard;
  auto expert_share = [&](double dense) { return expert_groups && dense < 1e29 ? std::max(1.0, dense / double(ep_size)) : dense; };
  shard.expert_params = expert_share(shard.params);
  shard.expert_grads = expert_share(shard.grads);
  shard.expert_optimizer = expert_share(shard.optimizer);

  const ComputeModel cm(cfg.gpu, cfg.profile);
  Simulator sim;
  StreamExecutor ex(sim);
  // Simulated ranks, each standing for GPU q (= tp_i + tp * (cp_i + cp * dp_i)) of its stage:
  // folded, one per stage (its GPUs behave alike); folded with stragglers on the analytic network,
  // one per symmetry class (symmetry_classes: exact for every GPU); unfolded, every GPU. Ranks are
  // in stage order and a stage's first rank stands for its GPU q = 0.
  const std::int64_t Q = par.tp * par.cp * par.dp;
  const bool by_class = uses_symmetry_classes(cfg);
  const bool plain_fold = cfg.fold && !by_class;
  SCALEOUT_CHECK(cfg.fold || par.pp * Q <= (std::int64_t(1) << 20), "unfolded simulation of more than 2^20 GPUs");
  std::vector<std::int64_t> rank_stage, rank_q, rank_gpus;  // rank_gpus: how many GPUs a rank stands for
  std::vector<int> class_of;
  if (by_class) {
    if (tapes.classes.empty()) tapes.classes = step_classes(cfg);
    class_of = tapes.classes;
    for (std::int64_t i = 0; i < par.pp * Q; ++i) {
      const int c = class_of[std::size_t(i)];
      if (c == int(rank_stage.size())) {
        rank_stage.push_back(i / Q);
        rank_q.push_back(i % Q);
        rank_gpus.push_back(0);
      }
      ++rank_gpus[std::size_t(c)];
    }
  } else {
    for (std::int64_t st = 0; st < par.pp; ++st)
      for (std::int64_t q = 0; q < (plain_fold ? 1 : Q); ++q) {
        rank_stage.push_back(st);
        rank_q.push_back(q);
        rank_gpus.push_back(plain_fold ? Q : 1);
      }
  }
  const int nranks = int(rank_stage.size());
  auto stage_of = [&](int r) { return rank_stage[std::size_t(r)]; };
  auto q_of = [&](int r) { return rank_q[std::size_t(r)]; };
  // The simulated rank that stands for GPU q of stage st.
  auto rep_of = [&](std::int64_t st, std::int64_t q) {
    return plain_fold ? int(st) : by_class ? class_of[std::size_t(st * Q + q)] : int(st * Q + q);
  };
  // A GPU's place in the plan: its index in each group, and the global rank that the placement
  // order gives it.
  const std::int64_t stride_tp = group_stride(par, CommGroup::tp), stride_cp = group_stride(par, CommGroup::cp);
  const std::int64_t stride_dp = group_stride(par, CommGroup::dp), stride_pp = group_stride(par, CommGroup::pp);
  struct Coords {
    std::int64_t tp, cp, dp, s;
  };
  // GPU q of stage st (q = tp_i + tp * (cp_i + cp * dp_i)), and a simulated rank's GPU.
  auto coords_at = [&](std::int64_t st, std::int64_t q) {
    return Coords{q % par.tp, (q / par.tp) % par.cp, q / (par.tp * par.cp), st};
  };
  auto coords_of = [&](int r) { return coords_at(stage_of(r), q_of(r)); };
  auto global_of = [&](const Coords& c) { return int(c.tp * stride_tp + c.cp * stride_cp + c.dp * stride_dp + c.s * stride_pp); };
  // The global GPU rank of a simulated rank (its representative's when folded).
  auto global_rank = [&](int r) { return global_of(coords_of(r)); };
  // The group a simulated rank belongs to, as one integer per group kind.
  // HYBRID_SHARD splits the data-parallel group in two: the shard group (consecutive data-parallel
  // ranks inside a node, which gather and reduce-scatter) and the replica group (the same shard
  // position in every node, which all-reduces the shards). With expert parallelism the experts'
  // gradients and state have a data-parallel group of their own: the GPUs holding the same
  // experts, the same position in every EP group (dp / ep of them). `dp_view` says which of them
  // CommGroup::dp means while a collective is built (0: the whole group, 1: shard group, 2:
  // replicas, 3: expert data-parallel group).
  int dp_view = 0;
  const std::int64_t sg = shard_group;  // at least 1
  const std::int64_t eg = std::max<std::int64_t>(1, par.ep);
  // The data-parallel group spans the context-parallel ranks too (they hold the same weights and
  // see other parts of the sequences: their gradients are summed), as do the experts' and
  // HYBRID_SHARD's shard group (a view's i-th member: context-parallel rank fastest); the
  // replica group is the same shard position (and CP rank) in every node.
  auto place_dp = [&](Coords& x, const Coords& c, std::int64_t i) {
    switch (dp_view) {
      case 1: x.cp = i % par.cp, x.dp = c.dp / sg * sg + i / par.cp; break;
      case 2: x.dp = c.dp % sg + i * sg; break;
      case 3: x.cp = i % par.cp, x.dp = i / par.cp * eg + c.dp % eg; break;
      default: x.cp = i % par.cp, x.dp = i / par.cp; break;
    }
  };
  // Barriers, occurrence counters and caches key a group kind by this slot (5, 6, 7: the views).
  auto slot_of = [&](CommGroup g) { return g == CommGroup::dp && dp_view > 0 ? 4 + dp_view : int(g); };
  auto group_id = [&](CommGroup g, int r) -> std::int64_t {
    const auto [tp_i, cp_i, dp_i, s] = coords_of(r);
    const std::int64_t q = q_of(r);
    switch (g) {
      case CommGroup::tp: return (s * par.cp + cp_i) * par.dp + dp_i;
      case CommGroup::cp: return (s * par.tp + tp_i) * par.dp + dp_i;
      case CommGroup::dp:
        if (dp_view == 1) return (s * par.tp + tp_i) * par.dp + dp_i / sg;
        if (dp_view == 2) return (s * par.tp * par.cp + tp_i * par.cp + cp_i) * par.dp + dp_i % sg;
        if (dp_view == 3) return (s * par.tp + tp_i) * par.dp + dp_i % eg;
        return s * par.tp + tp_i;
      case CommGroup::ep: return ((s * par.tp + tp_i) * par.cp + cp_i) * par.dp + dp_i / std::max<std::int64_t>(1, par.ep);
      case CommGroup::pp: return q;
    }
    return 0;
  };
  auto group_size = [&](CommGroup g) {
    if (g == CommGroup::dp) return dp_view == 1 ? sg * par.cp : dp_view == 2 ? par.dp / sg : dp_view == 3 ? par.cp * par.dp / eg : par.cp * par.dp;
    return g == CommGroup::tp ? par.tp : g == CommGroup::cp ? par.cp : g == CommGroup::ep ? par.ep : par.pp;
  };
  // Which collectives meet: unfolded, the members of one group; by class, the groups whose members
  // fall in the same classes (a rank's group holds GPUs that other simulated ranks stand for).
  std::map<std::pair<int, std::vector<int>>, std::int64_t> group_keys;
  // The simulated ranks standing for the members of the group of kind g around c, sorted.
  auto reps_in = [&](CommGroup g, const Coords& c) {
    std::vector<int> out;
    const std::int64_t ep = std::max<std::int64_t>(1, par.ep);
    for (std::int64_t i = 0; i < group_size(g); ++i) {
      Coords x = c;
      if (g == CommGroup::tp) x.tp = i;
      else if (g == CommGroup::cp) x.cp = i;
      else if (g == CommGroup::dp) place_dp(x, c, i);
      else if (g == CommGroup::ep) x.dp = c.dp / ep * ep + i;
      else x.s = i;
      out.push_back(rep_of(x.s, x.tp + par.tp * (x.cp + par.cp * x.dp)));
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  auto group_key = [&](CommGroup g, int r) -> std::int64_t {
    if (!by_class) return group_id(g, r);
    return group_keys.emplace(std::make_pair(slot_of(g), reps_in(g, coords_of(r))), std::int64_t(group_keys.size())).first->second;
  };
  // Stragglers: on their own simulated rank, or (folded) on their stage's representative, which
  // then stands for the slowest replica of the stage: every collective of the stage waits for it.
  std::vector<double> slowdown(nranks, 1.0), loader_delay(nranks, 0.0);
  std::vector<std::vector<std::pair<std::int64_t, double>>> stalls(nranks);
  for (const Straggler& st : cfg.faults.stragglers) {
    SCALEOUT_CHECK(st.rank >= 0 && st.rank < par.gpus(), "straggler rank outside the plan");
    const Coords c{(st.rank / stride_tp) % par.tp, (st.rank / stride_cp) % par.cp, (st.rank / stride_dp) % par.dp,
                   (st.rank / stride_pp) % par.pp};
    const std::int64_t q = c.tp + par.tp * (c.cp + par.cp * c.dp);
    const int r = rep_of(c.s, q);
    // By class, the GPUs of a class carry the same faults (they are part of its colour): the
    // representative's own stand for all of them (its class-mates' stalls are the same stalls).
    if (by_class && (c.s != stage_of(r) || q != q_of(r))) continue;
    slowdown[r] = std::max(slowdown[r], st.compute_slowdown);
    loader_delay[r] = std::max(loader_delay[r], st.loader_delay_s);
    if (st.stall_s > 0) stalls[r].push_back({st.stall_micro_batch, st.stall_s});
  }
  // Folded onto a stage (its slowest replica): the same stall on several of its GPUs is one stall.
  if (plain_fold)
    for (auto& list : stalls) {
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
    }

  std::vector<RankState> ranks(nranks);
  // What each compute task waited for, for the attribution of idle gaps (read for compute tasks
  // only: listed for them only).
  TaskLists<TaskId> deps_of;
  // Each task's simulated rank, track and what its time counts as (0 nothing, else a CommGroup +
  // 1; the pipeline's sends: pp): 8 bytes. Its kernel (null for transfers and bookkeeping) only
  // names it in the trace: kept only there.
  struct TaskInfo {
    int rank = 0;
    std::uint8_t track = 0;
    std::uint8_t comm = 0;
  };
  ChunkedVector<TaskInfo> info;
  std::vector<const Kernel*> kernel_of;  // by task, kept for the trace only (its kernels' names)
  std::vector<std::array<TaskId, 5>> last_on(nranks);  // last task + 1 on each of a rank's streams (0: none)

  // Runs of kernels folded into one task (not when a trace is kept): a rank's compute stream runs
  // its kernels back to back, each no earlier than its launch, so a run of them that nothing
  // else waits on inside is one task that starts with the first and ends, by the max-plus
  // recurrence f = max(f', launch) + d, exactly when the last would. `busy`: the run's kernel
  // time so far; `floor`: when its last kernel would end if the GPU only ever waited for
  // launches. Memory changes inside a run are dated from its start (run_ops). Any other task on
  // the stream, or a task that waits for the run's current end, seals it.
  struct Run {
    TaskId task = 0;
    Time busy, floor;
    bool open = false;
    bool grown = false;  // kernels were added after the first: its duration and floor are set when it is sealed
    // The slowest member of the group in lock-step, kept beside the run from an instant the group
    // shares (`paced`, below): its busy time and floor had it run the same kernels.
    bool lead_on = false;
    double lead_slowdown = 1.0;
    Time lead_busy, lead_floor;
  };
  std::vector<Run> runs(nranks);
  RunChanges run_ops;
  // A run's changes at one instant (the same busy and floor) are gathered before they are listed:
  // frees and then allocations at one instant take the level down and then up, so no level in
  // between is above both ends, and summed per category (the falling sums first) they give the
  // same peak, holding the same bytes of each category. A free after an allocation at the same
  // instant starts a new group. (Half of a pipelined step's changes share an instant: 4.3M -> 2.2M
  // listed for a 32-rank step.)
  InstantGroup group;
  auto flush_group = [&] {
    if (!group.open) return;
    const Time release = ex.release(group.task);
    for (int rising = 0; rising < 2; ++rising)
      for (unsigned bits = group.touched; bits != 0; bits &= bits - 1) {
        const auto c = static_cast<std::size_t>(std::countr_zero(bits));
        if (group.net[c] != 0 && (group.net[c] > 0) == (rising == 1))
          run_ops.push(group.task, release, group.busy, group.floor, group.net[c], static_cast<MemCategory>(c));
      }
    for (unsigned bits = group.touched; bits != 0; bits &= bits - 1) group.net[std::size_t(std::countr_zero(bits))] = 0;
    group.touched = 0;
    group.open = false;
    group.allocated = false;
  };
  auto run_op = [&](TaskId g, Time busy, Time floor, const MemOp& mo, bool alloc) {
    if (!cfg.track_memory) return;
    if (!group.open || group.task != g || group.busy != busy || group.floor != floor || (!alloc && group.allocated)) {
      flush_group();
      group.open = true;
      group.task = g;
      group.busy = busy;
      group.floor = floor;
    }
    const auto c = static_cast<std::size_t>(mo.category);
    group.net[c] += alloc ? mo.bytes : -mo.bytes;
    group.touched |= 1u << c;
    group.allocated = group.allocated || alloc;
  };
  bool merging = false;            // set inside the passes of a step without a trace
  bool seal_after_kernel = false;  // the next kernel ends its run
  auto seal = [&](int rank) {
    Run& run = runs[std::size_t(rank)];
    if (run.open && run.grown) {
      ex.set_duration(run.task, run.busy);
      ex.set_finish_floor(run.task, run.floor);
    }
    run.open = run.grown = false;
  };

  StreamExecutor::Launcher launch_next;  // set just before add_task: the task is started by it
  // `release`: not before (the kernel's launch by the host thread).
  // By classes, which of a rank's groups are in lock-step (bit: slot): the group's last collective
  // was a barrier of its members (on the flow network too: one batch ends their tasks at once),
  // and since then each of them has run the same items with nothing else to wait for. The members
  // of such a group (the same stage, the same items and host clock) that are equally fast reach its
  // next collective at the same instant: it waits for nobody and joins their runs (`lockstep`,
  // below; on the flow network, where its batch has its links to itself). A compute task with
  // dependencies, a pass's start (its receives are added later) or another group's collective ends it.
  std::vector<unsigned> aligned(nranks, 0u);
  std::vector<TaskId> sync_end(nranks, 0);  // by rank: its last collective that waited for its group, + 1
  auto add_task_span = [&](int rank, int track, Time dur, std::span<const TaskId> deps, const Kernel* k,
                           Time release = Time::zero()) {
    if (track == kCompute && !deps.empty()) aligned[std::size_t(rank)] = 0;
    const TaskId id = launch_next ? ex.add_launched(ranks[rank].streams[track], std::move(launch_next), deps)
                                  : ex.add(ranks[rank].streams[track], dur, deps);
    if (release > Time::zero()) ex.set_release(id, release);
    launch_next = nullptr;
    info.grow_to(id + 1, TaskInfo{});
    if (track == kCompute) deps_of.push(id, deps);
    info[id] = {rank, std::uint8_t(track), 0};
    if (cfg.keep_trace) {
      kernel_of.resize(id + 1, nullptr);
      kernel_of[id] = k;
    }
    last_on[rank][track] = id + 1;
    if (track == kCompute) seal(rank);
    return id;
  };
  auto add_task = [&](int rank, int track, Time dur, std::span<const TaskId> deps, const Kernel* k,
                      Time release = Time::zero()) { return add_task_span(rank, track, dur, deps, k, release); };
  auto one = [](TaskId t) { return std::array<TaskId, 1>{t}; };  // a single dependency, without a vector
  // Each rank's host thread launches kernels one after another and waits for nothing (no
  // synchronisation is modelled on it), so when it launches each one is known as the graph is
  // built: a running clock per rank, and the kernels carry it as their release time.
  std::vector<Time> host_clock(nranks, Time::zero());
  std::vector<TraceSpan> host_spans;  // the host thread's work, for the trace
  auto host_work = [&](int rank, Time d, const char* name) {
    if (cfg.keep_trace) host_spans.push_back({name, rank, kHost, host_clock[rank], host_clock[rank] + d});
    host_clock[rank] += d;
    return host_clock[rank];
  };

  // Flows on the cluster graph. A simulated rank's group, as global ranks; folded, the other
  // groups of the same kind and stage that share a node with it, or the fabric, run alongside.
  std::unique_ptr<FlowNetwork> net;
  if (cfg.topology) {
    SCALEOUT_CHECK(cfg.topology->gpu_count() >= par.gpus(), "the cluster graph has fewer GPUs than the plan");
    net = std::make_unique<FlowNetwork>(sim, *cfg.topology);
    net->set_apart(cfg.collectives_apart);
  }
  auto members_of = [&](CommGroup g, Coords c) {
    std::vector<int> out;
    const std::int64_t ep = std::max<std::int64_t>(1, par.ep);
    const std::int64_t n = group_size(g);
    for (std::int64_t i = 0; i < n; ++i) {
      Coords x = c;
      if (g == CommGroup::tp) x.tp = i;
      else if (g == CommGroup::cp) x.cp = i;
      else if (g == CommGroup::dp) place_dp(x, c, i);
      else if (g == CommGroup::ep) x.dp = c.dp / ep * ep + i;
      out.push_back(global_of(x));
    }
    return out;
  };
  auto node_set = [&](const std::vector<int>& ranks_) {
    std::set<int> n;
    for (int x : ranks_) n.insert(cfg.topology->node_of(x));
    return n;
  };
  auto shares_links = [&](const std::set<int>& a, const std::set<int>& b) {
    if (a.size() > 1 && b.size() > 1) return true;  // both cross the fabric
    for (int x : b)
      if (a.count(x)) return true;
    return false;
  };
  std::map<std::pair<int, std::int64_t>, std::vector<std::vector<int>>> shadow_cache;  // (group kind, stage)
  auto shadows_of = [&](CommGroup g, const Coords& c, const std::vector<int>& rep_members) -> const std::vector<std::vector<int>>& {
    auto key = std::make_pair(slot_of(g), c.s);
    auto it = shadow_cache.find(key);
    if (it != shadow_cache.end()) return it->second;
    std::vector<std::vector<int>> out;
    const std::set<int> mine = node_set(rep_members);
    std::set<std::vector<int>> seen{rep_members};
    for (std::int64_t dp_i = 0; dp_i < par.dp; ++dp_i)
      for (std::int64_t cp_i = 0; cp_i < par.cp; ++cp_i)
        for (std::int64_t tp_i = 0; tp_i < par.tp; ++tp_i) {
          std::vector<int> sorted = members_of(g, Coords{tp_i, cp_i, dp_i, c.s});
          std::sort(sorted.begin(), sorted.end());
          if (!seen.insert(sorted).second) continue;
          if (shares_links(mine, node_set(sorted))) out.push_back(members_of(g, Coords{tp_i, cp_i, dp_i, c.s}));
        }
    return shadow_cache.emplace(key, std::move(out)).first->second;
  };
  auto spec_of = [&](CollectiveKind kind, std::vector<int> members, double bytes) {
    CollectiveSpec sp;
    sp.kind = kind;
    sp.ranks = std::move(members);
    sp.bytes = bytes;
    sp.tag = sp.ranks.empty() ? 0 : sp.ranks.front();
    return sp;
  };
  // The collectives a group's collective runs with on the flow network, by classes: every group of
  // the stage whose members fall in the same classes (`key`, sorted) starts with it (its GPUs
  // behave alike) and their flows run beside it; each group once, at its first member along its
  // own dimension. Unfolded: the group's alone.
  auto group_specs = [&](CommGroup g, const Coords& c, CollectiveKind kind, double bytes, const std::vector<int>& key) {
    std::vector<CollectiveSpec> specs{spec_of(kind, members_of(g, c), bytes)};
    if (!by_class) return specs;
    const std::int64_t ep = std::max<std::int64_t>(1, par.ep);
    for (std::int64_t q = 0; q < Q; ++q) {
      const Coords x = coords_at(c.s, q);
      const bool first = g == CommGroup::tp   ? x.tp == 0
                         : g == CommGroup::cp ? x.cp == 0
                         : g == CommGroup::ep ? x.dp % ep == 0
                         : dp_view == 1       ? x.dp % sg == 0 && x.cp == 0
                         : dp_view == 2       ? x.dp < sg
                         : dp_view == 3       ? x.dp < eg && x.cp == 0
                                              : x.dp == 0 && x.cp == 0;
      if (!first || reps_in(g, x) != key) continue;
      std::vector<int> mem = members_of(g, x);
      if (mem != specs.front().ranks) specs.push_back(spec_of(kind, std::move(mem), bytes));
    }
    return specs;
  };
  // On the flow network a collective that joins a run assumes its batch has its links to itself
  // while it runs: it takes the batch's time alone. Each one leaves a claim (its links, when it
  // starts in its run, how long it takes); once the step has run, the claims are checked against
  // the traffic that crossed those links (FlowNetwork::watch) and against each other's, and a group
  // whose claim met other traffic stops joining from that claim's pass on, in a new round
  // (tapes.join_until). The step a round accepts is the one simulating every collective as flows
  // gives: each joined batch ran on links nothing else used, as it would have alone.
  const bool flow_joins = net && net->apart() && !tapes.flow_joins_off && !cfg.keep_trace;
  auto prepare = [&](const std::vector<CollectiveSpec>& specs) { return prepare_collectives(*net, specs); };
  struct Claim {
    const Kernel* kernel;
    TaskId task;
    std::uint32_t who;  // its group's owner
    std::int32_t pass;  // its rank's pass, in order
    Time offset, floor, dt;  // it starts at max(the task's start + offset, floor)
  };
  std::vector<Claim> claims;
  claims.reserve(tapes.claims_made);  // (millions in a long flow step: growing copied them over and over)
  std::vector<std::int32_t> pass_no(nranks, 0);
  // Whether a simulated rank stands for every member of its group of kind g (every group, folded;
  // by classes, a group all of its own class): its collectives wait for nothing but itself.
  std::vector<std::array<std::int8_t, 8>> alone_in(nranks, std::array<std::int8_t, 8>{-1, -1, -1, -1, -1, -1, -1, -1});
  auto alone = [&](int rank, CommGroup g) {
    std::int8_t& a = alone_in[std::size_t(rank)][std::size_t(slot_of(g))];
    if (a < 0) {
      if (group_size(g) <= 1 || plain_fold) a = 1;
      else if (!by_class) a = 0;
      else {
        const std::vector<int> reps = reps_in(g, coords_of(rank));
        a = std::all_of(reps.begin(), reps.end(), [rank](int x) { return x == rank; }) ? 1 : 0;
      }
    }
    return a == 1;
  };
  // A group's owner: its kind and the simulated ranks standing for its members (a rank alone for
  // a group of one class; its sibling groups, the same classes, share it). A group's collectives
  // follow one another, whoever launches them. Its joined batches, its claims and the pass from
  // which it no longer joins (tapes.join_until, by the same key) go by it.
  struct Owner {
    std::pair<int, std::vector<int>> key;          // (slot, representatives)
    std::int64_t until;                             // no joins from this pass on
    std::vector<const CollectiveBatch*> claimed;  // the batches its claims stand for
  };
  std::vector<Owner> owners;
  std::map<std::pair<int, std::vector<int>>, std::uint32_t> owner_ids;
  std::vector<std::array<std::int32_t, 8>> owner_in(nranks, std::array<std::int32_t, 8>{-1, -1, -1, -1, -1, -1, -1, -1});
  auto owner_of = [&](int rank, CommGroup g) -> std::uint32_t {
    std::int32_t& o = owner_in[std::size_t(rank)][std::size_t(slot_of(g))];
    if (o < 0) {
      std::pair<int, std::vector<int>> key{slot_of(g), reps_in(g, coords_of(rank))};
      const auto [it, fresh] = owner_ids.try_emplace(key, std::uint32_t(owners.size()));
      if (fresh) {
        const auto bar = tapes.join_until.find(key);
        owners.push_back({std::move(key), bar == tapes.join_until.end() ? std::numeric_limits<std::int64_t>::max() : bar->second, {}});
      }
      o = std::int32_t(it->second);
    }
    return std::uint32_t(o);
  };
  ClassBatches class_batches;  // by class on the flow network: whose members a skew names
  // Flow-mode launchers: folded, one group's collective plus its shadows; unfolded, the group's
  // collective once every member's task has started.
  // The group's collective first, then its shadows: one batch.
  auto launch_folded = [&](std::shared_ptr<const CollectiveBatch> f) -> StreamExecutor::Launcher {
    return [&, f = std::move(f)](TaskId id) { run_collectives(*net, f, [&ex, id] { ex.finish(id); }); };
  };
  // A rank launches the same collective (group, kind, size) over and over: its specs and its
  // shadows' are made once.
  std::map<std::tuple<int, int, int, double>, std::shared_ptr<const CollectiveBatch>> folded_specs;
  auto folded_batch = [&](int rank, CommGroup g, CollectiveKind kind, double bytes) -> const std::shared_ptr<const CollectiveBatch>& {
    auto& f = folded_specs[{rank, slot_of(g), int(kind), bytes}];
    if (!f) {
      const Coords c = coords_of(rank);
      std::vector<int> mem = members_of(g, c);
      std::vector<CollectiveSpec> batch{spec_of(kind, mem, bytes)};
      for (const auto& sh : shadows_of(g, c, mem)) batch.push_back(spec_of(kind, sh, bytes));
      f = prepare(batch);
    }
    return f;
  };

  // Unfolded, a collective starts when every member of its group has reached it: a zero-length
  // barrier task per occurrence (the k-th collective of a group on each member) waits for the
  // members' arrivals, and each member's collective waits for the barrier.
  constexpr int kBarrier = 5;
  // Arrivals and what each waited for live in two pools (a barrier threads its arrivals through
  // one): a vector per barrier and per arrival cost three heap blocks a collective.
  constexpr std::uint32_t kNoArrival = 0xffffffffu;
  struct Arrival {
    int rank;
    std::uint32_t next = kNoArrival;       // the barrier's next arrival
    std::uint32_t after_begin, after_end;  // what it waited for: after_pool[after_begin, after_end)
    Time release;                          // its host's launch
    Time at;                               // when it was ready (after the step)
  };
  // On the flow network: the collective the members' launched tasks start together, once all
  // `expected` have started (waiting_pool[first, first + count): the ones so far). The batch lives
  // in its group's map (GroupBarriers::batches, whose nodes never move). 24 bytes and a slot per
  // member, not a vector each: a long flow step has hundreds of thousands.
  struct BarrierFlow {
    const std::shared_ptr<const CollectiveBatch>* batch = nullptr;
    std::uint32_t first = 0, count = 0, expected = 0;
  };
  ChunkedVector<TaskId> waiting_pool;
  // What a barrier's launcher needs besides its barrier. The launcher captures two pointers (the
  // barrier and flow_run), which std::function keeps in place (up to 16 trivially copied bytes).
  struct FlowRun {
    FlowNetwork* net;
    StreamExecutor* ex;
    ChunkedVector<TaskId>* waiting;
  };
  FlowRun flow_run{net.get(), &ex, &waiting_pool};
  struct Barrier {
    TaskId task = 0;
    std::uint32_t first = kNoArrival, last = kNoArrival;  // its arrivals, in order
    BarrierFlow* flow = nullptr;
  };
  ChunkedVector<Barrier> barrier_list;
  ChunkedVector<Arrival> arrival_pool;
  ChunkedVector<TaskId> after_pool;
  std::deque<BarrierFlow> barrier_flows;  // never moves: launchers point into it
  auto arrivals_of = [&](const Barrier& bar, auto&& f) {
    for (std::uint32_t a = bar.first; a != kNoArrival; a = arrival_pool[a].next) f(arrival_pool[a]);
  };
  ChunkedVector<std::uint32_t> barrier_of_task;  // barrier task -> its index + 1
  struct GroupBarriers {
    StreamId stream = 0;
    std::vector<std::uint32_t> by_occurrence;  // indices into barrier_list
    std::map<std::pair<int, double>, std::shared_ptr<const CollectiveBatch>> batches;  // (kind, bytes)
    // On the flow network: how many arrivals start one of its collectives, and (by classes) the
    // representatives of its members, sorted: the group's, worked out at its first collective.
    std::size_t expected = 0;
    std::vector<int> reps;
  };
  std::map<std::pair<int, std::int64_t>, GroupBarriers> group_barriers;  // (slot, group)
  std::vector<std::array<GroupBarriers*, 8>> rank_groups(nranks, std::array<GroupBarriers*, 8>{});
  std::vector<std::array<std::int64_t, 8>> occurrences(nranks, std::array<std::int64_t, 8>{});
  // Whether every GPU the rank's TP, CP and EP groups reach (and theirs, and so on, within its
  // stage) is as fast as it (the same slowdown, data loader and stalls; by classes, analytic
  // network). Such GPUs run the same kernels at the same speed, so between dependencies their
  // clocks differ only as their collectives made them: a barrier of a group sets its members to
  // the latest of them, which keeps them equal along every dimension they were equal along
  // before (the latest along a line of a grid is a function of the other coordinates), and a
  // collective that joins keeps every clock as far from the others as it was. So the group
  // kinds the rank is in lock-step in (`aligned`) add up, barrier by barrier, until a dependency.
  // Where lock-steps stand beside other collectives or add up (below): the analytic network, by
  // classes, where a collective takes the same time in every group of its kind. On the flow
  // network two groups' launched collectives of one kind can take different times (one meets
  // other traffic), so a barrier there sets only its own kind.
  const bool grid = !net && by_class;
  // Where lock-steps can be paced (`paced`, below): there too, and on the flow network where
  // collectives join runs (a paced collective joins: its batch has its links to itself, the
  // claims' check says so after the step) and some GPU is slower than another.
  const bool pacing = grid || (by_class && flow_joins && std::any_of(slowdown.begin(), slowdown.end(), [&](double x) {
                                 return x != slowdown.front();
                               }));
  std::vector<std::int8_t> even_in(nranks, -1);
  auto even = [&](int rank) {
    std::int8_t& e = even_in[std::size_t(rank)];
    if (e < 0) {
      e = grid ? 1 : 0;
      std::vector<char> seen(std::size_t(nranks), 0);
      std::vector<int> todo{rank};
      seen[std::size_t(rank)] = 1;
      while (e == 1 && !todo.empty()) {
        const int y = todo.back();
        todo.pop_back();
        if (slowdown[std::size_t(y)] != slowdown[std::size_t(rank)] || loader_delay[std::size_t(y)] != loader_delay[std::size_t(rank)] ||
            stalls[std::size_t(y)] != stalls[std::size_t(rank)]) {
          e = 0;
          break;
        }
        for (CommGroup g : {CommGroup::tp, CommGroup::cp, CommGroup::ep}) {
          if (group_size(g) <= 1) continue;
          for (int x : reps_in(g, coords_of(y)))
            if (!seen[std::size_t(x)]) {
              seen[std::size_t(x)] = 1;
              todo.push_back(x);
            }
        }
      }
    }
    return e == 1;
  };
  auto in_grid = [](CommGroup g) { return g == CommGroup::tp || g == CommGroup::cp || g == CommGroup::ep; };
  auto sync_task = [&](int rank, int track, Time dur, std::span<const TaskId> deps, const Kernel* k, CommGroup g,
                       CollectiveKind kind, double bytes, Time release = Time::zero()) {
    const std::uint8_t label = std::uint8_t(int(g) + 1);
    // A collective overlapped with its GEMM (tp_comm_overlap) waits for its group and lasts what
    // the GEMM leaves exposed, on either network: no flows.
    const bool on_net = net && !(k && k->overlaps != 0);
    if (group_size(g) <= 1) return add_task(rank, track, dur, deps, k, release);
    if (plain_fold) {
      if (on_net) launch_next = launch_folded(folded_batch(rank, g, kind, bytes));
      const TaskId id = add_task(rank, track, dur, deps, k, release);
      info[id].comm = label;
      return id;
    }
    const int slot = slot_of(g);
    GroupBarriers*& gb = rank_groups[std::size_t(rank)][std::size_t(slot)];
    if (!gb) {
      auto [pos, fresh] = group_barriers.try_emplace({slot, group_key(g, rank)});
      if (fresh) pos->second.stream = ex.add_stream();
      gb = &pos->second;
    }
    // Every member reaches its k-th collective of the group after its (k-1)-th: barriers come in order.
    const auto occurrence = std::size_t(occurrences[rank][slot]++);
    if (occurrence == gb->by_occurrence.size()) {
      const TaskId t = ex.add(gb->stream, Time::zero(), {});
      info.grow_to(t + 1, TaskInfo{});
      info[t] = {rank, std::uint8_t(kBarrier), 0};
      barrier_list.emplace_back();
      barrier_list.back().task = t;
      gb->by_occurrence.push_back(std::uint32_t(barrier_list.size() - 1));
      barrier_of_task.grow_to(std::size_t(t) + 1, 0);
      barrier_of_task[t] = std::uint32_t(barrier_list.size());
    }
    Barrier& bar = barrier_list[gb->by_occurrence[occurrence]];
    const TaskId b = bar.task;
    const auto after_begin = static_cast<std::uint32_t>(after_pool.size());
    for (const TaskId d : deps) after_pool.push_back(d);
    if (last_on[rank][track] > 0) after_pool.push_back(last_on[rank][track] - 1);
    for (std::size_t i = after_begin; i < after_pool.size(); ++i) ex.add_dependency(b, after_pool[i]);
    if (release > ex.release(b)) ex.set_release(b, release);
    const auto arrival = static_cast<std::uint32_t>(arrival_pool.size());
    arrival_pool.push_back({rank, kNoArrival, after_begin, static_cast<std::uint32_t>(after_pool.size()), release, Time::zero()});
    if (bar.last == kNoArrival) bar.first = arrival;
    else arrival_pool[bar.last].next = arrival;
    bar.last = arrival;
    if (on_net) {
      if (!bar.flow) bar.flow = &barrier_flows.emplace_back();
      BarrierFlow& fl = *bar.flow;
      if (fl.expected == 0) {
        const Coords c = coords_of(rank);
        if (gb->expected == 0) {
          if (by_class) {
            gb->reps = reps_in(g, c);
            for (std::size_t i = 0; i < gb->reps.size(); ++i) gb->expected += i == 0 || gb->reps[i] != gb->reps[i - 1];
          } else {
            gb->expected = std::size_t(group_size(g));
          }
        }
        fl.expected = std::uint32_t(gb->expected);
        SCALEOUT_CHECK(waiting_pool.size() + fl.expected < 0xffffffffu, "flow barriers' pool past 2^32 slots");
        fl.first = std::uint32_t(waiting_pool.size());
        waiting_pool.grow_to(waiting_pool.size() + fl.expected, 0);
        const std::vector<int>& key = gb->reps;
        auto& batch = gb->batches[{int(kind), bytes}];
        if (!batch) {
          const std::vector<CollectiveSpec> specs = group_specs(g, c, kind, bytes, key);
          batch = prepare(specs);
          if (by_class) class_batches.emplace_back(batch, specs);
        }
        fl.batch = &batch;
      }
      // Two pointers captured: the launcher is stored in place, not on the heap.
      launch_next = [w = &fl, c = &flow_run](TaskId id) {
        SCALEOUT_CHECK(w->count < w->expected, "more members reached a flow barrier than its group has");
        (*c->waiting)[w->first + w->count++] = id;
        if (w->count == w->expected)
          run_collectives(*c->net, *w->batch, [w, c] {
            for (std::uint32_t i = 0; i < w->count; ++i) c->ex->finish((*c->waiting)[w->first + i]);
          });
      };
    }
    const unsigned was = aligned[std::size_t(rank)];
    const TaskId id = add_task(rank, track, dur, one(b), k, release);
    if (track == kCompute) {
      aligned[std::size_t(rank)] = (pacing && deps.empty() && in_grid(g) && even(rank) ? was : 0u) | 1u << slot;
      sync_end[std::size_t(rank)] = id + 1;
    }
    info[id].comm = label;
    return id;
  };

  // On the analytic network a collective whose whole group this simulated rank stands for (every
  // group, folded; by classes, a group all of one class) waits for nothing but its own rank: it is
  // a kernel of known length on the compute stream, and a run of kernels can take it in like any
  // other (a barrier of one, and a task of its own, were two tasks a collective for nothing).
  // On the flow network the same holds where the collective's flows have their links to themselves
  // (joined_batch, below): alone, a batch takes a fixed time, and leaves its links as it found them.
  // A pass that reduces gradients (a chunk's last backward; every pass under ZeRO-3 and FSDP)
  // sends the data-parallel ring through the NVLink ports of a GPU whose DP peers share its node,
  // where its TP, CP and EP batches run: from that pass on they launch without a round to find
  // it (the claims' check stays the judge of the rest). Alike for every member of a group.
  std::vector<std::int32_t> reduce_from(nranks, std::numeric_limits<std::int32_t>::max());
  std::vector<std::int8_t> dp_in_node(nranks, -1);
  auto dp_shares_node = [&](int rank) {
    std::int8_t& d = dp_in_node[std::size_t(rank)];
    if (d < 0) {
      const int me = global_rank(rank);
      const std::vector<int> peers = members_of(CommGroup::dp, coords_of(rank));
      d = std::any_of(peers.begin(), peers.end(),
                      [&](int x) { return x != me && cfg.topology->node_of(x) == cfg.topology->node_of(me); })
              ? 1
              : 0;
    }
    return d == 1;
  };
  auto barred = [&](int rank, CommGroup g) {
    if (!net) return false;
    if (g != CommGroup::dp && g != CommGroup::pp && pass_no[std::size_t(rank)] >= reduce_from[std::size_t(rank)]) return true;
    return !tapes.join_until.empty() && pass_no[std::size_t(rank)] >= owners[owner_of(rank, g)].until;
  };
  auto joins_run = [&](int rank, CommGroup g) { return !(net && !flow_joins) && merging && alone(rank, g) && !barred(rank, g); };
  // On the flow network: the batch a joining collective would launch (its group's, with the sibling
  // groups that run beside it), and how long it takes alone. `ok`: it ends all at once, leaving
  // its links free; otherwise the collective is launched on the network as before.
  struct JoinedBatch {
    std::shared_ptr<const CollectiveBatch> batch;
    Time dt;
    bool ok = false;
  };
  std::map<std::tuple<std::uint32_t, int, double>, JoinedBatch> joined_batches;  // (owner, kind, bytes)
  // A rank meets the same collective kernels (the tapes', or items kept for the round) pass after
  // pass: each one's batch and owner are looked up once, by the rank and the kernel's address.
  struct KernelBatch {
    const JoinedBatch* batch = nullptr;
    std::uint32_t owner = 0;
    bool claimed = false;  // its batch is among its owner's claimed ones
  };
  std::unordered_map<std::uint64_t, KernelBatch> kernel_batches;
  auto kernel_batch = [&](int rank, const Kernel& k) -> KernelBatch& {
    const std::uint64_t key = std::uint64_t(std::uint32_t(rank)) << 48 | std::uint64_t(reinterpret_cast<std::uintptr_t>(&k));
    auto [at, added] = kernel_batches.try_emplace(key);
    if (added) {
      const std::uint32_t owner = owner_of(rank, k.group);
      auto [pos, fresh] = joined_batches.try_emplace({owner, int(k.coll), k.bytes});
      if (fresh) {
        const Coords c = coords_of(rank);
        JoinedBatch& j = pos->second;
        // Folded, the batch a launched collective of the group would run (the same one).
        j.batch = plain_fold ? folded_batch(rank, k.group, k.coll, k.bytes)
                             : prepare(group_specs(k.group, c, k.coll, k.bytes, reps_in(k.group, c)));
        const AloneTiming t = batch_alone(*net, *j.batch);
        j.dt = t.first_end;
        j.ok = t.ends_together;
      }
      at->second.batch = &pos->second;
      at->second.owner = owner;
    }
    return at->second;
  };
  auto joined_batch = [&](int rank, const Kernel& k) -> const JoinedBatch& { return *kernel_batch(rank, k).batch; };
  // Whether the simulated ranks standing for a group's members are alike: the same slowdown, data
  // loader and stalls (by classes, a group of several classes).
  std::vector<std::array<std::int8_t, 8>> uniform_in(nranks, std::array<std::int8_t, 8>{-1, -1, -1, -1, -1, -1, -1, -1});
  auto uniform = [&](int rank, CommGroup g) {
    std::int8_t& u = uniform_in[std::size_t(rank)][std::size_t(slot_of(g))];
    if (u < 0) {
      const std::vector<int> reps = reps_in(g, coords_of(rank));
      u = std::all_of(reps.begin(), reps.end(), [&](int x) {
            return slowdown[std::size_t(x)] == slowdown[std::size_t(rank)] &&
                   loader_delay[std::size_t(x)] == loader_delay[std::size_t(rank)] && stalls[std::size_t(x)] == stalls[std::size_t(rank)];
          })
              ? 1
              : 0;
    }
    return u == 1;
  };
  // A group whose members are alike but for their speed (the same data loader and stalls; the
  // analytic network): its slowest member, the one a lock-step of the group waits for (`paced`).
  struct Lead {
    double slowdown = 0;  // 0: the members differ otherwise, or are equally fast
    int rank = 0;
    bool known = false;
  };
  std::vector<std::array<Lead, 8>> lead_in(nranks);
  auto lead_of = [&](int rank, CommGroup g) -> const Lead& {
    Lead& l = lead_in[std::size_t(rank)][std::size_t(slot_of(g))];
    if (!l.known) {
      l.known = true;
      const std::vector<int> reps = reps_in(g, coords_of(rank));
      const bool alike = std::all_of(reps.begin(), reps.end(), [&](int x) {
        return loader_delay[std::size_t(x)] == loader_delay[std::size_t(rank)] && stalls[std::size_t(x)] == stalls[std::size_t(rank)];
      });
      if (alike && pacing && !uniform(rank, g)) {
        l.rank = reps.front();
        for (int x : reps)  // (of equally slow ones the last, as a barrier names the last to arrive)
          if (slowdown[std::size_t(x)] >= slowdown[std::size_t(l.rank)]) l.rank = x;
        l.slowdown = slowdown[std::size_t(l.rank)];
      }
    }
    return l;
  };
  // On the flow network, as a collective of a group of one class: where its batch has its links
  // to itself (the group's owner's).
  auto locksteps = [&] { return merging && by_class && (!net || flow_joins); };
  auto lockstep = [&](int rank, CommGroup g) {
    return locksteps() && (aligned[std::size_t(rank)] >> slot_of(g) & 1u) != 0 && uniform(rank, g) && !barred(rank, g);
  };
  // A lock-step of members unequally fast (analytic network): from an instant they share (the
  // group's last collective ended for all of them at once), each runs the same kernels with the
  // same launches, so kernel by kernel the slowest (`lead_of`) starts and ends no earlier than any
  // other, and reaches the next collective last: the collective starts then, waiting for nobody
  // else. It joins the runs: the lead's clock is kept beside each member's run (Run::lead_*) and
  // the member takes it at the collective, a wait noted for the peer-wait figures (`paced_waits`).
  // Where the shared instant is: the run opened right after the group's own collective (a barrier
  // of it), or took one of its collectives since.
  auto after_sync = [&](int rank) {
    return sync_end[std::size_t(rank)] != 0 && last_on[rank][kCompute] == sync_end[std::size_t(rank)];
  };
  // The slowdown of the lead of the group in lock-step, if it is paced; 0 otherwise.
  auto aligned_lead = [&](int rank) {
    const unsigned a = aligned[std::size_t(rank)];
    for (CommGroup g : {CommGroup::tp, CommGroup::cp, CommGroup::ep})
      if ((a >> slot_of(g) & 1u) != 0) return lead_of(rank, g).slowdown;
    return 0.0;
  };
  auto paced = [&](int rank, CommGroup g) {
    if (!merging || !pacing || (aligned[std::size_t(rank)] >> slot_of(g) & 1u) == 0 || lead_of(rank, g).slowdown == 0 || barred(rank, g))
      return false;
    const Run& run = runs[std::size_t(rank)];
    if (run.open && last_on[rank][kCompute] == run.task + 1) return run.lead_on;
    return after_sync(rank);
  };
  // Which other lock-steps of a rank a collective of kind g that joins its run leaves standing
  // (analytic network): an equally fast group h each of whose members' own group of kind g is all
  // of its class. Each member's collective of kind g then waits for nobody and takes the same time
  // (the stage's): they stay in lock-step (in an expert-parallel group, the experts' all-to-alls
  // between TP collectives of groups of one class each).
  std::vector<std::array<int, 8>> beside_mask(nranks, std::array<int, 8>{-1, -1, -1, -1, -1, -1, -1, -1});
  auto beside = [&](int rank, CommGroup g) -> unsigned {
    if (!grid || !in_grid(g)) return 0u;
    int& bm = beside_mask[std::size_t(rank)][std::size_t(slot_of(g))];
    if (bm < 0) {
      bm = 0;
      for (CommGroup h : {CommGroup::tp, CommGroup::cp, CommGroup::ep}) {
        if (h == g || group_size(h) <= 1 || !uniform(rank, h)) continue;
        const std::vector<int> reps = reps_in(h, coords_of(rank));
        if (std::all_of(reps.begin(), reps.end(), [&](int x) { return alone(x, g); })) bm |= 1 << slot_of(h);
      }
    }
    return unsigned(bm);
  };
  struct PacedWait {
    TaskId task;
    int rank, lead;
    CommGroup group;
    Time busy, floor, lead_busy, lead_floor;  // in the run, before the collective: the member's, its lead's
    Time launched;                             // the collective's launch
  };
  ChunkedVector<PacedWait> paced_waits;
  // Whether a collective kernel's length is its flows' on the network: not a group of one, nor one
  // overlapped with its GEMM (tp_comm_overlap), which lasts what the GEMM leaves exposed.
  auto flows_of = [&](const Kernel& k) { return net && group_size(k.group) > 1 && k.overlaps == 0; };
  // Whether a collective kernel joins the rank's run.
  auto joins = [&](int rank, const Kernel& k) {
    if (!joins_run(rank, k.group) && !lockstep(rank, k.group) && !(pacing && paced(rank, k.group))) return false;
    if (!flows_of(k)) return true;
    return joined_batch(rank, k).ok;
  };
  // Its length (the rank's total it adds to: comm_total, below).
  // A collective's length on its own, in seconds (its given length, or the closed form on its
  // group's links).
  auto analytic_s = [&](int rank, const Kernel& kernel) {
    return kernel.seconds >= 0 ? kernel.seconds : collective_time(cfg, kernel.coll, kernel.group, kernel.bytes, stage_of(rank));
  };
  auto collective_dt = [&](int rank, const Kernel& kernel) {
    if (flows_of(kernel) && joins(rank, kernel)) {
      return joined_batch(rank, kernel).dt;
    }
    return Time::from_seconds(analytic_s(rank, kernel));
  };
  // A joined collective's claim (see Claim).
  auto note_claimed = [&](KernelBatch& kb) {
    if (kb.claimed) return;
    kb.claimed = true;
    auto& batches = owners[kb.owner].claimed;
    if (std::find(batches.begin(), batches.end(), kb.batch->batch.get()) == batches.end()) batches.push_back(kb.batch->batch.get());
  };
  auto claim = [&](int rank, const Kernel& kernel, TaskId task, Time offset, Time floor, Time dt) {
    KernelBatch& kb = kernel_batch(rank, kernel);
    note_claimed(kb);
    claims.push_back({&kernel, task, kb.owner, pass_no[std::size_t(rank)], offset, floor, dt});
  };
  // A record's claims, replayed pass after pass on a rank: their batches looked up once per record
  // and rank.
  std::map<std::pair<const Segment*, int>, std::vector<KernelBatch*>> replay_batches;
  // A replayed record's claims are one entry, not one each (a 64-GPU PP 4 x TP 2 x DP 8 plan of 128
  // micro-batches made a million claims, 51 MB, for 46k tasks): the record, its batches on the
  // rank, the task and pass, and the host clock its floors are shifted by; spelled out when read,
  // in the order made (before the claim that was next in `claims`).
  struct ClaimRun {
    const Segment* rec;
    const std::vector<KernelBatch*>* batches;
    std::size_t before;  // claims.size() when it was made
    TaskId task;
    std::int32_t pass;
    Time host0;
  };
  ChunkedVector<ClaimRun> claim_runs;
  // f(claim) for every claim, in the order made.
  auto for_each_claim = [&](auto&& f) {
    std::size_t k = 0;
    auto runs_before = [&](std::size_t i) {
      for (; k < claim_runs.size() && claim_runs[k].before == i; ++k) {
        const ClaimRun& cr = claim_runs[k];
        const std::vector<Segment::Claimed>& rc = cr.rec->claims;
        for (std::size_t j = 0; j < rc.size(); ++j)
          f(Claim{rc[j].kernel, cr.task, (*cr.batches)[j]->owner, cr.pass, rc[j].offset,
                  rc[j].floor > Time::zero() ? rc[j].floor + cr.host0 : Time::zero(), rc[j].dt});
      }
    };
    for (std::size_t i = 0; i < claims.size(); ++i) {
      runs_before(i);
      f(claims[i]);
    }
    runs_before(claims.size());
  };

  // Build each stage's chunks.
  for (int rr = 0; rr < nranks; ++rr) {
    const std::int64_t s = stage_of(rr);
    RankState& rs = ranks[rr];
    for (int t = 0; t < 5; ++t) rs.streams[t] = ex.add_stream();
    rs.mem.keep_timeline(cfg.keep_trace && rr == 0);
    for (std::int64_t c = 0; c < v; ++c) {
      const std::int64_t vs = c * par.pp + s;  // virtual stage index
      StageSpec st;
      if (!par.layers_per_stage.empty()) {
        SCALEOUT_CHECK(std::int64_t(par.layers_per_stage.size()) == chunks_total, "layers_per_stage needs pp * virtual_stages entries");
        st.first_layer = 0;
        for (std::int64_t i = 0; i < vs; ++i) st.first_layer += par.layers_per_stage[std::size_t(i)];
        st.layers = par.layers_per_stage[std::size_t(vs)];
      } else {
        st.first_layer = vs * L / chunks_total;
        st.layers = (vs + 1) * L / chunks_total - st.first_layer;
      }
      st.embedding = vs == 0;
      st.head = vs == chunks_total - 1;
      st.tp = par.tp;
      st.sequence_parallel = par.sequence_parallel;
      st.tp_comm_overlap = par.tp_comm_overlap;
      st.cp = par.cp;
      st.ep = par.ep;
      // Gathered weights arrive in the compute dtype (the gather below moves them so).
      st.weights_gathered_in_compute_dtype = gather_params;
      auto [pos, fresh] = tapes.tapes.try_emplace(vs);
      if (fresh) {
        Tape& tape = pos->second;
        tape = build_step_tape(cfg.model, tr, st);
        SCALEOUT_CHECK(tape.copy_of.size() == tape.ops.size(), "a tape's ops and their copy_of differ in number");
        // Every micro-batch runs these kernels again: their times are worked out once (a repeated
        // block's taken from the block it copies).
        for (std::size_t i = 0; i < tape.ops.size(); ++i) {
          OpRec& op = tape.ops[i];
          if (const int from = tape.copy_of[i]; from >= 0) {
            const OpRec& src = tape.ops[std::size_t(from)];
            for (std::size_t k = 0; k < op.fwd.size(); ++k) op.fwd[k].seconds = src.fwd[k].seconds;
            for (std::size_t k = 0; k < op.bwd.size(); ++k) op.bwd[k].seconds = src.bwd[k].seconds;
            continue;
          }
          for (auto* ks : {&op.fwd, &op.bwd}) {
            for (Kernel& k : *ks)
              k.seconds = k.kind != KernelKind::collective ? cm.time(k).seconds()
                                                           : collective_time(cfg, k.coll, k.group, k.bytes, vs % par.pp);
            // A collective overlapped with its GEMM (tp_comm_overlap) costs what the GEMM leaves
            // exposed, with Transformer Engine's default userbuffers settings (initialize_ub in
            // transformer_engine/pytorch/module/base.py): chunked, the pair takes the longer of the
            // two plus one chunk of the shorter (the first chunk's transfer or the last chunk's
            // GEMM), tp chunks for a ring exchange, 4 for a pipelined reduce-scatter; in bulk, the
            // longer of the two. The pipelined and bulk methods run their communication kernels on
            // 16 SMs and launch the GEMM on the others (set_sm_margin): it takes sms / (sms - 16)
            // as long (the ring exchange moves data with copy engines and takes none).
            constexpr double kCommSms = 16, kPipelineSplits = 4;
            const double sms = double(cfg.gpu.sms);
            for (std::size_t x = 0; x < ks->size(); ++x) {
              Kernel& k = (*ks)[x];
              if (k.overlaps == 0) continue;
              const auto j = std::ptrdiff_t(x) + k.overlaps;
              SCALEOUT_CHECK(j >= 0 && std::size_t(j) < ks->size() && (*ks)[std::size_t(j)].kind == KernelKind::gemm,
                             "an overlapped collective without its GEMM");
              const double t0 = (*ks)[std::size_t(j)].seconds, tc = k.seconds;
              const bool margin = k.overlap != Kernel::Overlap::ring_exchange && sms > 2 * kCommSms;
              const double tg = margin ? t0 * sms / (sms - kCommSms) : t0;  // the GEMM beside it
              const double n = k.overlap == Kernel::Overlap::pipeline ? kPipelineSplits : double(std::max<std::int64_t>(1, par.tp));
              k.seconds = k.overlap == Kernel::Overlap::bulk ? std::max(tc, tg) - t0 : std::max(tc, tg) + std::min(tc, tg) / n - t0;
            }
          }
        }
      }
      Chunk ch;
      ch.tape = &pos->second;
      rs.chunks.push_back(std::move(ch));
    }
    for (auto& ch : rs.chunks) {
      // Every rank of a (virtual) stage plans the same passes: one book of plans per tape.
      auto& book = tapes.books[ch.tape];
      if (!book) book = std::make_shared<ChunkPlanner::Book>();
      // (Which gradients an item finished is read by the data-parallel reduction only.)
      ch.planner = std::make_unique<ChunkPlanner>(*ch.tape, tr, shard, book, cfg.track_memory, dp_cp > 1);
    }
  }
  // The persistent state is allocated first and never freed: the peak holds at least the largest
  // rank's, and where that alone does not fit, the screen stops here (StepConfig::screen_state).
  if (cfg.screen_state && cfg.track_memory) {
    int widest = 0;
    std::vector<double> state(std::size_t(nranks), 0.0);
    for (int rr = 0; rr < nranks; ++rr) {
      for (const auto& ch : ranks[rr].chunks)
        for (const MemOp& a : ch.planner->persistent().allocs) state[std::size_t(rr)] += a.bytes;
      if (state[std::size_t(rr)] > state[std::size_t(widest)]) widest = rr;
    }
    const double peak = state[std::size_t(widest)];
    const double required = required_bytes_of(cfg, peak);
    if (required > cfg.gpu.memory.value) {
      res.state_outgrows_memory = true;
      res.peak_bytes = peak;
      res.required_bytes = required;
      res.capacity_bytes = cfg.gpu.memory.value;
      res.rank_peak_bytes = std::move(state);
      res.busiest_rank = int(stage_of(widest));
      res.fits = false;
      return res;
    }
  }

  // Memory effects hang on tasks: allocations when a task starts, frees when it ends.
  TaskMemOps mem_ops;
  if (!cfg.track_memory) mem_ops.turn_off();
  {
    // Room for the tasks up front (a compute task per kernel of every pass, plus transfers): the
    // executor's arrays are vectors, which growing task by task copied over and over; the chunked
    // ones (ChunkedVector) take room in their chunk tables only.
    std::size_t kernels = 0, collectives = 0;
    for (const RankState& rs : ranks)
      for (const Chunk& ch : rs.chunks)
        for (const OpRec& op : ch.tape->ops) {
          kernels += op.fwd.size() + op.bwd.size() + (op.region >= 0 ? op.fwd.size() : 0);
          if (!net) continue;
          std::size_t c = 0;
          for (const Kernel& k : op.fwd) c += k.kind == KernelKind::collective ? 1 : 0;
          collectives += c * (op.region >= 0 ? 2 : 1);
          for (const Kernel& k : op.bwd) collectives += k.kind == KernelKind::collective ? 1 : 0;
        }
    const std::size_t tasks = kernels * std::size_t(m) + std::size_t(nranks) * 64;
    // At most a claim per collective kernel: room up front (address space until touched), as
    // growing the list by doubling copied it over and over into fresh pages.
    if (net) claims.reserve(std::max(claims.capacity(), collectives * std::size_t(m)));
    ex.reserve(tasks);
    info.reserve(tasks);
    deps_of.reserve(tasks, tasks + tasks / 2);
    mem_ops.reserve(tasks, tasks);
    if (!cfg.keep_trace && cfg.track_memory) run_ops.reserve(tasks);
  }
  std::deque<PlanItem> keep_items;  // the kernels that tasks point to (a deque never moves them)
  auto host_cost = [&](Phase p) {
    switch (p) {
      // A checkpointed region's recompute runs its Python forward again (torch.utils.checkpoint,
      // Megatron's recompute): launched as the forward's kernels are, not by autograd's engine.
      case Phase::forward: case Phase::recompute: return cfg.profile.host_fwd_kernel;
      case Phase::backward: return cfg.profile.host_bwd_kernel;
      case Phase::optimizer: return cfg.profile.host_opt_kernel;
    }
    return Time::zero();
  };
  // The first simulated rank's kernel time by kind, what the report gives (r0 below; no other
  // rank's is summed): compute (forward and backward), recompute, optimizer; and its TP, CP and EP
  // collectives'.
  double rank_totals[3] = {0, 0, 0};
  auto rank_total_of = [](Phase p) -> std::size_t { return p == Phase::optimizer ? 2 : p == Phase::recompute ? 1 : 0; };
  auto rank_total = [&](Phase p) -> double& { return rank_totals[rank_total_of(p)]; };
  double rank_tp = 0, rank_cp = 0, rank_ep = 0;
  auto comm_total = [&](CommGroup g) -> double& { return g == CommGroup::tp ? rank_tp : g == CommGroup::cp ? rank_cp : rank_ep; };

  // Emits a plan item's kernels on a rank; returns its first and last compute tasks.
  // A compute kernel's time at full speed, and at a GPU's slowdown.
  auto full_speed = [&](const Kernel& kernel) { return kernel.seconds >= 0 ? Time::from_seconds(kernel.seconds) : cm.time(kernel); };
  auto at_speed = [](Time base, double slow) { return slow == 1.0 ? base : Time::from_seconds(base.seconds() * slow); };
  auto emit = [&](int rank, const PlanItem& item, std::span<const TaskId> first_deps) -> std::pair<TaskId, TaskId> {
    // Tasks point at the kernels: tape kernels stay where they are, an item's own are kept.
    const PlanItem* kept = &item;
    if (!item.own.empty()) {
      keep_items.push_back(item);
      kept = &keep_items.back();
    }
    const PlanItem& it = *kept;
    const std::span<const Kernel> kernels = it.kernels();
    TaskId first = 0, last = 0;
    if (!first_deps.empty()) aligned[std::size_t(rank)] = 0;  // its first task waits for something
    if (kernels.empty()) {
      first = last = add_task_span(rank, kCompute, Time::zero(), first_deps, nullptr);
    } else {
      if (it.host_prologue_tensors > 0)
        host_work(rank, Time::from_seconds(it.host_prologue_tensors * cfg.profile.host_opt_tensor.seconds()), "optimizer_prologue");
      Run& open_run = runs[std::size_t(rank)];
      if (merging && !seal_after_kernel && first_deps.empty() && open_run.open && last_on[rank][kCompute] == open_run.task + 1 &&
          std::none_of(kernels.begin(), kernels.end(), [](const Kernel& k) { return k.kind == KernelKind::collective; })) {
        // Every kernel joins the rank's open run: the steps of the loop below, in locals (most
        // items are a kernel or two, and this is most of building a pipelined step's graph).
        const Time hc = host_cost(it.phase);
        const double slow = slowdown[rank];
        double& rank_acc = rank_total(it.phase);
        double ra = rank_acc;  // summed kernel by kernel, in order, as below (kept for the first rank)
        Time host = host_clock[rank], busy = open_run.busy, floor = open_run.floor, first_busy, first_floor;
        const double lead_slow = open_run.lead_slowdown;
        if (pacing && open_run.lead_on && lead_slow != slow) {
          // The lead's clock over the same launches (its kernels' times at its slowdown).
          Time lead_host = host, lead_busy = open_run.lead_busy, lead_floor = open_run.lead_floor;
          for (const Kernel& kernel : kernels) {
            const Time lead_dt = at_speed(full_speed(kernel), lead_slow);
            for (std::int32_t l = 0; l < kernel.launches; ++l) {
              lead_host += hc;
              lead_busy += lead_dt;
              lead_floor = max(lead_floor, lead_host) + lead_dt;
            }
          }
          open_run.lead_busy = lead_busy;
          open_run.lead_floor = lead_floor;
        }
        std::int64_t launches = 0;
        for (std::size_t k = 0; k < kernels.size(); ++k) {
          const Kernel& kernel = kernels[k];
          const Time dt = at_speed(full_speed(kernel), slow);
          const double dts = dt.seconds();
          for (std::int32_t l = 0; l < kernel.launches; ++l) {
            host += hc;
            ra += dts;
            const Time start_floor = max(floor, host);
            if (k == 0 && l == 0) {
              first_busy = busy;
              first_floor = start_floor;
            }
            busy += dt;
            floor = start_floor + dt;
          }
          launches += kernel.launches;
        }
        if (pacing && !(open_run.lead_on && lead_slow != slow)) {
          open_run.lead_busy = busy;
          open_run.lead_floor = floor;
        }
        host_clock[rank] = host;
        if (rank == 0) rank_acc = ra;
        open_run.busy = busy;
        open_run.floor = floor;
        open_run.grown = true;
        if (q_of(rank) == 0) res.kernels += std::uint64_t(launches);
        const TaskId g = open_run.task;
        for (const MemOp& mo : it.allocs) run_op(g, first_busy, first_floor, mo, true);
        for (const MemOp& mo : it.frees) run_op(g, busy, floor, mo, false);
        return {g, g};
      }
      for (std::size_t k = 0; k < kernels.size(); ++k) {
        const Kernel& kernel = kernels[k];
        Time dt;
        const bool coll = kernel.kind == KernelKind::collective;
        SCALEOUT_CHECK(kernel.launches >= 1 && (!coll || kernel.launches == 1), "a kernel launched repeatedly must be a compute kernel");
        const bool synced = coll && !joins(rank, kernel);  // a collective that waits for its group
        const bool pace = pacing && coll && !synced && paced(rank, kernel.group);  // it waits for the group's lead
        // Another group's collective ends a lock-step (a barrier sets its own, in sync_task).
        if (coll && !synced && !(pacing && in_grid(kernel.group) && even(rank)))
          aligned[std::size_t(rank)] &= 1u << slot_of(kernel.group) | (pacing ? beside(rank, kernel.group) : 0u);
        Time base;  // a compute kernel's time at full speed
        if (coll) {
          // The tape's kernels carry it (worked out for the stage the tape belongs to). On the
          // network a launched one lasts what its flows make of it (counted after the run).
          dt = collective_dt(rank, kernel);
          if ((!synced || !net) && rank == 0) comm_total(kernel.group) += dt.seconds();
        } else {
          base = full_speed(kernel);
          dt = at_speed(base, slowdown[rank]);
        }
        for (std::int32_t launch = 0; launch < kernel.launches; ++launch) {
          const bool first_launch = k == 0 && launch == 0, last_launch = k + 1 == kernels.size() && launch + 1 == kernel.launches;
          const Time launched = host_work(rank, host_cost(it.phase), kernel.name.c_str());
          if (!coll && rank == 0) rank_total(it.phase) += dt.seconds();
          const std::span<const TaskId> deps = first_launch ? std::span<const TaskId>(first_deps) : std::span<const TaskId>();
          Run& run = runs[std::size_t(rank)];
          TaskId g;
          Time op_busy, op_floor;  // where this kernel starts inside its run
          if (synced) {
            g = sync_task(rank, kCompute, dt, deps, &kernel, kernel.group, kernel.coll,
                          kernel.bytes, launched);
          } else if (merging && deps.empty() && run.open && last_on[rank][kCompute] == run.task + 1) {
            g = run.task;
            if (pace && (run.lead_busy != run.busy || run.lead_floor != run.floor)) {
              // Its lead is not there yet: the collective starts when it is.
              paced_waits.push_back(
                  {g, rank, lead_of(rank, kernel.group).rank, kernel.group, run.busy, run.floor, run.lead_busy, run.lead_floor, launched});
              run.busy = run.lead_busy;
              run.floor = run.lead_floor;
            }
            op_busy = run.busy;
            op_floor = max(run.floor, launched);
            run.busy += dt;
            run.floor = op_floor + dt;
            run.grown = true;
            if (pacing && run.lead_on && !coll) {
              const Time lead_dt = run.lead_slowdown == slowdown[rank] ? dt : at_speed(base, run.lead_slowdown);
              run.lead_busy += lead_dt;
              run.lead_floor = max(run.lead_floor, launched) + lead_dt;
            }
          } else {
            // A run opening where the group in lock-step ended its last collective together.
            const bool shared = pacing && merging && deps.empty() && after_sync(rank);
            g = add_task_span(rank, kCompute, dt, deps, &kernel, launched);
            if (merging) run = Run{g, dt, launched + dt, true, false, false, 1.0, Time::zero(), Time::zero()};
            if (merging && pacing) {
              const double lead = shared ? aligned_lead(rank) : 0.0;
              const Time lead_dt = lead > 0 && !coll ? at_speed(base, lead) : dt;
              run.lead_on = shared || coll;
              run.lead_slowdown = lead > 0 ? lead : slowdown[rank];
              run.lead_busy = lead_dt;
              run.lead_floor = launched + lead_dt;
            }
            op_floor = launched;
          }
          if (pacing && merging && !synced && coll) {
            // The group's members (or this rank alone) end the collective together: the lead's
            // clock is the run's from here.
            run.lead_on = true;
            const double lead = aligned_lead(rank);
            run.lead_slowdown = lead > 0 ? lead : slowdown[rank];
            run.lead_busy = run.busy;
            run.lead_floor = run.floor;
          }
          const bool in_run = merging && !synced;
          if (coll && in_run && flows_of(kernel)) claim(rank, kernel, g, op_busy, op_floor, dt);
          if (first_launch && !it.allocs.empty()) {
            if (in_run)
              for (const MemOp& mo : it.allocs) run_op(g, op_busy, op_floor, mo, true);
            else
              mem_ops.push(g, it.allocs, false);
          }
          if (last_launch && !it.frees.empty()) {
            if (in_run)
              for (const MemOp& mo : it.frees) run_op(g, run.busy, run.floor, mo, false);
            else
              mem_ops.push(g, it.frees, true);
          }
          if (first_launch) first = g;
          last = g;
          if (q_of(rank) == 0) ++res.kernels;
          if (seal_after_kernel) {
            seal(rank);
            seal_after_kernel = false;
          }
        }
      }
      return {first, last};
    }
    mem_ops.push(first, it.allocs, false);
    mem_ops.push(last, it.frees, true);
    return {first, last};
  };

  // Every micro-batch's pass hands out the same plan items, and a run of kernels that opens at an
  // item and keeps to itself (no collective but those that join it, no gradient bucket, no FSDP
  // gather past its first task, which may wait for its layer's gather) grows the same
  // way each time: its tasks, durations, host clock and memory changes are a function of the items
  // and the GPU's slowdown, shifted by the host clock where it opens. The first such stretch of
  // items is emitted kernel by kernel and recorded; later ones are replayed from the record.
  // Records (and the split passes they point into) are kept across a step's rounds (TapeCache):
  // the windows of an extrapolated step, and the baseline's two lengths, replay what the first
  // recorded. They hold while the classes, the memory tracking and the flow joins are the same.
  if (tapes.records_classes != tapes.classes || tapes.records_track_memory != cfg.track_memory ||
      tapes.records_flow_joins_off != tapes.flow_joins_off) {
    tapes.segments.clear();
    tapes.alike.clear();
    tapes.aliases.clear();
    tapes.contents_seen.clear();
    tapes.seen_once.clear();
    tapes.records_classes = tapes.classes;
    tapes.records_track_memory = cfg.track_memory;
    tapes.records_flow_joins_off = tapes.flow_joins_off;
  }
  auto& segments = tapes.segments;
  auto& seen_once = tapes.seen_once;  // stretches met once: recorded the second time
  std::vector<int> lockable_mask(nranks, -1);  // by rank: the groups whose members are alike (`uniform`; on the flow network, or paced) and not barred
  auto lockable = [&](int rank) {
    int& mask = lockable_mask[std::size_t(rank)];
    if (mask < 0) {
      mask = 0;
      for (CommGroup g : {CommGroup::tp, CommGroup::cp, CommGroup::ep})
        if (group_size(g) > 1 && (uniform(rank, g) || (net && pacing && lead_of(rank, g).slowdown != 0)) && !barred(rank, g))
          mask |= 1 << slot_of(g);
    }
    return unsigned(mask);
  };
  std::vector<int> joining_mask(nranks, -1);  // by rank, worked out once (inside the passes)
  auto joining_groups = [&](int rank) {
    int& mask = joining_mask[std::size_t(rank)];
    if (mask < 0) {
      mask = 0;
      for (CommGroup g : {CommGroup::tp, CommGroup::cp, CommGroup::ep, CommGroup::dp, CommGroup::pp})
        if (joins_run(rank, g)) mask |= 1 << slot_of(g);
    }
    return unsigned(mask);
  };
  // A pass's items with each collective kernel made an item of its own (the allocations go with
  // the first part, the frees and finished gradients with the last): the same tasks, in the same
  // order, but the compute kernels after a collective then open a run at an item, where it can be
  // recorded. Kept for the step, by the pass.
  auto& split_passes = tapes.split_passes;
  auto split_of = [&](const ChunkPlanner::Pass& pass) -> const std::vector<PlanItem>& {
    const auto coll = [](const Kernel& k) { return k.kind == KernelKind::collective; };
    const auto splits = [&](const PlanItem& it) {
      const std::span<const Kernel> ks = it.kernels();
      return it.from_tape && ks.size() > 1 && std::any_of(ks.begin(), ks.end(), coll);
    };
    auto [pos, fresh] = split_passes.try_emplace(pass.get());
    if (!fresh) return pos->second.second.empty() ? *pass : pos->second.second;
    pos->second.first = pass;
    if (std::none_of(pass->begin(), pass->end(), splits)) return *pass;  // nothing to split: no copy
    std::vector<PlanItem>& out = pos->second.second;
    out.reserve(pass->size());
    for (const PlanItem& it : *pass) {
      const std::span<const Kernel> ks = it.kernels();
      if (!splits(it)) {
        out.push_back(it);
        continue;
      }
      const std::size_t first_part = out.size();
      for (std::size_t b = 0; b < ks.size();) {
        std::size_t e = b + 1;
        if (!coll(ks[b]))
          while (e < ks.size() && !coll(ks[e])) ++e;
        PlanItem part;
        part.phase = it.phase;
        part.from_tape = true;
        part.tape_kernels = ks.subspan(b, e - b);
        part.layer = it.layer;
        out.push_back(std::move(part));
        b = e;
      }
      out[first_part].allocs = it.allocs;
      out[first_part].host_prologue_tensors = it.host_prologue_tensors;
      out.back().frees = it.frees;
      out.back().grads_done = it.grads_done;
    }
    return out;
  };
  auto kernel_dt = [&](int rank, const Kernel& kernel) {
    if (kernel.kind == KernelKind::collective) return collective_dt(rank, kernel);
    return at_speed(full_speed(kernel), slowdown[rank]);
  };

  const double gdt = par.grad_reduce_bytes > 0 ? par.grad_reduce_bytes : dtype_bytes(tr.precision.grad);
  const Dtype gather_dtype = tr.precision.compute == Dtype::fp8 ? Dtype::bf16 : tr.precision.compute;
  std::map<std::tuple<int, bool, int, int>, TaskId> sends;  // (dest rank, forward?, chunk, mb) -> transfer
  // A transfer between two GPUs with the replicas' beside it, planned once per size.
  std::map<std::tuple<int, int, double>, std::shared_ptr<const CollectiveBatch>> send_batches;

  for (int r = 0; r < nranks; ++r) {
    const std::int64_t s = stage_of(r);
    RankState& rs = ranks[r];
    // Persistent state at the start of the step.
    PlanItem init;
    for (auto& ch : rs.chunks) {
      PlanItem p0 = ch.planner->persistent();
      init.allocs.append(p0.allocs.begin(), p0.allocs.end());
    }
    emit(r, init, {});

    // A collective over the experts' data-parallel group (dp_view 3), timed and counted.
    auto expert_dp_task = [&](CollectiveKind kind, double bytes, std::span<const TaskId> deps) {
      const double te = expert_dp_collective_time(cfg, kind, bytes, s);
      dp_view = 3;
      const TaskId id = sync_task(r, kDpComm, Time::from_seconds(te), deps, nullptr, CommGroup::dp, kind, bytes);
      dp_view = 0;
      if (q_of(r) == 0) res.dp_comm_total_s += te;
      return id;
    };
    // Gradient buckets: the dense parameters' over the data-parallel group, the experts' (with
    // expert parallelism) in buckets of their own over the expert data-parallel group, none
    // where that group is one GPU (ep = dp).
    double bucket = 0, expert_bucket = 0;
    TaskId bucket_task = 0;
    auto flush_one = [&](double& b, bool force, bool experts) {
      if (b <= 0 || (!force && b < par.ddp_bucket_bytes)) return;
      const bool reduce_scatter = par.zero >= 2;
      const CollectiveKind kind = reduce_scatter ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
      std::vector<TaskId> deps{bucket_task};
      if (!par.overlap_grad_reduce) deps = {rs.last_backward};
      if (experts) {
        rs.dp_tasks.push_back(expert_dp_task(kind, b, deps));
      } else {
        const double t = collective_time(cfg, kind, CommGroup::dp, b, s);
        rs.dp_tasks.push_back(sync_task(r, kDpComm, Time::from_seconds(t), deps, nullptr, CommGroup::dp, kind, b));
        if (q_of(r) == 0) res.dp_comm_total_s += t;
      }
      b = 0;
    };
    auto flush_bucket = [&](bool force) {
      flush_one(bucket, force, false);
      if (expert_dp > 1) flush_one(expert_bucket, force, true);
      expert_bucket = 0;
    };

    const std::vector<Work> order = schedule_for(par, s, m);
    // Pipeline sends: a pass's output (forward) or input gradient (backward), after task `after`.
    auto send_of = [&](const Work& w, std::size_t pass, TaskId after) {
      const Chunk& ch = rs.chunks[w.chunk];
      const std::int64_t vs = w.chunk * par.pp + s;
      std::int64_t dest_vs = w.forward ? vs + 1 : vs - 1;
      if (dest_vs >= 0 && dest_vs < chunks_total) {
        const std::int64_t dest_stage = dest_vs % par.pp;
        const int dest_rank = rep_of(dest_stage, q_of(r));
        const int dest_chunk = int(dest_vs / par.pp);
        double bytes = w.forward ? ch.tape->tensors[ch.tape->output].bytes : ch.tape->tensors[ch.tape->input].bytes;
        // Megatron's scatter-gather: each TP rank sends 1/tp of the (replicated) activation and the
        // receivers all-gather it over NVLink (SC21 section 4.1).
        if (par.tp > 1 && !par.sequence_parallel && par.pipeline_scatter_gather) bytes /= double(par.tp);
        const LinkChoice link = link_for(par.links, stages_cross_nodes(par, s, dest_stage));
        const double t = link.latency_s + bytes / std::max(link.bandwidth, 1.0);
        if (net) {
          const Coords c = coords_of(r);
          Coords d = c;
          d.s = dest_stage;
          const int src_g = global_of(c), dst_g = global_of(d);
          auto& batch = send_batches[{src_g, dst_g, bytes}];
          if (!batch) {
            std::vector<CollectiveSpec> specs{spec_of(CollectiveKind::send_recv, {src_g, dst_g}, bytes)};
            if (plain_fold) {
              // The other replicas' transfers between the same stages that share a node with this one.
              const std::set<int> mine{cfg.topology->node_of(src_g), cfg.topology->node_of(dst_g)};
              for (std::int64_t dp_i = 0; dp_i < par.dp; ++dp_i)
                for (std::int64_t cp_i = 0; cp_i < par.cp; ++cp_i)
                  for (std::int64_t tp_i = 0; tp_i < par.tp; ++tp_i) {
                    if (dp_i == c.dp && cp_i == c.cp && tp_i == c.tp) continue;
                    const int a = global_of({tp_i, cp_i, dp_i, c.s}), b2 = global_of({tp_i, cp_i, dp_i, dest_stage});
                    if (mine.count(cfg.topology->node_of(a)) || mine.count(cfg.topology->node_of(b2)))
                      specs.push_back(spec_of(CollectiveKind::send_recv, {a, b2}, bytes));
                  }
            } else if (by_class) {
              // The transfers of every GPU of this class (they send at the same time).
              for (std::int64_t q = 0; q < Q; ++q) {
                if (q == q_of(r) || rep_of(s, q) != r) continue;
                const Coords x = coords_at(s, q);
                Coords y = x;
                y.s = dest_stage;
                specs.push_back(spec_of(CollectiveKind::send_recv, {global_of(x), global_of(y)}, bytes));
              }
            }
            batch = prepare(specs);
            if (by_class) class_batches.emplace_back(batch, specs);
          }
          launch_next = launch_folded(batch);
        }
        const TaskId send = add_task(r, par.p2p_blocking ? kCompute : w.forward ? kSendFwd : kSendBwd, Time::from_seconds(t), one(after), nullptr);
        info[send].comm = std::uint8_t(int(CommGroup::pp) + 1);
        if (q_of(r) == 0) res.pp_comm_s += t;
        sends[{dest_rank, w.forward, dest_chunk, w.mb}] = send;
        rs.passes[pass].send = send;
        rs.passes[pass].sends = true;
      }
    };
    bool deferred = false;
    Work deferred_work{};
    std::size_t deferred_pass = 0;
    std::vector<int> bwd_done(v, 0);
    const bool zero_bubble = par.schedule == PipelineSchedule::zero_bubble && par.pp > 1;
    std::map<std::pair<int, int>, ChunkPlanner::Pass> weight_passes;  // zero-bubble: (chunk, mb) -> W
    // --overlap-param-gather: how long the chunks' first forward passes take (their kernels at
    // this GPU's speed, collectives at their analytic length) and over how many layers, for what
    // the gather leaves exposed (below).
    const bool gather_overlapped = par.overlap_param_gather && par.zero >= 1 && par.zero <= 2 && dp_cp > 1;
    std::vector<char> first_forward_seen(std::size_t(v), 0);
    double first_forward_s = 0, first_chunk_forward_s = 0;
    std::size_t first_forward_layers = 0;
    merging = !cfg.keep_trace;
    for (const Work& w : order) {
      const auto made_from = TaskId(ex.task_count());
      aligned[std::size_t(r)] = 0;
      ++pass_no[std::size_t(r)];
      const bool last_backward = !w.forward && !w.weight && bwd_done[w.chunk] + 1 == int(m);  // of its chunk
      if (flow_joins && dp_cp > 1 && reduce_from[std::size_t(r)] == std::numeric_limits<std::int32_t>::max() &&
          (gather_params || last_backward) && dp_shares_node(r))
        reduce_from[std::size_t(r)] = pass_no[std::size_t(r)];
      if (!tapes.join_until.empty() || reduce_from[std::size_t(r)] <= pass_no[std::size_t(r)])
        joining_mask[std::size_t(r)] = lockable_mask[std::size_t(r)] = -1;  // (`barred`)
      Chunk& ch = rs.chunks[w.chunk];
      const std::int64_t vs = w.chunk * par.pp + s;
      ChunkPlanner::Pass pass_items;
      if (w.weight) {
        auto wp = weight_passes.find({w.chunk, w.mb});
        SCALEOUT_CHECK(wp != weight_passes.end(), "W pass before its backward pass");
        pass_items = std::move(wp->second);
        weight_passes.erase(wp);
        if (!pass_items || pass_items->empty()) continue;  // nothing in this stage has a separate weight gradient
      } else if (w.forward) {
        pass_items = ch.planner->forward_pass(w.mb);
      } else {
        ++bwd_done[w.chunk];
        pass_items = ch.planner->backward_pass(w.mb, last_backward,
                                               zero_bubble ? &weight_passes[{w.chunk, w.mb}] : nullptr);
      }
      const bool record_runs = merging;
      const std::vector<PlanItem>& items = record_runs ? split_of(pass_items) : *pass_items;
      if (gather_overlapped && w.forward && !w.weight && !first_forward_seen[std::size_t(w.chunk)]) {
        first_forward_seen[std::size_t(w.chunk)] = 1;
        std::set<int> layers;
        for (const PlanItem& it : items)
          for (const Kernel& k : it.kernels()) {
            layers.insert(it.layer);
            first_forward_s += k.kind == KernelKind::collective ? analytic_s(r, k) : at_speed(full_speed(k), slowdown[r]).seconds();
          }
        first_forward_layers += layers.size();
        if (w.chunk == 0) first_chunk_forward_s = first_forward_s;
      }
      if (w.forward && w.chunk == 0) {
        // Faults on this GPU's host: a slow data loader (first stage) or a one-time stall.
        if (loader_delay[r] > 0 && vs == 0) host_work(r, Time::from_seconds(loader_delay[r]), "data_loader");
        for (const auto& [mb, len] : stalls[r])
          if (mb == w.mb) host_work(r, Time::from_seconds(len), "stall");
      }
      TaskId first = 0, last = 0;
      bool started = false;
      int cur_layer = -2;
      TaskId layer_gather = 0;
      bool have_gather = false;
      double gathered_bytes = 0;
      std::vector<TaskId> pending_first;
      std::vector<TaskId> layer_ends;  // where each layer of this pass ends (FSDP's rate limiter)
      // An item that can be part of a recorded stretch: compute kernels, and collectives that join
      // runs, only; nothing waiting on it.
      // Under ZeRO-3 / FSDP a stretch keeps to its layer: the next layer's first item gathers.
      auto keeps_to_run = [&](const PlanItem& x) {
        const std::span<const Kernel> ks = x.kernels();
        return !ks.empty() && x.own.empty() && x.host_prologue_tensors == 0 &&
               (!gather_params || x.phase == Phase::optimizer || x.layer == cur_layer) &&
               !(x.phase == Phase::backward && !x.grads_done.empty() && dp_cp > 1 && !gather_params) &&
               std::all_of(ks.begin(), ks.end(), [&](const Kernel& k) { return k.kind != KernelKind::collective || joins(r, k); });
      };
      // ZeRO-3 / FSDP: gather a layer's parameters before its first op (its first task waits for
      // the gather: first_deps), release them after. Nothing where the item is not a layer's first.
      auto gather_layer = [&](const PlanItem& item, std::vector<TaskId>& first_deps) {
        if (!gather_params || item.phase == Phase::optimizer || item.layer == cur_layer || item.kernels().empty()) return;
        if (started) {
          seal(r);
          layer_ends.push_back(last);
        }
        if (have_gather && (w.forward ? par.fsdp != FsdpMode::shard_grad_op : true)) {
          // Reshard the previous layer.
          mem_ops.push(last, {MemCategory::other, gathered_bytes}, true);
        }
        cur_layer = item.layer;
        // (The experts' part over their own group: gathered from dp*cp / ep shards, or held
        // whole where that group is one GPU.)
        const double lpe = expert_groups ? ch.planner->layer_expert_params(item.layer) : 0.0;
        const double lp = ch.planner->layer_params(item.layer) - lpe;
        gathered_bytes = lp * dtype_bytes(gather_dtype) * (1.0 - (par.offload_params ? 0.0 : 1.0 / shard.params)) +
                         lpe * dtype_bytes(gather_dtype) * (1.0 - (par.offload_params ? 0.0 : 1.0 / shard.expert_params));
        const bool need = w.forward || regather_in_backward;
        if (need && gathered_bytes > 0) {
          double t = shard_time(CollectiveKind::all_gather, lp * dtype_bytes(gather_dtype), s);
          // FSDP's MixedPrecision casts this rank's fp32 shard to the compute dtype on the
          // all-gather stream before every gather.
          const Dtype stored = tr.precision.param;
          if (stored != gather_dtype && !par.offload_params)
            t += cm.memory_time((lp / shard.params + lpe / shard.expert_params) * (dtype_bytes(stored) + dtype_bytes(gather_dtype)), false)
                     .seconds();
          std::vector<TaskId> gdeps;
          if (started) gdeps.push_back(first);  // prefetch: once this pass has started
          // FSDP's rate limiter (limit_all_gathers, on by default) keeps at most two layers'
          // all-gathers ahead: this one waits until the layer two back has run (and been
          // resharded). Unlimited, the gathers outran compute and held every layer at once.
          if (layer_ends.size() >= 2) gdeps.push_back(layer_ends[layer_ends.size() - 2]);
          // Offloaded parameters: this rank's shard crosses PCIe before the gather.
          if (par.offload_params) {
            const double h2d = (lp / gathered_shard_params + lpe / expert_share(gathered_shard_params)) * dtype_bytes(gather_dtype) /
                               std::max(par.links.pcie_bandwidth, 1.0);
            if (net) gdeps = {add_task(r, kDpComm, Time::from_seconds(h2d), gdeps, nullptr)};
            else t += h2d;
          }
          dp_view = hybrid_groups ? 1 : 0;  // HYBRID_SHARD gathers inside its shard group
          layer_gather = sync_task(r, kDpComm, Time::from_seconds(t), gdeps, nullptr, CommGroup::dp, CollectiveKind::all_gather,
                                   lp * dtype_bytes(gather_dtype));
          dp_view = 0;
          if (q_of(r) == 0) res.dp_comm_total_s += t;
          if (lpe > 0 && expert_dp > 1)
            layer_gather = expert_dp_task(CollectiveKind::all_gather, lpe * dtype_bytes(gather_dtype), one(layer_gather));
          mem_ops.push(layer_gather, {MemCategory::other, gathered_bytes}, false);
          first_deps.push_back(layer_gather);
          have_gather = true;
        } else {
          // SHARD_GRAD_OP keeps the forward's gathered layer until its backward has run, then
          // reshards it.
          have_gather = par.fsdp == FsdpMode::shard_grad_op && !w.forward && gathered_bytes > 0;
        }
      };
      for (std::size_t idx = 0; idx < items.size(); ++idx) {
        const PlanItem& item = items[idx];
        std::vector<TaskId> first_deps;
        // Under FSDP a later layer's first item gathers first, so that the layer's items can still
        // be a recorded stretch: its first task waits for the gather. A first task that waits ends
        // the rank's lock-steps as it opens (emit): ended here already, before keeps_to_run asks
        // which collectives join.
        if (record_runs && started) gather_layer(item, first_deps);
        if (!first_deps.empty()) aligned[std::size_t(r)] = 0;
        // (Under FSDP a pass's first kernel is a task of its own, which the next layer's gather
        // waits for: it is never recorded. Where the pass's first item had no kernels,
        // seal_after_kernel is still set: that item's successor takes the path below, which
        // clears it.)
        if (record_runs && !(runs[std::size_t(r)].open && last_on[r][kCompute] == runs[std::size_t(r)].task + 1) &&
            (started || !gather_params) && !seal_after_kernel && keeps_to_run(item)) {
          // A run opens here: replay its record, or emit it and record it.
          // (and which of its groups are in lock-step: their collectives join too)
          // (and which lock-steps its joining collectives leave standing)
          auto three = [](unsigned b) { return (b & 1u) | (b >> 3 & 1u) << 1 | (b >> 4 & 1u) << 2; };  // tp, cp, ep
          // (A stretch whose first task waits, a gathering layer's, is recorded apart from one that
          // opens without waiting.)
          unsigned mask = joining_groups(r) | (locksteps() ? (aligned[std::size_t(r)] & lockable(r)) << 8 : 0u) |
                          (first_deps.empty() ? 0u : 1u << 27);
          if (pacing)
            mask |= (three(beside(r, CommGroup::tp)) | three(beside(r, CommGroup::cp)) << 3 | three(beside(r, CommGroup::ep)) << 6) << 16 |
                    (even(r) ? 1u << 25 : 0u);
          constexpr unsigned kGroupsOnTapes = 1u << int(CommGroup::tp) | 1u << int(CommGroup::cp) | 1u << int(CommGroup::ep);
          const int rank_part = net && ((mask | mask >> 8) & kGroupsOnTapes) != 0 ? r : -1;
          const double lead0 = pacing && after_sync(r) ? aligned_lead(r) : 0.0;
          const SegmentKey key{&item, slowdown[r], mask, rank_part, lead0};
          flush_group();  // the last run's changes first (its instant cannot gather this run's)
          const Time host0 = host_clock[r];
          auto seg = segments.find(key);
          // Not met at this item: a record of the same content made elsewhere (another layer's
          // ops), checked item by item, and then kept for this item too.
          const Segment* like = nullptr;
          AlikeKey content{0, slowdown[r], mask, rank_part, lead0};
          if (seg == segments.end()) {
            const auto alias = tapes.aliases.find(key);
            if (alias != tapes.aliases.end()) like = alias->second;
          }
          if (seg == segments.end() && !like) {
            std::get<0>(content) = run_content_hash(item, cfg.track_memory);
            const auto found = tapes.alike.find(content);
            if (found != tapes.alike.end()) {
              const Segment& c = *found->second;
              bool same = idx + c.count <= items.size();
              for (std::size_t i = 0; same && i < c.count; ++i)
                same = same_run_content(items[idx + i], (*c.items)[c.start + i], cfg.track_memory) && keeps_to_run(items[idx + i]);
              // It ends where this one would.
              if (same && idx + c.count < items.size()) same = !keeps_to_run(items[idx + c.count]);
              if (same) {
                like = &c;
                tapes.aliases.emplace(key, like);
              }
            }
          }
          TaskId g;
          // The first time, only emitted (most stretches of a short step are never met again),
          // unless a stretch of the same content was met before (the layers of a stage).
          if (seg == segments.end() && !like && seen_once.insert(key).second &&
              (std::get<0>(content) == 0 || tapes.contents_seen.insert(content).second)) {
            g = emit(r, item, first_deps).first;
            std::size_t j = idx + 1;
            for (; j < items.size() && keeps_to_run(items[j]); ++j) emit(r, items[j], {});
            idx = j - 1;
          } else if (seg != segments.end() || like) {
            const Segment& rec = like ? *like : seg->second;
            const Time launched = host0 + rec.first_launch;
            g = add_task_span(r, kCompute, rec.first_dt, first_deps, &item.kernels()[0], launched);
            Run& run = runs[std::size_t(r)];
            run = Run{g, rec.busy, rec.floor + host0, true, rec.grown, rec.lead_on, rec.lead_slowdown, rec.lead_busy, rec.lead_floor + host0};
            for (const Segment::Waited& x : rec.waits)
              paced_waits.push_back({g, r, lead_of(r, x.group).rank, x.group, x.busy, x.floor + host0, x.lead_busy, x.lead_floor + host0,
                                     x.launched + host0});
            host_clock[r] = host0 + rec.host;
            for (std::size_t t = 0; r == 0 && t < rec.by_rank_total.size(); ++t) {
              if (rec.by_rank_total[t].empty()) continue;
              double& total = rank_totals[t];
              double sum = total;
              for (const double dt : rec.by_rank_total[t]) sum += dt;
              total = sum;
            }
            if (r == 0)
              for (const auto& [kind, dt] : rec.comm) comm_total(kind) += dt;
            if (q_of(r) == 0) res.kernels += rec.launches;
            aligned[std::size_t(r)] &= rec.aligned_keep;
            if (!rec.claims.empty()) {
              std::vector<KernelBatch*>& kbs = replay_batches[{&rec, r}];
              if (kbs.empty())
                for (const Segment::Claimed& c : rec.claims) kbs.push_back(&kernel_batch(r, *c.kernel));
              for (KernelBatch* kb : kbs) note_claimed(*kb);
              claim_runs.push_back({&rec, &kbs, claims.size(), g, pass_no[std::size_t(r)], host0});
            }
            run_ops.refer(g, rec.changes, host0, rec.has_block ? &rec.block : nullptr);
            if (rec.open_group.open) {
              group = rec.open_group;
              group.task = g;
              group.floor = group.floor + host0;
            }
            idx = idx + rec.count - 1;
          } else {
            Segment rec;
            rec.pin = pass_items;
            const std::size_t c0 = run_ops.size(), claims0 = claims.size(), waits0 = paced_waits.size();
            std::size_t j = idx;
            g = emit(r, item, first_deps).first;
            for (++j; j < items.size() && keeps_to_run(items[j]); ++j) emit(r, items[j], {});
            const Run& run = runs[std::size_t(r)];
            SCALEOUT_CHECK(run.open && run.task == g && last_on[r][kCompute] == g + 1, "a recorded run did not keep to itself");
            rec.items = &items;
            rec.start = idx;
            rec.count = j - idx;

            // A collective's length is the one it joined with (its claim, on the flow network:
            // whether it joins, a lock-step, is not to be asked again after the stretch).
            std::size_t ci = claims0;
            auto dt_of = [&](const Kernel& k) {
              if (ci < claims.size() && k.kind == KernelKind::collective && flows_of(k)) return claims[ci++].dt;
              return kernel_dt(r, k);
            };
            rec.first_dt = dt_of(item.kernels()[0]);
            ci = claims0;
            rec.first_launch = host_cost(item.phase);
            rec.host = host_clock[r] - host0;
            rec.busy = run.busy;
            rec.floor = run.floor - host0;
            rec.grown = run.grown;
            rec.lead_on = run.lead_on;
            rec.lead_slowdown = run.lead_slowdown;
            rec.lead_busy = run.lead_busy;
            rec.lead_floor = run.lead_floor - host0;
            for (std::size_t i = waits0; i < paced_waits.size(); ++i) {
              const PacedWait& pw = paced_waits[i];
              rec.waits.push_back({pw.group, pw.busy, pw.floor - host0, pw.lead_busy, pw.lead_floor - host0, pw.launched - host0});
            }
            rec.changes.reserve(run_ops.size() - c0);
            for (std::size_t i = idx; i < j; ++i)
              for (const Kernel& k : items[i].kernels()) {
                const double dts = dt_of(k).seconds();
                const bool comm = k.kind == KernelKind::collective;
                const Phase ph = items[i].phase;
                for (std::int32_t l = 0; l < k.launches; ++l) {
                  if (comm) {
                    rec.comm.emplace_back(k.group, dts);
                  } else {
                    rec.by_rank_total[rank_total_of(ph)].push_back(dts);
                  }
                }
                rec.launches += std::uint64_t(k.launches);
                if (comm && !(pacing && in_grid(k.group) && even(r)))
                  rec.aligned_keep &= 1u << slot_of(k.group) | (pacing ? beside(r, k.group) : 0u);
              }
            SCALEOUT_CHECK(ci == claims.size(), "a recorded run's collectives did not all join it");
            for (std::size_t i = claims0; i < claims.size(); ++i) {
              const Claim& c = claims[i];
              rec.claims.push_back({c.kernel, c.offset, c.floor > Time::zero() ? c.floor - host0 : Time::zero(), c.dt});
            }
            run_ops.for_range(std::uint32_t(c0), std::uint32_t(run_ops.size()), [&](MemCategory c, double bytes, Time offset, Time floor) {
              rec.changes.push_back({offset, floor > Time::zero() ? floor - host0 : Time::zero(), bytes, c});
            });
            // Summed up where no change waits for the host (each is then the run's start plus its offset).
            if (!rec.changes.empty() && std::all_of(rec.changes.begin(), rec.changes.end(), [](const RunChange& c) { return c.floor == Time::zero(); })) {
              rec.block.changes.reserve(rec.changes.size());
              for (const RunChange& c : rec.changes) rec.block.changes.push_back({c.offset, c.bytes, c.category});
              rec.has_block = rec.block.build();
              // Told as a block, its changes one by one are kept there alone.
              if (rec.has_block) std::vector<RunChange>().swap(rec.changes);
              else rec.block.changes.clear();
            }
            if (group.open && group.task == g) {
              rec.open_group = group;
              rec.open_group.floor = group.floor - host0;
            }
            idx = j - 1;
            const auto made = segments.emplace(key, std::move(rec)).first;
            tapes.alike.try_emplace(content, &made->second);  // (its hash worked out above: no record, no alias)
          }
          if (!started) {
            first = g;
            started = true;
          }
          last = g;
          continue;
        }
        // ZeRO-3 / FSDP: a layer's gather (if not done above).
        gather_layer(item, first_deps);
        if (!started) {
          // The pipeline neighbour's activation (forward) or gradient (backward).
          first_deps.insert(first_deps.end(), pending_first.begin(), pending_first.end());
        }
        const auto& done = item.grads_done;
        const bool is_bwd = item.phase == Phase::backward;
        // The next layer's gather waits for this pass's first kernel: keep it a task of its own.
        seal_after_kernel = gather_params && !started;
        const auto [a, b] = emit(r, item, first_deps);
        if (!started) {
          first = a;
          started = true;
        }
        last = b;
        if (is_bwd && !done.empty()) {
          // Gradients ready for the data-parallel reduction.
          if (!gather_params && dp_cp > 1) {
            for (int pidx : done)
              (expert_groups && ch.tape->params[pidx].split == ParamSplit::expert ? expert_bucket : bucket) +=
                  ch.tape->params[pidx].count * gdt;
            seal(r);
            bucket_task = b;
            flush_bucket(false);
          }
        }
      }
      seal(r);  // what follows waits for the pass's end
      if (gather_params && have_gather && (w.forward ? par.fsdp != FsdpMode::shard_grad_op : true))
        mem_ops.push(last, {MemCategory::other, gathered_bytes}, true);
      if (gather_params && !w.forward) {
        // Reduce-scatter of this chunk's gradients (per layer in practice; one task per pass
        // here, issued as the pass ends), every micro-batch as FSDP does without no_sync.
        double bytes = 0, expert_bytes = 0;
        for (const ParamRec& prm : ch.tape->params)
          (expert_groups && prm.split == ParamSplit::expert ? expert_bytes : bytes) += prm.count * gdt;
        if (expert_bytes > 0 && expert_dp > 1)  // the experts' over their own group
          rs.dp_tasks.push_back(expert_dp_task(CollectiveKind::reduce_scatter, expert_bytes, one(last)));
        const double t = shard_time(CollectiveKind::reduce_scatter, bytes, s);
        dp_view = hybrid_groups ? 1 : 0;
        const TaskId rs_task = sync_task(r, kDpComm, Time::from_seconds(t), one(last), nullptr, CommGroup::dp,
                                         CollectiveKind::reduce_scatter, bytes);
        if (q_of(r) == 0) res.dp_comm_total_s += t;
        if (hybrid_groups) {
          // HYBRID_SHARD: the shard group (inside the node) reduce-scatters, then each shard is
          // all-reduced across the replicas (the same shard position in every node).
          const double t2 = hybrid_collective_time(cfg, CollectiveKind::all_reduce, true, bytes / double(shard_over), s);
          dp_view = 2;
          rs.dp_tasks.push_back(sync_task(r, kDpComm, Time::from_seconds(t2), one(rs_task), nullptr, CommGroup::dp,
                                          CollectiveKind::all_reduce, bytes / double(shard_over)));
          if (q_of(r) == 0) res.dp_comm_total_s += t2;
        } else {
          rs.dp_tasks.push_back(rs_task);
        }
        dp_view = 0;
      }
      // ZeRO-2 reduce-scatters each micro-batch's gradients as its backward pass (or its W pass)
      // ends.
      const bool grads_final = !w.forward && (!zero_bubble || w.weight);
      if (grads_final && shard.grads > 1 && !shard.persistent_grads && !gather_params) flush_bucket(true);
      if (!w.forward) {
        rs.last_backward = last;
        rs.any_backward = true;
      }
      if (w.weight) continue;  // no transfer, nothing waits for it but the step's end
      rs.spans[{w.forward, w.chunk, w.mb}] = {first, last};
      rs.passes.push_back({w.forward, w.chunk, w.mb, first, last, 0, false, made_from});
      // Blocking transfers are posted in the p2p call after a step: in the interleaved steady
      // state a step is a forward and a backward pass, so the forward's send waits for both.
      const std::size_t idx = rs.passes.size() - 1;
      const std::int64_t warm_n = warmup_passes(par, s, m);
      const std::int64_t pos = std::int64_t(idx), n_passes = std::int64_t(order.size());
      const bool pair_first = par.p2p_blocking && opens_pair(v, warm_n, n_passes, pos);
      if (!pair_first) {
        if (deferred) send_of(deferred_work, deferred_pass, last);
        deferred = false;
        send_of(w, idx, last);
      } else {
        deferred = true;
        deferred_work = w;
        deferred_pass = idx;
      }
      (void)pending_first;
    }
    seal(r);
    merging = false;
    flush_bucket(true);
    // Tied embeddings across a pipeline: the first stage's word embedding and the last stage's
    // output layer are one parameter, so Megatron all-reduces its gradient between the two
    // stages after the backward passes (train_step: allreduce of word_embeddings' grad in the
    // embedding group), before the optimizer.
    if (par.pp > 1 && cfg.model.tied_embeddings && (s == 0 || s == par.pp - 1)) {
      const double bytes = double(cfg.model.vocab) * double(cfg.model.hidden) / double(par.tp) * gdt;
      const LinkChoice link = link_for(par.links, stages_cross_nodes(par, 0, par.pp - 1));
      const double t = collective_seconds(CollectiveKind::all_reduce, 2, bytes, std::max(link.bandwidth, 1.0), link.latency_s);
      const TaskId e = add_task(r, kDpComm, Time::from_seconds(t), one(rs.last_backward), nullptr);
      info[e].comm = std::uint8_t(int(CommGroup::pp) + 1);
      rs.dp_tasks.push_back(e);
    }

    // Optimizer after every gradient is reduced.
    std::vector<TaskId> opt_deps = rs.dp_tasks;
    bool first_opt = true;
    if (par.offload_optimizer) {
      double n = 0;
      for (auto& ch : rs.chunks) n += ch.planner->trainable_params();
      const double grad_bytes = n * gdt / shard.grads, param_bytes = n * dtype_bytes(tr.precision.param) / shard.grads;
      const double t = grad_bytes / std::max(par.links.pcie_bandwidth, 1.0) + n / shard.grads / par.cpu_optimizer_params_per_s +
                       param_bytes / std::max(par.links.pcie_bandwidth, 1.0);
      const TaskId off = add_task(r, kDpComm, Time::from_seconds(t), opt_deps, nullptr);
      rs.first_optimizer = off;
      rs.has_optimizer = true;
      if (r == 0) rank_total(Phase::optimizer) += t;
      opt_deps = {off};
      first_opt = false;
    }
    // The optimizer's kernels (thousands of multi_tensor_apply launches for a large model) run
    // back to back after its first: one run.
    merging = !cfg.keep_trace;
    for (auto& ch : rs.chunks) {
      if (!par.offload_optimizer) {
        for (auto& item : ch.planner->optimizer()) {
          const auto [a, b] = emit(r, item, first_opt ? std::span<const TaskId>(opt_deps) : std::span<const TaskId>());
          if (first_opt) {
            rs.first_optimizer = a;
            rs.has_optimizer = true;
            first_opt = false;
          }
          (void)b;
        }
      }
      emit(r, ch.planner->release_grads(), {});
    }
    seal(r);
    merging = false;
    if (par.zero >= 1 && par.zero <= 2 && dp_cp > 1) {
      // ZeRO-1/2: every rank updated its shard; the parameters are all-gathered (the experts'
      // over their own data-parallel group).
      double n = 0, ne = 0;
      for (auto& ch : rs.chunks) {
        n += ch.planner->trainable_params();
        if (expert_groups) ne += ch.planner->expert_trainable_params();
      }
      const TaskId after = ex.task_count() > 0 ? TaskId(ex.task_count() - 1) : 0;
      const double pb = dtype_bytes(tr.precision.param);
      const double t = collective_time(cfg, CollectiveKind::all_gather, CommGroup::dp, (n - ne) * pb, s);
      if (gather_overlapped) {
        // Overlapped with the next step's first forward (the steady state: this step's forward
        // waited on the last step's gather the same way). Split evenly over the L layers the
        // first forward passes run, the gather of layer i ends at (i + 1) g from the step's start
        // and its forward would start at o + i f, o the stage's first forward's start behind the
        // pipeline's fill (s first-chunk forwards): the forward is held up by
        // max(0, max_i ((i + 1) g - i f) - o) = max(0, max(g, L g - (L - 1) f) - o), charged
        // here, where the whole gather stood (no flows: its contention with the forward's
        // traffic is left out).
        const double te = ne > 0 && expert_dp > 1 ? expert_dp_collective_time(cfg, CollectiveKind::all_gather, ne * pb, s) : 0.0;
        const double all = t + te;
        const double layers = double(std::max<std::size_t>(1, first_forward_layers));
        const double g = all / layers, f = first_forward_s / layers;
        const double held = std::max(0.0, std::max(g, all - (layers - 1) * f) - double(s) * first_chunk_forward_s);
        const TaskId id = add_task(r, kDpComm, Time::from_seconds(held), one(after), nullptr);
        info[id].comm = std::uint8_t(int(CommGroup::dp) + 1);
        if (q_of(r) == 0) res.dp_comm_total_s += all;
      } else {
        sync_task(r, kDpComm, Time::from_seconds(t), one(after), nullptr, CommGroup::dp, CollectiveKind::all_gather, (n - ne) * pb);
        if (q_of(r) == 0) res.dp_comm_total_s += t;
        if (ne > 0 && expert_dp > 1) expert_dp_task(CollectiveKind::all_gather, ne * pb, one(after));
      }
    }
  }
  // `task` also waits for `dep`, added after both were built (dependencies are listed for compute
  // tasks only, the ones the attribution reads).
  auto add_dependency = [&](TaskId task, TaskId dep) {
    ex.add_dependency(task, dep);
    if (info[task].track == kCompute) deps_of.push(task, dep);
  };
  // Pipeline dependencies: each pass waits for its neighbour's send.
  for (int r = 0; r < nranks; ++r)
    for (const auto& [key, span] : ranks[r].spans) {
      const auto [fwd, c, mb] = key;
      auto it = sends.find({r, fwd, c, mb});
      if (it != sends.end()) {
        add_dependency(span.first, it->second);
      }
    }

  if (par.p2p_blocking && par.pp > 1 &&
      (par.schedule == PipelineSchedule::one_f_one_b || par.schedule == PipelineSchedule::interleaved)) {
    // A synchronous transfer (NCCL send/recv in batch_isend_irecv) also waits for the receiver to
    // post its receive, which it does in the p2p call that ends one of its own steps. Megatron's
    // schedules (p2p_communication.py before 2023, schedules.py): interleaved, the call after a
    // step sends that step's outputs and receives every input of the next step (warm-up
    // forwards, steady {forward, backward} pairs, cool-down backwards), and the next step starts
    // when all of them have arrived; 1F1B without interleaving combines the send and the
    // receive only in the steady state (send_forward_recv_backward, send_backward_recv_forward)
    // and posts separate calls in warm-up and cool-down, the receive after the send completes.
    for (int r = 0; r < nranks; ++r) {
      const std::vector<RankState::Pass>& ps = ranks[r].passes;
      const std::int64_t n = std::int64_t(ps.size());
      const std::int64_t warm = warmup_passes(par, stage_of(r), m);
      // Step of each pass: warm singles, steady pairs (interleaved), cool-down singles.
      std::vector<std::int64_t> step(std::size_t(n), 0), step_start;
      for (std::int64_t i = 0; i < n; ++i) {
        if (i == 0 || !opens_pair(v, warm, n, i - 1)) step_start.push_back(i);
        step[std::size_t(i)] = std::int64_t(step_start.size()) - 1;
      }
      for (std::int64_t i = 1; i < n; ++i) {
        const RankState::Pass& p = ps[std::size_t(i)];
        auto it = sends.find({r, p.forward, p.chunk, p.mb});
        if (it == sends.end()) continue;
        const std::int64_t t = step[std::size_t(i)];
        if (t == 0) continue;  // posted before the first step
        const std::int64_t prev_last = step_start[std::size_t(t)] - 1;  // last pass of the previous step
        const RankState::Pass& q = ps[std::size_t(prev_last)];
        TaskId post = q.last;
        if (v == 1 && (i <= warm || i >= n - warm) && q.sends) post = q.send;  // separate calls
        add_dependency(it->second, post);
        // The step starts when every receive of the call has completed.
        const TaskId gate = ps[std::size_t(step_start[std::size_t(t)])].first;
        if (gate != p.first) {
          add_dependency(gate, it->second);
        }
      }
    }
  }

  // By classes on the flow network each class's collective runs with the sibling groups of the
  // same classes beside it. The classes are exact if every sibling ended with it: then every GPU
  // of a class started, waited and ended each collective with its representative, and the step
  // is what simulating every GPU gives (each event of the full simulation happens, at the same
  // time, in this one). A sibling that ended apart (other links, other contention) is told here.
  // The first instant a sibling ends apart ends the run: past it the classes no longer hold (a
  // lagging sibling's next collectives would pile up behind it), and its skews are enough to split.
  std::vector<std::tuple<const CollectiveBatch*, std::size_t, std::int64_t>> skews;
  if (by_class && net)
    watch_batches(*net, [&skews, &sim](const CollectiveBatch& b, std::size_t i, Time t) {
      skews.emplace_back(&b, i, t.ps());
      sim.stop_after(sim.now());
    });
  for (int r = 0; r < nranks; ++r) seal(r);  // the runs still open get their durations
  flush_group();
  for (std::uint32_t w = 0; w < owners.size(); ++w)
    for (const CollectiveBatch* b : owners[w].claimed) net->watch(batch_links(*b), w);
  ex.on_start([&](TaskId id, Time at) {
    MemoryTracker& mem = ranks[info[id].rank].mem;
    mem_ops.for_each(id, false, [&](const MemOp& mo) { mem.alloc(mo.category, mo.bytes, at); });
    run_ops.for_each(
        id, [&](const MemoryTracker::Block& b) { mem.later_block(b, at); },
        [&](MemCategory c, double bytes, Time offset, Time floor) { mem.later(c, bytes, max(at + offset, floor)); });
  });
  ex.on_finish([&](TaskId id, Time at) {
    mem_ops.for_each(id, true, [&](const MemOp& mo) { ranks[info[id].rank].mem.free(mo.category, mo.bytes, at); });
  });
  ex.start();
  sim.run();
  // Past the run the memory changes, the launchers and the flow barriers are read no more: their
  // memory goes back to the heap, where what follows (the claims' check, the idle-time
  // attribution) takes it instead of fresh pages (a 64-GPU interleaved Mixtral step of 128
  // micro-batches on the flow network: peak 674 -> 607 MB, with the claims' lists handed over).
  mem_ops.release();
  run_ops.release();
  ex.release_launchers();
  barrier_flows.clear();  // (Barrier::flow points into it: not read past here)
  waiting_pool.clear();
  if (!skews.empty()) {
    // Split each class by how its GPUs' collectives ended (which batch, how far apart), refine
    // through the plan's groups and pipeline neighbours again, and simulate once more.
    std::map<const CollectiveBatch*, std::size_t> batch_index;
    for (std::size_t b = 0; b < class_batches.size(); ++b) batch_index.emplace(class_batches[b].first.get(), b);
    std::vector<std::int64_t> index_of(std::size_t(cfg.topology->gpu_count()), -1);
    for (std::int64_t i = 0; i < par.pp * Q; ++i) index_of[std::size_t(rank_of_index(par, i))] = i;
    std::vector<std::set<std::pair<std::size_t, std::int64_t>>> apart(std::size_t(par.pp * Q));
    for (const auto& [batch, coll, skew] : skews) {
      const auto found = batch_index.find(batch);
      SCALEOUT_CHECK(found != batch_index.end(), "a collective ended apart in a batch the step did not plan");
      for (const int g : class_batches[found->second].second[coll].ranks) apart[std::size_t(index_of[std::size_t(g)])].insert({found->second, skew});
    }
    std::map<std::pair<int, std::set<std::pair<std::size_t, std::int64_t>>>, int> ids;
    std::vector<int> finer(apart.size());
    for (std::size_t i = 0; i < apart.size(); ++i) finer[i] = ids.emplace(std::make_pair(class_of[i], std::move(apart[i])), int(ids.size())).first->second;
    SCALEOUT_CHECK(int(ids.size()) > nranks, "collectives ended apart, yet no class splits");
    tapes.classes = step_classes(cfg, finer);
    // Past three quarters of the GPUs, every GPU its own class: what simulating every GPU gives,
    // exactly, and no more rounds (each round learns only the splits of its first instant apart;
    // a review found a 256-GPU plan split all the way in 17 rounds, 4x the unfolded run's time).
    const auto count = std::size_t(*std::max_element(tapes.classes.begin(), tapes.classes.end()) + 1);
    if (4 * count > 3 * tapes.classes.size()) {
      std::vector<int> each(tapes.classes.size());
      for (std::size_t i = 0; i < each.size(); ++i) each[i] = int(i);
      tapes.classes = std::move(each);
    }
    tapes.split = true;
    return res;
  }
  SCALEOUT_CHECK(ex.all_finished(), "step simulation ended with tasks left: a dependency cycle in the schedule");
  tapes.claims_made = std::max(tapes.claims_made, claims.size());
  if (!claims.empty() || !claim_runs.empty()) {
    // Each joined collective against the traffic on its links while it ran: flows and batches run
    // apart (the network's watch), and other groups' joined collectives on shared links.
    const std::size_t n = owners.size();
    std::map<LinkId, std::vector<std::uint32_t>> link_whos;
    for (std::uint32_t w = 0; w < n; ++w)
      for (const CollectiveBatch* b : owners[w].claimed)
        for (const LinkId l : batch_links(*b)) {
          auto& on = link_whos[l];
          if (std::find(on.begin(), on.end(), w) == on.end()) on.push_back(w);
        }
    std::vector<std::set<std::uint32_t>> sharers(n);
    for (const auto& [l, on] : link_whos)
      for (const std::uint32_t a : on)
        for (const std::uint32_t b : on)
          if (a != b) sharers[a].insert(b);
    // The intervals of the groups whose links others' claims share (sharing is mutual: exactly
    // the groups another group's claims are checked against).
    auto start_of = [&ex](const Claim& c) { return max(ex.start_time(c.task) + c.offset, c.floor); };
    // (A step's replayed runs spell out a million claims and more: where no group shares a link
    // with another's, neither pass below keeps any, and neither is made.)
    std::vector<std::vector<std::pair<Time, Time>>> held(n);
    if (std::any_of(sharers.begin(), sharers.end(), [](const auto& s) { return !s.empty(); })) {
      std::vector<std::size_t> claimed_by(n, 0);
      for_each_claim([&](const Claim& c) { claimed_by[c.who] += c.dt > Time::zero() && !sharers[c.who].empty() ? 1 : 0; });
      for (std::uint32_t w = 0; w < n; ++w) held[w].reserve(claimed_by[w]);
      for_each_claim([&](const Claim& c) {
        if (c.dt <= Time::zero() || sharers[c.who].empty()) return;
        const Time at = start_of(c);
        held[c.who].emplace_back(at, at + c.dt);
      });
    }
    // Intervals sorted by start, with a running maximum of their ends: a claim [a, b) meets them
    // iff some interval that starts before b reaches past a.
    struct Sorted {
      std::vector<std::pair<Time, Time>> iv;
      std::vector<Time> reach;
    };
    // Mostly a few runs already in order (a group's claims, member by member; what the network
    // saw, as flows ended): merged run by run, sorted outright past a few.
    auto in_order = [](auto& in) {
      std::vector<std::size_t> ends;
      for (std::size_t i = 1; i < in.size() && ends.size() <= 8; ++i)
        if (in[i] < in[i - 1]) ends.push_back(i);
      if (ends.size() > 8) {
        std::sort(in.begin(), in.end());
      } else {
        for (std::size_t k = 0; k < ends.size(); ++k)
          std::inplace_merge(in.begin(), in.begin() + std::ptrdiff_t(ends[k]),
                             k + 1 < ends.size() ? in.begin() + std::ptrdiff_t(ends[k + 1]) : in.end());
      }
    };
    auto sorted_of = [&in_order](std::vector<std::pair<Time, Time>> in) {
      Sorted out;
      in_order(in);
      out.reach.resize(in.size());
      for (std::size_t i = 0; i < in.size(); ++i) out.reach[i] = i == 0 ? in[i].second : max(out.reach[i - 1], in[i].second);
      out.iv = std::move(in);
      return out;
    };
    std::vector<std::unique_ptr<Sorted>> held_sorted(n);  // groups' claims, sorted once when needed
    std::vector<std::unique_ptr<Sorted>> busy_sorted(n);  // what the network saw on their links
    std::vector<std::vector<const Sorted*>> others(n);
    for (std::uint32_t w = 0; w < n; ++w) {
      if (net->busy(w).empty() && sharers[w].empty()) continue;
      // (Each list is handed over, not copied: after the run nothing else reads them.)
      busy_sorted[w] = std::make_unique<Sorted>(sorted_of(net->take_busy(w)));
      for (const std::uint32_t o : sharers[w]) {
        if (!held_sorted[o]) held_sorted[o] = std::make_unique<Sorted>(sorted_of(std::move(held[o])));
        others[w].push_back(held_sorted[o].get());
      }
    }
    // A group stops joining from the lowest pass of its claims that met something: the same
    // whichever order they are asked in. Its claims come in runs rising by their end (each member
    // rank's, in the order it made them); along a run each list is swept with a pointer (the
    // intervals that start before a claim's end only grow as that end does), found afresh by a
    // binary search where a run begins. One pass over the claims sweeps every group's at once.
    std::vector<std::int64_t> from(n, std::numeric_limits<std::int64_t>::max());
    struct Sweep {
      std::vector<const Sorted*> lists;
      std::vector<std::size_t> before;  // intervals starting before the claim's end
      Time until;                       // the group's previous claim's end
      bool begun = false;
    };
    std::vector<Sweep> sweeps(n);
    for (std::uint32_t w = 0; w < n; ++w) {
      if (!busy_sorted[w]) continue;
      sweeps[w].lists.push_back(busy_sorted[w].get());
      sweeps[w].lists.insert(sweeps[w].lists.end(), others[w].begin(), others[w].end());
      sweeps[w].before.assign(sweeps[w].lists.size(), 0);
    }
    for_each_claim([&](const Claim& c) {
      if (c.dt <= Time::zero() || !busy_sorted[c.who]) return;
      const std::uint32_t w = c.who;
      Sweep& sw = sweeps[w];
      const Time at = start_of(c), until = at + c.dt;
      if (!sw.begun || until < sw.until)  // a run begins
        for (std::size_t i = 0; i < sw.lists.size(); ++i)
          sw.before[i] = std::size_t(std::partition_point(sw.lists[i]->iv.begin(), sw.lists[i]->iv.end(),
                                                          [until](const std::pair<Time, Time>& x) { return x.first < until; }) -
                                     sw.lists[i]->iv.begin());
      sw.begun = true;
      sw.until = until;
      if (c.pass >= from[w]) return;
      for (std::size_t i = 0; i < sw.lists.size(); ++i) {
        const Sorted& x = *sw.lists[i];
        std::size_t& b = sw.before[i];
        while (b < x.iv.size() && x.iv[b].first < until) ++b;
        if (b > 0 && x.reach[b - 1] > at) {
          from[w] = c.pass;
          break;
        }
      }
    });
    bool barred_more = false;
    for (std::uint32_t w = 0; w < n; ++w) {
      if (from[w] == std::numeric_limits<std::int64_t>::max()) continue;
      auto [it, fresh] = tapes.join_until.try_emplace(owners[w].key, from[w]);
      if (fresh || from[w] < it->second) {
        it->second = from[w];
        barred_more = true;
      }
    }
    if (barred_more) {
      // Simulate again with those groups launching their collectives from there on; past a few
      // rounds (each learns from the first traffic it meets), none joins.
      if (++tapes.join_rounds > 4) tapes.flow_joins_off = true;
      tapes.split = true;
      return res;
    }
  }
  for (RankState& rs : ranks) rs.mem.settle();
  if (net) {
    // On the network, a transfer lasts what the flows made of it (the collectives that joined runs
    // are in the totals already).
    res.dp_comm_total_s = res.pp_comm_s = 0;
    for (TaskId id = 0; id < info.size(); ++id) {
      if (info[id].comm == 0) continue;
      const double d = (ex.finish_time(id) - ex.start_time(id)).seconds();
      const int r = info[id].rank;
      const auto g = static_cast<CommGroup>(info[id].comm - 1);
      switch (g) {
        case CommGroup::tp: case CommGroup::cp: case CommGroup::ep: if (r == 0) comm_total(g) += d; break;
        case CommGroup::dp: if (q_of(r) == 0) res.dp_comm_total_s += d; break;
        case CommGroup::pp: if (q_of(r) == 0) res.pp_comm_s += d; break;
      }
    }
  }

  Time end = Time::zero();
  std::uint64_t fp = 1469598103934665603ull;
  auto mix = [&fp](std::int64_t x) { fp = hash_word(fp, std::uint64_t(x)); };  // (a word at a time: 3 % of a 16-rank step byte-wise)
  for (TaskId id = 0; id < ex.task_count(); ++id) {
    const StreamId st = ex.stream_of(id);
    if (st >= res.stream_busy_s.size()) res.stream_busy_s.resize(std::size_t(st) + 1, 0.0);
    res.stream_busy_s[st] += (ex.finish_time(id) - ex.start_time(id)).seconds();
    end = max(end, ex.finish_time(id));
    mix(ex.start_time(id).ps());
    mix(ex.finish_time(id).ps());
  }
  res.fingerprint = fp;
  res.events = sim.events_executed();
  res.step_time_s = end.seconds();

  // Unfolded: how long each member waited in each collective for the last one to arrive.
  // The longest wait names whom it waited for (of equal waits, the earliest, then the lowest GPU).
  Time longest_at = Time::max();
  int longest_rank = 0;
  auto waited = [&](int rank, double wait, int last_rank, Time at) {
    if (rank == 0) res.peer_wait_s += wait;
    if (wait > res.max_peer_wait_s || (wait == res.max_peer_wait_s && wait > 0 &&
                                       (at < longest_at || (at == longest_at && global_rank(last_rank) < res.waited_for_rank)))) {
      res.max_peer_wait_s = wait;
      longest_at = at;
      longest_rank = rank;
      res.waited_for_rank = global_rank(last_rank);
    }
  };
  for (std::size_t bi = 0; bi < barrier_list.size(); ++bi) {
    const Barrier& bar = barrier_list[bi];
    const TaskId b = bar.task;
    Time last = Time::zero();
    int last_rank = 0;
    arrivals_of(bar, [&](Arrival& a) {
      a.at = a.release;
      for (std::uint32_t i = a.after_begin; i < a.after_end; ++i) a.at = max(a.at, ex.finish_time(after_pool[i]));
      if (a.at >= last) {
        last = a.at;
        last_rank = a.rank;
      }
    });
    arrivals_of(bar, [&](const Arrival& a) { waited(a.rank, (ex.finish_time(b) - a.at).seconds(), last_rank, a.at); });
  }
  if (tapes.bindings) {
    for (const auto& [key, gb] : group_barriers) {
      std::vector<std::int64_t>& out = res.arrivals_ps.emplace_back();
      std::vector<std::uint32_t>& at = res.arrivals_at.emplace_back();
      for (const std::uint32_t bi : gb.by_occurrence) {
        at.push_back(std::uint32_t(out.size()));
        const std::size_t head = out.size();
        out.push_back(0);
        out.push_back(ex.finish_time(barrier_list[bi].task).ps());
        arrivals_of(barrier_list[bi], [&](const Arrival& a) {
          ++out[head];
          out.push_back(std::int64_t(a.after_end - a.after_begin) + 1);
          out.push_back(a.release.ps());
          for (std::uint32_t i = a.after_begin; i < a.after_end; ++i) out.push_back(ex.finish_time(after_pool[i]).ps());
        });
      }
    }
  }

  // Idle gaps on each compute stream, attributed to what the next task waited for last; a wait
  // at a collective's barrier is the rank's own lateness up to its arrival, the peers' after.
  std::vector<double> host_gap(nranks, 0), bubble(nranks, 0), dp_gap(nranks, 0), peer_gap(nranks, 0);
  std::vector<Time> prev_end(nranks, Time::zero());
  std::function<int(TaskId, int, Time&)> cause_of = [&](TaskId id, int r, Time& latest) {
    int cause = kHost;
    latest = ex.release(id);  // its launch
    deps_of.for_each(id, [&](TaskId d) {
      if (ex.finish_time(d) >= latest) {
        latest = ex.finish_time(d);
        cause = info[d].track;
        if (cause == kBarrier) {
          // Ready before its peers: waiting for them; else whatever made this rank late.
          const Barrier& bar = barrier_list[barrier_of_task[d] - 1];
          const Arrival* own = nullptr;
          arrivals_of(bar, [&](const Arrival& a) {
            if (a.rank == r) own = &a;
          });
          const Time mine = own ? own->at : Time::zero();
          if (mine >= latest) {
            cause = kHost;
            if (own) {
              Time inner = own->release;
              for (std::uint32_t i = own->after_begin; i < own->after_end; ++i)
                if (const TaskId e = after_pool[i]; ex.finish_time(e) >= inner) {
                  inner = ex.finish_time(e);
                  cause = info[e].track;
                }
            }
          }
        }
      }
    });
    return cause;
  };
  std::vector<Time> dp_end(std::size_t(nranks), Time::zero());  // each rank's data-parallel stream's last finish
  if (tapes.bindings) {
    res.tasks_ps.resize(std::size_t(nranks));
    res.tasks_at.resize(std::size_t(nranks));
  }
  for (TaskId id = 0; id < ex.task_count(); ++id) {
    if (info[id].track == kDpComm) dp_end[std::size_t(info[id].rank)] = max(dp_end[std::size_t(info[id].rank)], ex.finish_time(id));
    if (info[id].track != kCompute) continue;
    const int r = info[id].rank;
    const Time st = ex.start_time(id);
    if (tapes.bindings) {
      std::vector<std::int64_t>& out = res.tasks_ps[std::size_t(r)];
      res.tasks_at[std::size_t(r)].push_back(std::uint32_t(out.size()));
      // (By the track of what it waited for: a kernel may wait for one task per micro-batch.)
      out.push_back(ex.release(id).ps());
      out.push_back(prev_end[r].ps());
      const std::size_t by_track = out.size();
      out.resize(by_track + kBarrier + 1, -1);
      deps_of.for_each(id, [&](TaskId d) {
        std::int64_t& x = out[by_track + info[d].track];
        x = std::max(x, ex.finish_time(d).ps());
      });
    }
    const double gap = (st - prev_end[r]).seconds();
    prev_end[r] = max(prev_end[r], ex.finish_time(id));
    // A run's kernels waiting for their launches inside it.
    if (ex.finish_floor(id) > Time::zero()) host_gap[r] += (ex.finish_time(id) - st - ex.duration(id)).seconds();
    if (gap <= 0) continue;
    Time latest;
    const int cause = cause_of(id, r, latest);
    (cause == kHost ? host_gap : cause == kDpComm ? dp_gap : cause == kBarrier ? peer_gap : bubble)[r] += gap;
  }
  // Idle at the end: the data-parallel traffic a rank still runs after every GPU's last kernel
  // (ZeRO's parameter all-gather after the optimizer, a reduction the optimizer does not wait
  // for) is exposed data-parallel time; the rest is the pipeline's drain (or, with one stage, the
  // host's).
  Time compute_end = Time::zero();
  for (int r = 0; r < nranks; ++r) compute_end = max(compute_end, prev_end[r]);
  for (int r = 0; r < nranks; ++r) {
    const Time tail_from = max(prev_end[r], compute_end), dp_until = dp_end[std::size_t(r)] < end ? dp_end[std::size_t(r)] : end;
    const double dp_tail = dp_until > tail_from ? (dp_until - tail_from).seconds() : 0.0;
    dp_gap[r] += dp_tail;
    bubble[r] += (end - prev_end[r]).seconds() - dp_tail;
  }
  // Paced lock-steps: a member's wait for its lead inside its run, which the run's length holds
  // as if busy (the lead's kernels' time beyond its own), and which its own host wait (above)
  // counted as the lead's. Told as a barrier would: the gap from its last kernel to the collective
  // is a peer wait if it was ready (kernels done, collective launched) before the lead, else the
  // host's; the wait in the collective runs from when it was ready.
  for (std::size_t wi = 0; wi < paced_waits.size(); ++wi) {
    const PacedWait& w = paced_waits[wi];
    const Time start = ex.start_time(w.task);
    const Time done = max(start + w.busy, w.floor), mine = max(done, w.launched);
    const Time lead = max(max(start + w.lead_busy, w.lead_floor), w.launched);
    waited(w.rank, (lead - mine).seconds(), w.lead, mine);
    const double gap = mine < lead ? (lead - done).seconds() : 0.0;
    peer_gap[std::size_t(w.rank)] += gap;
    host_gap[std::size_t(w.rank)] += (w.lead_busy - w.busy).seconds() - gap;
  }
  if (res.max_peer_wait_s > cfg.faults.nccl_timeout_s) {
    res.failed = true;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "NCCL timeout: GPU %lld waited %.1f s in a collective for GPU %lld (timeout %.3g s); the watchdog aborts "
                  "the job %.1f s into the step",
                  (long long)global_rank(longest_rank), res.max_peer_wait_s, (long long)res.waited_for_rank,
                  cfg.faults.nccl_timeout_s, longest_at.seconds() + cfg.faults.nccl_timeout_s);
    res.failure = buf;
  }

  // A pipelined step's windows (or a slow GPU's without a pipeline, analytic network): each
  // simulated rank's pass starts and shapes (simulate_step's check of its windows, settled_in).
  if (tapes.passes) {
    res.pass_starts_ps.resize(std::size_t(nranks));
    res.pass_shapes.resize(std::size_t(nranks));
    for (int r = 0; r < nranks; ++r) {
      const auto& passes = ranks[r].passes;
      for (std::size_t i = 0; i < passes.size(); ++i) {
        const std::int64_t at = ex.start_time(passes[i].first).ps();
        res.pass_starts_ps[std::size_t(r)].push_back(at);
        // Every task made for the pass, its start and end from the pass's start.
        const TaskId to = i + 1 < passes.size() ? passes[i + 1].made_from : passes[i].made_from;
        std::uint64_t h = 1469598103934665603ull;
        for (TaskId t = passes[i].made_from; t < to; ++t)
          for (const std::int64_t x : {ex.start_time(t).ps() - at, ex.finish_time(t).ps() - at})
            h = hash_word(h, std::uint64_t(x));
        res.pass_shapes[std::size_t(r)].push_back(h);
      }
    }
  }
  int busiest = 0;
  for (int r = 0; r < nranks; ++r) {
    if (q_of(r) == 0) res.rank_peak_bytes.push_back(ranks[r].mem.peak());
    else res.rank_peak_bytes[std::size_t(stage_of(r))] = std::max(res.rank_peak_bytes[std::size_t(stage_of(r))], ranks[r].mem.peak());
    if (ranks[r].mem.peak() > ranks[busiest].mem.peak()) busiest = r;
  }
  res.busiest_rank = int(stage_of(busiest));
  res.simulated_ranks = nranks;
  for (int r = 0; r < nranks; ++r)
    res.rank_names.push_back(plain_fold ? "stage " + std::to_string(stage_of(r)) + " (as GPU " + std::to_string(global_rank(r)) + ")"
                             : "GPU " + std::to_string(global_rank(r)) + " (stage " + std::to_string(stage_of(r)) +
                                   (rank_gpus[std::size_t(r)] > 1 ? ", and " + std::to_string(rank_gpus[std::size_t(r)] - 1) + " like it)" : ")"));
  // Time breakdown of the first stage (the one that starts first and waits longest).
  const int r0 = 0;
  res.compute_s = rank_totals[0];
  res.recompute_s = rank_totals[1];
  res.optimizer_s = rank_totals[2];
  res.tp_comm_s = rank_tp;
  res.cp_comm_s = rank_cp;
  res.ep_comm_s = rank_ep;
  res.dp_comm_exposed_s = dp_gap[r0];
  res.peer_wait_exposed_s = peer_gap[r0];
  res.host_stall_s = host_gap[r0];
  for (int r = 0; r < nranks; ++r) {
    res.host_clock_max_s = std::max(res.host_clock_max_s, host_clock[std::size_t(r)].seconds());
    res.host_gap_total_s += host_gap[std::size_t(r)];
    if (!res.pass_starts_ps.empty()) {
      res.host_end_ps.push_back(host_clock[std::size_t(r)].ps());
      res.host_gap_s.push_back(host_gap[std::size_t(r)]);
    }
  }
  res.pipeline_bubble_s = par.pp > 1 ? bubble[r0] : 0;
  if (par.pp == 1) res.host_stall_s += bubble[r0];
  res.exposed_comm_s = res.tp_comm_s + res.cp_comm_s + res.ep_comm_s + res.dp_comm_exposed_s + res.peer_wait_exposed_s;

  const double tokens = double(tr.global_batch) * double(tr.seq_len);
  res.tokens_per_s = res.step_time_s > 0 ? tokens / res.step_time_s : 0;
  res.model_flops_per_step = model_flops(cfg.model, tokens, tr.seq_len);
  const double gpus = double(par.gpus());
  res.model_tflops_per_gpu = res.step_time_s > 0 ? res.model_flops_per_step / res.step_time_s / gpus / 1e12 : 0;
  const double peak = cfg.gpu.peak(Dtype::bf16).value > 0 ? cfg.gpu.peak(Dtype::bf16).value : cfg.gpu.peak(Dtype::fp16).value;
  res.mfu = peak > 0 ? res.model_tflops_per_gpu * 1e12 / peak : 0;
  res.peak_bytes = ranks[busiest].mem.peak();
  res.peak_breakdown = ranks[busiest].mem.peak_breakdown();
  res.capacity_bytes = cfg.gpu.memory.value;
  res.required_bytes = required_bytes_of(cfg, res.peak_bytes);
  res.fits = res.required_bytes <= res.capacity_bytes;
  // The model's parameters: each stage's GPUs hold a TP rank's slice of the linears and the
  // vocabulary, a copy of the norms and the router, and an EP rank's experts (sliced along TP).
  double trainable = 0, total = 0;
  const double ep_n = double(std::max<std::int64_t>(1, par.ep));
  for (int r = 0; r < nranks; ++r)
    for (auto& ch : ranks[r].chunks) {
      if (q_of(r) != 0) break;
      for (const ParamRec& prm : ch.tape->params) {
        const double n = prm.count * (prm.split == ParamSplit::replicated  ? 1.0
                                      : prm.split == ParamSplit::expert    ? double(par.tp) * ep_n
                                      : prm.split == ParamSplit::tied_copy ? 0.0
                                                                           : double(par.tp));
        total += n;
        if (prm.trainable) trainable += n;
      }
    }
  res.params_trainable = trainable;
  res.params_total = total;
  if (cfg.keep_trace) {
    for (TaskId id = 0; id < ex.task_count(); ++id) {
      const Kernel* k = id < kernel_of.size() ? kernel_of[id] : nullptr;
      const bool pp_send = info[id].track >= kSendFwd || (info[id].track == kCompute && info[id].comm == std::uint8_t(int(CommGroup::pp) + 1));
      std::string name = k ? k->name : info[id].track == kDpComm ? "dp_comm" : pp_send ? "pp_send" : "memory";
      if (info[id].track == kBarrier || (info[id].track == kCompute && !k && ex.finish_time(id) == ex.start_time(id))) continue;
      res.trace.push_back({std::move(name), info[id].rank, info[id].track, ex.start_time(id), ex.finish_time(id)});
    }
    res.trace.insert(res.trace.end(), host_spans.begin(), host_spans.end());
    res.memory_timeline = ranks[0].mem.timeline();
  }
  return res;
}

}  // namespace

namespace {
StepResult simulate_step_with(const StepConfig& cfg, TapeCache& tapes) {
  for (;;) {
    tapes.split = false;
    StepResult r = simulate_step_round(cfg, tapes);
    if (!tapes.split) return r;
  }
}
}  // namespace

namespace {
// The lists a step's windows record for their checks (settled_in, settled_pair, same_bindings),
// read by nobody past them: a result handed out keeps none (a plan search holds thousands).
StepResult without_window_lists(StepResult r) {
  r.pass_starts_ps = {};
  r.pass_shapes = {};
  r.host_end_ps = {};
  r.host_gap_s = {};
  r.arrivals_ps = {};
  r.arrivals_at = {};
  r.tasks_ps = {};
  r.tasks_at = {};
  return r;
}
}  // namespace

StepResult simulate_step_exact(const StepConfig& cfg) {
  TapeCache tapes;
  return without_window_lists(simulate_step_with(cfg, tapes));
}

std::vector<StepResult> simulate_steps_exact(const StepConfig& cfg, std::span<const std::int64_t> micro_batches) {
  TapeCache tapes;
  std::vector<StepResult> out;
  for (const std::int64_t m : micro_batches) {
    StepConfig c = cfg;
    c.training.global_batch = m * std::max<std::int64_t>(1, cfg.training.micro_batch * cfg.parallel.dp);
    out.push_back(without_window_lists(simulate_step_with(c, tapes)));
  }
  return out;
}

namespace {

std::int64_t micro_batches_of(const StepConfig& cfg) {
  return std::max<std::int64_t>(1, cfg.training.global_batch /
                                       std::max<std::int64_t>(1, cfg.training.micro_batch * cfg.parallel.dp));
}

// The first window w a pipelined step is extrapolated from: past the pipeline's warm-up and a
// multiple of pp for the interleaved schedule.
std::int64_t window_of(const StepConfig& cfg) {
  const ParallelPlan& p = cfg.parallel;
  const std::int64_t unit = p.schedule == PipelineSchedule::interleaved ? std::max<std::int64_t>(1, p.pp) : 1;
  const std::int64_t want = std::max<std::int64_t>(2 * p.pp, 16);
  return (want + unit - 1) / unit * unit;
}

// The three step lengths (micro-batches) simulated to extend a long accumulation linearly, or
// {0, 0, 0}: simulate every micro-batch.
struct Windows {
  std::int64_t a = 0, b = 0, c = 0;  // a < b < c; growth over b..c must be (c - b) / (b - a) times that over a..b
};

// Windows later than `win` for a second look, where the first found a transient that may have
// settled since (or {0, 0, 0}: none). Without a pipeline a start-up effect can outlast the first
// windows (a random 64-GPU plan, TP 4 x CP 2 x DP 8 with a slow GPU on the flow network: the
// step grows by the same 0.29151 s a micro-batch from 2 on, but GPU 0's exposed waits for its
// peers are 14.5 us over 2 micro-batches, 3.95 us over 3 and 4, none from 5 on, as the slow GPU's
// lag comes to hide them; its 128 micro-batches were all simulated, 0.35 s). The second windows
// start at twice the first's end, spaced alike, and only where both looks together still simulate
// under half the micro-batches. Pipelines keep their single look: their windows already sit past
// the warm-up, and their transients are the straggler lags that settle late.
Windows later_windows(const StepConfig& cfg, const Windows& win) {
  if (cfg.parallel.pp > 1) return {};
  const std::int64_t start = 2 * win.c;
  const Windows later{start, start + win.b - win.a, start + win.c - win.a};
  return 2 * (win.a + win.b + win.c + later.a + later.b + later.c) < micro_batches_of(cfg) ? later : Windows{};
}

Windows windows_of(const StepConfig& cfg) {
  if (!cfg.extrapolate) return {};
  const std::int64_t m = micro_batches_of(cfg);
  bool stall = false;
  for (const Straggler& st : cfg.faults.stragglers) stall = stall || st.stall_s > 0;
  // Without a pipeline every micro-batch between the first (which allocates) and the last (which
  // starts the gradient reduction, DDP's no_sync) is the same period, so 2, 3 and 4 micro-batches
  // differ by exactly one of them each. A one-time stall is not periodic.
  // On the flow network, though, data-parallel traffic in every micro-batch (ZeRO-2's
  // reduce-scatters, ZeRO-3's and FSDP's gathers) contends with the next micro-batch's collectives,
  // and how they overlap can drift after many micro-batches of an exact period (a random
  // comparison: a ZeRO-3 plan grew by the same time per micro-batch from 2 to 9, then by 0.1-1 %
  // more each, 0.5 % short over 48; a ZeRO-2 + EP plan 0.14 % short): such plans put the
  // third window 13 micro-batches past the second, where such a drift shows as unequal growth
  // (the pipelines' windows, past 16 and 32 further, also caught both but cost 81 micro-batches
  // against 21: a fully sharded Llama-3-70B DP-64 step of 128 micro-batches took 80 ms, 30 ms now).
  const ParallelPlan& par = cfg.parallel;
  const bool dp_every_micro_batch = par.dp * par.cp > 1 && (par.zero >= 2 || par.fsdp != FsdpMode::none);
  // Under ZeRO-2 a slow GPU's healthy peers run ahead of it: their data-parallel streams'
  // reduce-scatters queue up, nothing in the next micro-batch waits for them, until the lead meets
  // some other bound (a random comparison: ZeRO-2 over DP 8, one GPU 10 % slow, the longest wait
  // for it grew by 0.58 ms a micro-batch from 2 to 5 and not at all from 6 on; extended, 55 ms
  // instead of 2.8 ms). Simulated exactly, as under a pipeline (below). ZeRO-3 and FSDP gather
  // every layer's weights from the whole group before its forward, which holds the lead to a
  // layer: their steps take the second look (simulate_step), and 6,009 random plans with slow GPUs
  // (1,086 of them ZeRO-3 or FSDP without a pipeline) were extended exactly.
  const bool slow = slow_gpu(cfg);
  if (par.pp == 1 && slow && dp_every_micro_batch && par.zero == 2 && par.fsdp == FsdpMode::none) return {};
  // Without a pipeline on the analytic network, as a slow pipeline's (below): one window of
  // kSettleWindow (8) micro-batches where the state must have turned periodic (a transient of a few, two periods
  // alike, then the end's two) and a shorter one past the transient that simulate_step finds there.
  // Every GPU's timeline is then a max-plus system of its kernels, its host's launches and its
  // groups' rendezvous: once every rank's passes repeat with one shift and their tasks alike, they
  // do to the end (settled_in, settled_pair; same_bindings where replicas keep their own paces).
  // The two looks below simulate 2-4 and 8-10 micro-batches and pay only past 72; this pays from
  // 16 (an FSDP Mixtral, TP 8 x DP 8 with EP 2, one GPU 20 % slow, 32 micro-batches: 3 and 8
  // simulated instead of 32, 0.09 -> 0.05 s). Not on the flow network, where data-parallel
  // traffic that meets the next micro-batch's can drift after many periods alike (above).
  constexpr std::int64_t kSettleWindow = 8;
  if (par.pp == 1 && slow && !stall && !cfg.topology)
    return m >= 2 * kSettleWindow ? Windows{0, 0, kSettleWindow} : Windows{};
  // With a slow GPU both looks are taken (simulate_step): where the second does not pay, none.
  auto first_look = [&](Windows w) { return slow && later_windows(cfg, w).c == 0 ? Windows{} : w; };
  if (par.pp == 1 && !stall && cfg.topology && dp_every_micro_batch) return m > 24 ? first_look({2, 3, 16}) : Windows{};
  // On the flow network without faults, a step without a pipeline and without data-parallel
  // traffic in every micro-batch replays its micro-batches past the first from recorded runs, their
  // collectives joined (a few events each), while its end runs the gradient reduction's buckets as
  // flows over the fabric: windows pay that end three times, which costs more than the step's own
  // micro-batches (callgrind, extrapolated against every micro-batch: the six such 64-GPU plans of
  // the seed 1-2 surveys 1.56-2.21x at 32-128 micro-batches, 1.00-1.15x for three of them at 512;
  // 46 random plans of 4-32 GPUs 0.73-1.60x, 1.02x geometric mean). Simulated in full below 1,024
  // micro-batches. (On the analytic network the windows won on random plans, 0.82x, and lost on
  // the surveys' 64-GPU ones, 1.04-1.23x: kept. With a slow GPU or link, or data-parallel traffic
  // every micro-batch, a micro-batch costs more and the windows win: 0.17-0.99x.)
  if (par.pp == 1 && cfg.topology && !cfg.topology->has_faults() && !slow && !stall && !dp_every_micro_batch && m < 1024)
    return {};
  // Three windows of 2, 3 and 4 micro-batches simulate 9 and pay the step's end (the gradient
  // reduction, the optimizer) three times: where that is not fewer micro-batches than the step's
  // own, they cost more than simulating it (callgrind, the seed 1-2 surveys' steps of 8
  // micro-batches without a pipeline: 1.12-2.03x the instructions of the full step; a
  // Llama-3-70B TP 4 x DP 16 with a slow NIC 926M against 455M).
  if (par.pp == 1 && !stall && m > 2 + 3 + 4) return first_look({2, 3, 4});
  // With a pipeline: the first window past the warm-up (w), the second a period of the schedule
  // later (pp micro-batches: the interleaved schedule's period, a multiple of anything shorter),
  // the third about 2w further, so that a host clock or a straggler still settling after w shows
  // as unequal growth (review finding: windows only pp apart missed a host stall that stopped
  // growing at 34 micro-batches). The first window is placed so that m lies a whole number of
  // periods past the last: a growth that alternates within the period extends exactly (where the
  // third's passes show the state settled before the first or second window's cool-down, those
  // two alone are extended and the other is not simulated: simulate_step). Under a
  // pipeline a straggler's lag hides in the schedule's slack for many micro-batches before its
  // peers wait (review finding: -0.9 % at 200), and a GPU's wait can change slope after 80-100
  // micro-batches (session 19: Llama TP 1 x PP 2 x DP 2, one GPU 5 % slow): windows that grew
  // alike do not show either. Such steps are extended only where every simulated rank has settled
  // into the schedule's period, which simulate_step checks pass by pass (settled_in).
  // GPipe runs every forward, then every backward: no period repeats, and as micro-batches are
  // added the phase that sets the pace can change (a random comparison: 0.2-1.5 % short on plans
  // whose windows grew alike, both networks); simulated exactly.
  if (cfg.parallel.schedule == PipelineSchedule::gpipe) return {};
  // Nor a schedule run again per share of the micro-batches: a step is not one steady state.
  if (cfg.parallel.pipeline_runs > 1) return {};
  // Nor a pipeline with data-parallel traffic in every micro-batch: its gathers and reduce-scatters
  // can settle into their steady state long after windows that grew alike (random comparisons:
  // ZeRO-3 + EP over PP 4, growth per micro-batch 4.793 ms to 64, 4.807 from 96: extended 0.2 %
  // short; FSDP + CP over an interleaved PP 2: the step right but 0.034 s of bubble counted as
  // exposed data-parallel time).
  if (dp_every_micro_batch) return {};
  const std::int64_t w = window_of(cfg), d = std::max<std::int64_t>(1, cfg.parallel.pp);
  // With a slow GPU: one window of at least 2w and w + 4 pp (room for a transient of about w, two
  // periods, then the cool-down's two) a whole number of periods short of m, where the state must
  // have turned periodic, and a shorter one simulate_step places past the transient it finds there
  // (settled_in); where the longer alone costs more than half the step, none. Replicas joined
  // only by the reduction at the end keep their own paces until it: each must have settled into
  // its own period, and their arrivals there must keep what bound them (simulate_step). Not on the
  // flow network, where they share links and how their traffic meets moves with the lead: of four
  // such survey plans (tools/check/speed_survey.py, seeds 1-2) three settled, yet their steps
  // grew 0.0002-0.01 % off the slowest replica's shift, and the windows cost more than they saved.
  if (slow && !stall && !replicas_coupled(par) && cfg.topology) return {};
  if (slow && !stall) {
    const std::int64_t least = std::max(2 * w, w + 4 * d);
    const std::int64_t c = m >= least ? least + (m - least) % d : m;
    return 2 * c <= m ? Windows{0, 0, c} : Windows{};
  }
  if (!stall && m > 3 * w + 3 * d) {
    const std::int64_t a = w + (m - w) % d, n = std::max<std::int64_t>(2, (2 * w + d - 1) / d);
    if (3 * a + (n + 1) * d < m) return {a, a + d, a + n * d};
  }
  return {};
}

}  // namespace

std::int64_t simulated_ranks(const StepConfig& cfg) {
  const ParallelPlan& p = cfg.parallel;
  if (uses_symmetry_classes(cfg)) {
    const std::vector<int> c = step_classes(cfg);
    return c.empty() ? 0 : std::int64_t(*std::max_element(c.begin(), c.end())) + 1;
  }
  return cfg.fold ? p.pp : p.gpus();
}

std::int64_t max_simulated_ranks(const StepConfig& cfg) {
  return uses_symmetry_classes(cfg) && cfg.topology ? cfg.parallel.gpus() : simulated_ranks(cfg);
}

std::int64_t simulated_micro_batches(const StepConfig& cfg) {
  const Windows win = windows_of(cfg);
  if (win.c == 0) return micro_batches_of(cfg);
  // A slow GPU's step takes the second look too (simulate_step).
  const Windows later = cfg.parallel.pp == 1 && slow_gpu(cfg) ? later_windows(cfg, win) : Windows{};
  return later.c > 0 ? later.c : win.c;
}

namespace {

// Between a window and a longer one (their results x, y): idle time is a sum of non-negative gaps,
// so in the steady state each window adds some of every kind or none, and a kind that shrank is a
// lag still being taken up by the schedule's slack (a random comparison found FSDP pipelines whose
// bubble shrank per period until their slope broke); and (streams) no stream was given more work
// than the step grew by, or it falls further behind each period until what waits for it sets the
// pace (the comparison found ZeRO-2 extended 0.5 % short).
bool keeps_pace(const StepResult& x, const StepResult& y, double tol, bool streams) {
  for (auto field : {&StepResult::pipeline_bubble_s, &StepResult::host_stall_s, &StepResult::dp_comm_exposed_s,
                     &StepResult::peer_wait_exposed_s, &StepResult::peer_wait_s, &StepResult::exposed_comm_s})
    if (y.*field - x.*field < -tol) return false;
  if (!streams) return true;
  if (y.stream_busy_s.size() != x.stream_busy_s.size()) return false;
  const double step_growth = y.step_time_s - x.step_time_s;
  for (std::size_t i = 0; i < y.stream_busy_s.size(); ++i)
    if (y.stream_busy_s[i] - x.stream_busy_s[i] > step_growth + tol) return false;
  return true;
}

// Whether three windows (win.a < win.b < win.c micro-batches) grew alike: the necessary
// conditions of a steady state that simulate_step checks before extending them.
bool grew_alike(const Windows& win, const StepResult& w0, const StepResult& a, const StepResult& r) {
  const double ratio = double(win.c - win.b) / double(win.b - win.a);
  auto same_growth = [ratio](double x0, double x1, double x2) {
    return std::fabs((x2 - x1) - ratio * (x1 - x0)) <= 1e-9 * std::max({1.0, std::fabs(x2), std::fabs(x1)});
  };
  // The host threads run ahead at their own rate (their clocks are sums of launch costs). One
  // slower than the step (its clock grew more than the step did) will hold the GPUs up more and
  // more; one faster that still held them up in the windows is catching up on a lead it will
  // keep growing: either way the windows are not yet the steady state (a random comparison found
  // small host-bound plans extended 0.5-2.6 % short).
  const double step_growth = r.step_time_s - a.step_time_s;
  const double host_growth = r.host_clock_max_s - a.host_clock_max_s;
  const double tol = 1e-9 * std::max(1.0, std::fabs(r.step_time_s));
  if (host_growth > step_growth + tol) return false;
  if (host_growth < step_growth - tol && r.host_gap_total_s - a.host_gap_total_s > tol) return false;
  // Likewise the streams and every kind of idle time (keeps_pace: a data-parallel stream whose
  // reduce-scatters outlast the micro-batch falls further behind each period).
  if (!keeps_pace(w0, a, tol, false) || !keeps_pace(a, r, tol, true)) return false;
  if (!same_growth(w0.step_time_s, a.step_time_s, r.step_time_s) ||
      !same_growth(w0.host_stall_s, a.host_stall_s, r.host_stall_s) ||
      !same_growth(w0.pipeline_bubble_s, a.pipeline_bubble_s, r.pipeline_bubble_s) ||
      !same_growth(w0.dp_comm_exposed_s, a.dp_comm_exposed_s, r.dp_comm_exposed_s) ||
      !same_growth(w0.max_peer_wait_s, a.max_peer_wait_s, r.max_peer_wait_s) ||
      !same_growth(w0.peak_bytes, a.peak_bytes, r.peak_bytes) || !same_growth(w0.pp_comm_s, a.pp_comm_s, r.pp_comm_s) ||
      !same_growth(w0.dp_comm_total_s, a.dp_comm_total_s, r.dp_comm_total_s) || r.failed)
    return false;
  return true;
}

// A pipelined step with a slow GPU is a max-plus system (each start the latest of what it waits
// for, plus fixed lengths): its state turns periodic after a transient, long where two of the
// schedule's cycles are nearly as long (a 5 % straggler), and stays periodic once it is. A run of c
// micro-batches shows where: from some pass on to the start of the cool-down, each simulated
// rank's passes (StepResult::pass_starts_ps) start one shift apart a period (pp micro-batches)
// later, every task made for a pass starting and ending where the same pass's did a period
// earlier (StepResult::pass_shapes: a random comparison found a TP 4 x PP 2 plan, one GPU 5 %
// slow, whose passes started periodically from micro-batch 16 while its waits for the slow TP
// peer inside them settled only at 28). Where every replica waits on the others every
// micro-batch (one replica, or expert groups spanning them all) the shift is the same for every
// rank: a rank keeping its own pace beside a slower peer is a lag still filling the schedule's
// slack (in a 64-GPU Mixtral plan with one GPU 20 % slow, the replicas joined to the straggler's
// by their expert groups ran 9 periods at the healthy pace, then slowed over 6 more). Replicas
// joined only by the reduction at the end each keep their own shift until it.
struct Settled {
  std::int64_t from_mb = -1;  // every rank periodic from this micro-batch on (-1: not within the run)
  std::int64_t shift = 0;     // picoseconds a period (the longest of the ranks')
  std::vector<std::int64_t> shifts;  // each simulated rank's
};

Settled settled_in(const StepConfig& cfg, std::int64_t c, const StepResult& run) {
  const std::int64_t pp = cfg.parallel.pp;
  const bool coupled = replicas_coupled(cfg.parallel);
  Settled out;
  std::int64_t from_mb = 0, shift = -1;
  if (run.pass_shapes.size() != run.pass_starts_ps.size()) return out;
  for (std::size_t r = 0; r < run.pass_starts_ps.size(); ++r) {
    const std::vector<std::int64_t>& at = run.pass_starts_ps[r];
    if (at.empty() || at.size() % std::size_t(c) != 0) return out;
    const std::size_t per_mb = at.size() / std::size_t(c), step = per_mb * std::size_t(pp);
    const std::size_t to = at.size() - std::min(at.size(), 2 * step);  // two periods short: the cool-down's and one
    if (to < 2 * step) return out;
    const std::int64_t s = at[to] - at[to - step];
    if (coupled && shift >= 0 && s != shift) return out;
    shift = std::max(shift, s);
    out.shifts.push_back(s);
    const std::vector<std::uint64_t>& shape = run.pass_shapes[r];
    if (shape.size() != at.size() || shape[to] != shape[to - step]) return out;
    std::size_t from = to - step;
    while (from > 0 && at[from - 1 + step] - at[from - 1] == s && shape[from - 1 + step] == shape[from - 1]) --from;
    if (from + 2 * step > to) return out;  // at least two periods alike
    from_mb = std::max(from_mb, std::int64_t((from + per_mb - 1) / per_mb));
  }
  if (shift < 0) return out;
  out.from_mb = from_mb;
  out.shift = shift;
  return out;
}

// Windows b < c both past a settled pipeline's transient (their cool-downs start in the periodic
// state, so each one's end is the other's shifted) must differ as the period makes them: the step
// by the shift a period (the slowest replica's), the peaks not at all, nor the longest wait for a
// peer where every replica waits on the others every micro-batch. And each rank's host thread,
// which launches at its own pace (its clock a sum of launch costs), must keep up: at its GPU's
// pace (its replica's) its lead is part of the periodic state; slower, it will hold its GPU more
// and more; faster, its lead grows and what waits for its launches can only shrink with it, so the
// two windows must have waited alike (then only where every length does: the step's first
// kernels; a random comparison found a loader delay whose peers' hosts were a few launches behind
// at the end of 8 micro-batches and none at 32: their idle split between host and bubble was
// extended 39 % off). And what grew_alike asks of any windows (keeps_pace).
bool settled_pair(const StepConfig& cfg, std::int64_t b, std::int64_t c, const Settled& st, const StepResult& a,
                  const StepResult& r) {
  const double periods = double(c - b) / double(cfg.parallel.pp);
  const double tol = 1e-9 * std::max(1.0, std::fabs(r.step_time_s));
  if (std::fabs((r.step_time_s - a.step_time_s) - periods * Time::from_ps(st.shift).seconds()) > tol) return false;
  // (Replicas at two paces: the healthy ones wait at the end for a lead that grows each period.)
  if (replicas_coupled(cfg.parallel) && std::fabs(r.max_peer_wait_s - a.max_peer_wait_s) > tol) return false;
  if (a.peak_bytes != r.peak_bytes || a.rank_peak_bytes != r.rank_peak_bytes || a.peak_breakdown != r.peak_breakdown) return false;
  const std::size_t n = r.pass_starts_ps.size();
  if (r.host_end_ps.size() != n || a.host_end_ps.size() != n || r.host_gap_s.size() != n || a.host_gap_s.size() != n ||
      st.shifts.size() != n)
    return false;
  for (std::size_t i = 0; i < n; ++i) {
    const auto gpu = std::int64_t(std::llround(periods * double(st.shifts[i])));
    const std::int64_t host = r.host_end_ps[i] - a.host_end_ps[i];
    if (host != gpu && (host > gpu || std::fabs(r.host_gap_s[i] - a.host_gap_s[i]) > 1e-12)) return false;
  }
  return keeps_pace(a, r, tol, true) && !r.failed && !a.failed;
}

// The figures simulate_step extends linearly from its windows (with the peak's breakdown and every
// rank's peak).
constexpr std::array kExtended = {
    &StepResult::step_time_s,     &StepResult::compute_s,         &StepResult::recompute_s,   &StepResult::optimizer_s,
    &StepResult::host_stall_s,    &StepResult::exposed_comm_s,    &StepResult::pipeline_bubble_s,
    &StepResult::tp_comm_s,       &StepResult::dp_comm_exposed_s, &StepResult::pp_comm_s,     &StepResult::cp_comm_s,
    &StepResult::ep_comm_s,       &StepResult::dp_comm_total_s,   &StepResult::peer_wait_s,
    &StepResult::peer_wait_exposed_s, &StepResult::max_peer_wait_s, &StepResult::peak_bytes};

// Whether two looks' windows grew by the same amount a micro-batch in everything the extension
// extends (their last two windows each).
bool same_rates(const Windows& w1, const StepResult& a1, const StepResult& r1, const Windows& w2, const StepResult& a2,
                const StepResult& r2) {
  const double ratio = double(w2.c - w2.b) / double(w1.c - w1.b);
  auto same = [ratio](double x1a, double x1r, double x2a, double x2r) {
    return std::fabs((x2r - x2a) - ratio * (x1r - x1a)) <= 1e-9 * std::max({1.0, std::fabs(x2r), std::fabs(x2a)});
  };
  for (auto field : kExtended)
    if (!same(a1.*field, r1.*field, a2.*field, r2.*field)) return false;
  auto same_list = [&](const auto& l1a, const auto& l1r, const auto& l2a, const auto& l2r) {
    if (l1a.size() != l1r.size() || l2a.size() != l2r.size() || l1r.size() != l2r.size()) return false;
    for (std::size_t i = 0; i < l2r.size(); ++i)
      if (!same(l1a[i], l1r[i], l2a[i], l2r[i])) return false;
    return true;
  };
  return same_list(a1.peak_breakdown, r1.peak_breakdown, a2.peak_breakdown, r2.peak_breakdown) &&
         same_list(a1.rank_peak_bytes, r1.rank_peak_bytes, a2.rank_peak_bytes, r2.rank_peak_bytes);
}

// Replicas joined only by the gradient reduction at the end keep their own paces until it, so
// with a slow GPU the healthy ones arrive there earlier by a lead that grows each micro-batch.
// Each rendezvous's arrival is the latest of what it waited for (its host's launch, the tasks
// before it), each compute kernel's start the latest of its launch, the rank's kernels before it
// and what it waited for, and each of those times grows linearly between two windows past their
// transient. The extension holds to m micro-batches only while the latest stays the latest (two
// linear functions ordered at both ends are ordered between them), the last member to arrive the
// last, and the longest wait the longest: a growing lead can overtake what bound a healthy
// member's arrival before. Random comparisons: an MoE plan, TP 4 x DP 8 with EP 4 and ZeRO-1,
// one GPU 10 % slow: while the healthy expert group's lead was short, its second bucket of the
// reduction waited for its own gradients and then for the slow group, so two waits grew with the
// lead; from 50-73 micro-batches on it waited behind the first bucket on its stream, and rank 0's
// waits, extended from 8-10 micro-batches to 96, came out 25 % high. An MoE pipeline, PP 2 x DP
// 16 with EP 4, host-bound, one GPU 10 % slow: extended from windows of up to 32, a healthy
// rank's idle time split between host and bubble 39 % and 87 % off (its kernels' launches
// stopped binding). Records are matched from the end of each group's or rank's list, the shorter
// window's first skip_mbs micro-batches left out (its transient); a record that differs in shape
// fails the check.
bool same_bindings(const StepConfig& cfg, const Windows& win, std::int64_t skip_mbs, const StepResult& a, const StepResult& r) {
  const auto c_b = std::size_t(win.c - win.b);
  const double k = double(micro_batches_of(cfg) - win.c) / double(c_b);
  auto ext = [k](std::int64_t xa, std::int64_t xr) { return double(xr) + k * double(xr - xa); };
  auto tol = [](double x) { return 1.0 + 1e-12 * std::fabs(x); };
  // Each list's records (one per rendezvous or task, in order) matched from the end, past the
  // shorter window's first skip_mbs micro-batches; `each` is given both records, which have the
  // same length, and says whether they pass.
  auto matched = [&](const std::vector<std::vector<std::uint32_t>>& at_a, const std::vector<std::vector<std::int64_t>>& ps_a,
                     const std::vector<std::vector<std::uint32_t>>& at_r, const std::vector<std::vector<std::int64_t>>& ps_r,
                     auto&& each) {
    if (at_a.size() != at_r.size() || ps_a.size() != at_a.size() || ps_r.size() != at_r.size()) return false;
    for (std::size_t g = 0; g < at_r.size(); ++g) {
      const std::vector<std::uint32_t>&sa = at_a[g], &sr = at_r[g];
      if (sr.size() < sa.size() || (sr.size() - sa.size()) % c_b != 0) return false;
      const std::size_t per_mb = (sr.size() - sa.size()) / c_b;
      const std::size_t n = sa.size() - std::min(sa.size(), std::size_t(skip_mbs) * per_mb);
      const std::vector<std::int64_t>&da = ps_a[g], &dr = ps_r[g];
      for (std::size_t j = 1; j <= n; ++j) {
        const std::size_t ia = sa[sa.size() - j], ir = sr[sr.size() - j];
        const std::size_t ea = j == 1 ? da.size() : sa[sa.size() - j + 1], er = j == 1 ? dr.size() : sr[sr.size() - j + 1];
        if (ea - ia != er - ir || !each(da.data() + ia, dr.data() + ir, er - ir)) return false;
      }
    }
    return true;
  };
  // Of times ta (shorter window) and tr (longer), the one latest in the longer: it must be latest
  // in the shorter and, extended, at m. Its three times, or none where it fails.
  auto latest = [&](const std::int64_t* ta, const std::int64_t* tr, std::size_t cnt) -> std::optional<std::array<double, 3>> {
    std::size_t best = 0;
    for (std::size_t q = 1; q < cnt; ++q)
      if (tr[q] > tr[best]) best = q;
    const double best_m = ext(ta[best], tr[best]);
    for (std::size_t q = 0; q < cnt; ++q) {
      if ((ta[q] < 0) != (tr[q] < 0)) return std::nullopt;  // (-1: none)
      if (ta[q] > ta[best] || (tr[q] >= 0 && ext(ta[q], tr[q]) > best_m + tol(best_m))) return std::nullopt;
    }
    return std::array{double(ta[best]), double(tr[best]), best_m};
  };
  double longest_m = 0;  // the longest wait of a member at these rendezvous, extended (ps)
  std::vector<std::array<double, 3>> ats;  // a rendezvous's arrivals in the shorter window, the longer, extended
  const bool rendezvous = matched(a.arrivals_at, a.arrivals_ps, r.arrivals_at, r.arrivals_ps,
                                  [&](const std::int64_t* xa, const std::int64_t* xr, std::size_t len) {
    if (xa[0] != xr[0]) return false;
    const std::int64_t fa = xa[1], fr = xr[1];  // when the rendezvous was complete
    const double fm = ext(fa, fr);
    ats.clear();
    std::size_t p = 2;
    for (std::size_t i = 0; i < std::size_t(xr[0]); ++i) {
      const auto cnt = std::size_t(xr[p]);
      if (xa[p] != xr[p] || p + 1 + cnt > len) return false;
      const auto at = latest(xa + p + 1, xr + p + 1, cnt);
      if (!at) return false;
      ats.push_back(*at);
      p += 1 + cnt;
    }
    if (p != len) return false;
    if (ats.empty()) return true;
    std::size_t last = 0;
    for (std::size_t i = 1; i < ats.size(); ++i)
      if (ats[i][1] > ats[last][1]) last = i;
    for (const auto& x : ats)
      if (x[0] > ats[last][0] || x[2] > ats[last][2] + tol(ats[last][2])) return false;
    // Complete at its last arrival in both windows or in neither (then at its group's previous
    // rendezvous); each member's wait there, extended.
    if ((double(fa) == ats[last][0]) != (double(fr) == ats[last][1])) return false;
    for (const auto& x : ats) longest_m = std::max(longest_m, fm - x[2]);
    return true;
  });
  if (!rendezvous) return false;
  // Each compute kernel's start: the latest of its launch, the rank's previous kernel and what it
  // waited for (the idle time before it is told by which).
  const bool kernels = matched(a.tasks_at, a.tasks_ps, r.tasks_at, r.tasks_ps,
                               [&](const std::int64_t* xa, const std::int64_t* xr, std::size_t len) {
    return latest(xa, xr, len).has_value();
  });
  if (!kernels) return false;
  // The longest wait, extended, must be one of these (the longest in both windows) or, where it
  // did not grow, none of these may outgrow it.
  const double wa = a.max_peer_wait_s * 1e12, wr = r.max_peer_wait_s * 1e12;
  const double wm = wr + k * (wr - wa);
  if (longest_m > wm + tol(wm) * 1e3) return false;
  if (wr - wa > tol(wr) * 1e3 && longest_m < wm - tol(wm) * 1e3) return false;
  return true;
}

}  // namespace

namespace {
// Every micro-batch simulated after windows that were refused, from the symmetry classes the
// windows' rounds split (a finer partition is exact: GPUs of a class that did not need splitting
// just behave alike), so that the full run does not pay again for the rounds that found them. On
// 7 of 740 runs (the seed 1-2 surveys and 500 random plans) the windows had split classes: 3-22 %
// fewer instructions (a TP 2 x CP 2 x DP 2 plan with a slow NIC, 481M -> 395M), reports
// byte-identical. Not the windows' other lessons: where a window stopped collectives joining runs
// is a pass the full run may still join past (session 29; s2_35 again this session: its full run
// from the windows' bars took 259k events in 340 ms, against a join round of 138 ms and 194k
// events in 145 ms).
StepResult exact_after_windows(const StepConfig& cfg, const TapeCache& windows) {
  TapeCache tapes;
  tapes.classes = windows.classes;
  return without_window_lists(simulate_step_with(cfg, tapes));
}
}  // namespace

StepResult simulate_step(const StepConfig& cfg) {
  const std::int64_t m = micro_batches_of(cfg);
  Windows win = windows_of(cfg);
  if (win.c == 0) return simulate_step_exact(cfg);
  // Gradient accumulation over many micro-batches repeats the same steady-state period: every
  // micro-batch past the pipeline's warm-up adds the same work, the same traffic and (under
  // GPipe, which keeps every micro-batch's activations) the same memory. Simulate three step
  // lengths and extend their difference linearly to m, instead of building m micro-batches.
  TapeCache tapes;
  auto with = [&](std::int64_t mbs) {
    StepConfig c = cfg;
    c.training.global_batch = mbs * std::max<std::int64_t>(1, cfg.training.micro_batch * cfg.parallel.dp);
    return simulate_step_with(c, tapes);
  };
  const bool slow = slow_gpu(cfg);
  StepResult a, r;
  if (!slow && cfg.parallel.pp > 1) {
    // A pipeline without a slow GPU: three windows a < b < c, a past the warm-up and c a whole
    // number of periods later. Where c's state turned periodic before a's cool-down (settled_in:
    // a healthy pipeline or one with a slow link settles within a few micro-batches of its
    // warm-up), a and c are a pair as a slow GPU's windows are (settled_pair) and b is not
    // simulated; else the three must grow alike.
    // (The first of a and b whose cool-down can start past a transient: b where a is within two
    // periods of the start, as under PP 8, whose windows are 16, 24 and 48.)
    const std::int64_t d = cfg.parallel.pp;
    const std::int64_t first = win.a > 2 * d ? win.a : win.b;
    tapes.passes = true;
    StepResult x = with(first);
    if (x.state_outgrows_memory) return x;
    r = with(win.c);
    const Settled st = settled_in(cfg, win.c, r);
    // What only the step's end adds (the data-parallel reduction after the cool-down, the longest
    // wait for a peer) must be the same in both: periodic passes alone did not show it (a random
    // comparison, tools/check/new_options_compare.py ext pipes calm, seed 300: on the flow network
    // with a slow link, 6 plans that three windows refused were extended from two whose passes
    // had settled, their data-parallel time up to 6 % off and longest wait up to 1.5 %).
    const double tol = 1e-9 * std::max(1.0, std::fabs(r.step_time_s));
    const bool same_end = std::fabs(r.dp_comm_total_s - x.dp_comm_total_s) <= tol &&
                          std::fabs(r.dp_comm_exposed_s - x.dp_comm_exposed_s) <= tol &&
                          std::fabs(r.max_peer_wait_s - x.max_peer_wait_s) <= tol;
    if (st.from_mb >= 0 && first - 2 * d >= st.from_mb && (win.c - first) % d == 0 && same_end &&
        settled_pair(cfg, first, win.c, st, x, r)) {
      a = std::move(x);
      win.b = first;
    } else {
      tapes.passes = false;  // (grew_alike reads none)
      StepResult w0 = first == win.a ? std::move(x) : with(win.a);
      a = first == win.b ? std::move(x) : with(win.b);
      if (!grew_alike(win, w0, a, r)) return exact_after_windows(cfg, tapes);
    }
  } else if (slow && win.a == 0) {
    // A slow GPU in a pipeline (or without one, on the analytic network: windows_of): the longer
    // window first, where its state turned periodic, then the shorter window whose cool-down
    // starts past that (settled_in, settled_pair).
    tapes.passes = true;
    tapes.bindings = !replicas_coupled(cfg.parallel);
    r = with(win.c);
    if (r.state_outgrows_memory) return r;
    const Settled st = settled_in(cfg, win.c, r);
    const std::int64_t d = cfg.parallel.pp;
    win.b = 0;
    if (st.from_mb >= 0)
      for (std::int64_t b = win.c - d; b > 0 && b - 2 * d >= st.from_mb; b -= d) win.b = b;
    if (win.b == 0) return exact_after_windows(cfg, tapes);
    a = with(win.b);
    if (!settled_pair(cfg, win.b, win.c, st, a, r)) return exact_after_windows(cfg, tapes);
    if (!replicas_coupled(cfg.parallel) && !same_bindings(cfg, win, st.from_mb + d, a, r)) return exact_after_windows(cfg, tapes);
  } else {
    // The steady state is checked, not assumed: a host clock that runs at nearly the pipeline's
    // rate, or a straggler its peers wait for, can take many micro-batches to settle. Three equally
    // spaced windows must grow by the same step, idle split and peer waits, else every micro-batch
    // is simulated.
    StepResult w0 = with(win.a);
    if (w0.state_outgrows_memory) return w0;  // (as any length would: the state does not grow)
    a = with(win.b);
    r = with(win.c);
    // With a slow GPU the second look is always taken (windows_of returned none where it does not
    // pay), and the last micro-batch of each look must add the same to everything extended: how its
    // peers' waits split among the groups can settle a few micro-batches past the first windows, the
    // step growing alike all along (a random comparison: CP 2 x DP 8 on the flow network, one GPU
    // 20 % slow, the exposed CP time grew 0.19985 ms a micro-batch to 4 and 0.20714 from 5 on).
    // Without one, a first look that fails its checks is replaced by the second, which is then
    // checked alone (the random comparisons, tools/check/new_options_compare.py ext, back that).
    if (slow || !grew_alike(win, w0, a, r)) {
      const Windows first = win;
      const StepResult first_a = a, first_r = r;
      win = later_windows(cfg, win);
      if (win.c == 0) return exact_after_windows(cfg, tapes);
      w0 = with(win.a);
      tapes.bindings = slow;  // (same_bindings reads the last two)
      a = with(win.b);
      r = with(win.c);
      if (!grew_alike(win, w0, a, r)) return exact_after_windows(cfg, tapes);
      if (slow && (!same_rates(first, first_a, first_r, win, a, r) || !same_bindings(cfg, win, 2, a, r)))
        return exact_after_windows(cfg, tapes);
    }
  }
  const double k = double(m - win.c) / double(win.c - win.b);
  auto ext = [k](double& field, double at_w) { field += k * (field - at_w); };
  for (auto field : kExtended) ext(r.*field, a.*field);
  for (std::size_t i = 0; i < r.peak_breakdown.size(); ++i) ext(r.peak_breakdown[i], a.peak_breakdown[i]);
  for (std::size_t i = 0; i < r.rank_peak_bytes.size() && i < a.rank_peak_bytes.size(); ++i)
    ext(r.rank_peak_bytes[i], a.rank_peak_bytes[i]);
  // (The windows' rounds can differ in how many collectives join runs: a longer window may take
  // fewer events than a shorter one. The estimate is then the longest window's count.)
  double kernels = double(r.kernels), events = double(r.events);
  ext(kernels, double(a.kernels));
  ext(events, double(a.events));
  events = std::max(events, double(r.events));
  r.kernels = std::uint64_t(std::llround(kernels));
  r.events = std::uint64_t(std::llround(events));
  r.micro_batches = m;
  r.extrapolated_from = win.c;
  r.extrapolated_base = win.b;
  if (r.max_peer_wait_s > cfg.faults.nccl_timeout_s) return exact_after_windows(cfg, tapes);  // name who timed out
  r = without_window_lists(std::move(r));
  r.required_bytes = required_bytes_of(cfg, r.peak_bytes);
  r.fits = r.required_bytes <= r.capacity_bytes;
  const double tokens = double(cfg.training.global_batch) * double(cfg.training.seq_len);
  r.tokens_per_s = r.step_time_s > 0 ? tokens / r.step_time_s : 0;
  r.model_flops_per_step = model_flops(cfg.model, tokens, cfg.training.seq_len);
  const double gpus = double(cfg.parallel.gpus());
  r.model_tflops_per_gpu = r.step_time_s > 0 ? r.model_flops_per_step / r.step_time_s / gpus / 1e12 : 0;
  const double peak = cfg.gpu.peak(Dtype::bf16).value > 0 ? cfg.gpu.peak(Dtype::bf16).value : cfg.gpu.peak(Dtype::fp16).value;
  r.mfu = peak > 0 ? r.model_tflops_per_gpu * 1e12 / peak : 0;
  return r;
}

}  // namespace scaleout
