#include "sim/network/flow_network.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "sim/engine/check.hpp"

namespace scaleout {

namespace {
std::atomic<std::uint64_t> networks_made{0};
}  // namespace

FlowNetwork::FlowNetwork(Simulator& sim, const Topology& topo) : sim_(sim), topo_(topo), serial_(++networks_made) {
  const std::size_t n = topo.link_count();
  capacity_.resize(n);
  for (std::size_t l = 0; l < n; ++l) capacity_[l] = topo.link(LinkId(l)).capacity();
  on_link_.resize(n);
  rem_.resize(n);
  weight_.resize(n);
  version_.resize(n);
  link_stamp_.resize(n);
  dirty_stamp_.resize(n);
  solo_stamp_.resize(n);
  link_res_.resize(n);
}

namespace {
// Memory for remembered solves: past this many route ids in their keys (each with its rate, about
// 12 bytes), no more are kept: 12 MB.
constexpr std::size_t kSolvedLimit = std::size_t(1) << 20;
// The remembered solves' and the route table's keys are compared whole on lookup, so their hash
// only spreads them over buckets: a multiply per element, inline (flow_hash, the routes' ECMP
// hash, out of line and three multiplies an element, was 13 % of a healthy flow step's cycles:
// Mixtral FSDP TP 2 x CP 2 x DP 16 on 64 GPUs).
constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t x) { return (h ^ x) * 0x9E3779B97F4A7C15ull; }
constexpr std::uint64_t spread(std::uint64_t h) { return h ^ (h >> 29); }
}  // namespace

std::size_t FlowNetwork::KeyHash::operator()(const std::vector<std::uint32_t>& k) const {
  std::uint64_t h = k.size();
  for (std::uint32_t x : k) h = mix(h, x);
  return std::size_t(spread(h));
}

std::uint32_t FlowNetwork::intern_route(std::span<const LinkId> links, double cap) {
  std::uint64_t h = std::bit_cast<std::uint64_t>(cap);
  for (LinkId l : links) h = mix(h, l);
  h = spread(h);
  auto& same_hash = route_ids_[h];
  for (std::uint32_t id : same_hash)
    if (route_cap_[id] == cap && std::equal(links.begin(), links.end(), route_links_[id].begin(), route_links_[id].end()))
      return id;
  const auto id = std::uint32_t(route_links_.size());
  route_links_.emplace_back(links.begin(), links.end());
  route_cap_.push_back(cap);
  same_hash.push_back(id);
  return id;
}

std::uint32_t FlowNetwork::new_flow(std::span<const LinkId> links, double remaining, double rate, double cap, Time updated,
                                    Time latency, State state, Done done) {
  const std::uint32_t s = allocate();
  Flow& f = flows_[s];
  f.remaining = remaining;
  f.rate = rate;
  f.cap = cap;
  f.updated = updated;
  f.latency = latency;
  f.event = kNoEvent;
  f.state = state;
  flow_links_[s].assign(links.begin(), links.end());
  route_of_[s] = state == State::active && !links.empty() ? intern_route(links, cap) : 0;
  done_[s] = std::move(done);
  flow_watched_[s] = 0;
  if (!watched_.empty() && state == State::active) {
    flow_start_[s] = sim_.now();
    flow_watched_[s] = std::any_of(links.begin(), links.end(), [this](LinkId l) { return l < watched_.size() && watched_[l]; });
  }
  ++started_;
  ++active_;
  return s;
}

std::uint32_t FlowNetwork::allocate() {
  if (!free_slots_.empty()) {
    const std::uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  flows_.emplace_back();
  flow_links_.emplace_back();
  done_.emplace_back();
  next_rate_.push_back(0);
  flow_start_.emplace_back();
  flow_watched_.push_back(0);
  route_of_.push_back(0);
  return std::uint32_t(flows_.size() - 1);
}

void FlowNetwork::release(const void* owner) {
  for (std::size_t i = 0; i < held_.size(); ++i)
    if (held_[i].get() == owner) {
      held_[i] = std::move(held_.back());
      held_.pop_back();
      return;
    }
}

FlowId FlowNetwork::send(int src_rank, int dst_rank, double bytes, Done done, int flow_tag) {
  route_.clear();
  const bool ok = topo_.route_gpus(src_rank, dst_rank,
                                   flow_hash(std::uint64_t(src_rank), std::uint64_t(dst_rank), std::uint64_t(flow_tag)), route_);
  SCALEOUT_CHECK(ok, "flow network: no route from rank " + std::to_string(src_rank) + " to rank " + std::to_string(dst_rank));
  // route_ is scratch that start() copies before anything can reuse it.
  return start(route_, bytes, topo_.path_latency(route_), std::move(done));
}

FlowId FlowNetwork::start(std::span<const LinkId> links, double bytes, Time latency, Done done, double rate_cap) {
  SCALEOUT_CHECK(bytes >= 0 && std::isfinite(bytes), "flow network: bytes must be finite and non-negative");
  SCALEOUT_CHECK(rate_cap > 0, "flow network: rate cap must be positive");
  evict_reservations(links);
  const std::uint32_t s = new_flow(links, bytes, 0, rate_cap, sim_.now(), latency, State::active, std::move(done));
  Flow& f = flows_[s];
  const std::uint32_t gen = f.generation;
  if (links.empty() || bytes <= 0) {
    // Nothing to share: a local copy or an empty message only waits for the latency.
    f.remaining = 0;
    f.state = State::delivering;
    schedule_flow(s, sim_.now() + latency, true);
    return make_id(s, gen);
  }
  for (LinkId l : links) {
    SCALEOUT_CHECK(l < on_link_.size(), "flow network: unknown link");
    on_link_[l].push_back(s);
    mark(l);
  }
  request_solve();
  return make_id(s, gen);
}

double FlowNetwork::rate(FlowId id) const {
  const auto s = std::uint32_t(id & 0xffffffffu);
  if (s >= flows_.size()) return 0;
  const Flow& f = flows_[s];
  return f.generation == std::uint32_t(id >> 32) && f.state == State::active ? f.rate : 0;
}

double FlowNetwork::link_rate(LinkId l) const {
  double r = 0;
  for (std::uint32_t f : on_link_[l]) r += flows_[f].rate;
  return r;
}

bool FlowNetwork::active(FlowId id) const {
  const auto s = std::uint32_t(id & 0xffffffffu);
  return s < flows_.size() && flows_[s].generation == std::uint32_t(id >> 32) && flows_[s].state != State::free;
}

void FlowNetwork::mark(LinkId l) {
  if (dirty_stamp_[l] == dirty_epoch_) return;
  dirty_stamp_[l] = dirty_epoch_;
  dirty_.push_back(l);
}

void FlowNetwork::request_solve() {
  if (solve_pending_) return;
  solve_pending_ = true;
  sim_.schedule_in(Time::zero(), [this] { solve(); }, kSolvePriority);
}

namespace {
// Up to this many shared links a solve scans them each round rather than keep a heap.
constexpr std::size_t kScanLinks = 64;
}  // namespace

void FlowNetwork::freeze(std::uint32_t f, double rate) {
  next_rate_[f] = rate;
  flows_[f].stamp = epoch_ | 0x80000000u;  // frozen in this solve
  for (LinkId l : flow_links_[f]) {
    if (solo_stamp_[l] == epoch_) continue;
    rem_[l] -= rate;
    if (--weight_[l] > 0 && use_heap_) {
      ++version_[l];
      heap_.push_back(HeapEntry{std::max(rem_[l], 0.0) / weight_[l], l, version_[l]});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    }
  }
}

void FlowNetwork::solve() {
  solve_pending_ = false;
  if (dirty_.empty()) return;
  ++solves_;
  // The stamp's top bit marks frozen flows, so epochs count in the low 31 bits.
  epoch_ = (epoch_ + 1) & 0x7fffffffu;
  if (epoch_ == 0) {
    for (Flow& f : flows_) f.stamp = 0;
    std::fill(link_stamp_.begin(), link_stamp_.end(), 0u);
    std::fill(solo_stamp_.begin(), solo_stamp_.end(), 0u);
    epoch_ = 1;
  }
  // The connected component of the changed links: flows on them, their links, and so on.
  comp_links_.clear();
  comp_flows_.clear();
  for (LinkId l : dirty_)
    if (link_stamp_[l] != epoch_) {
      link_stamp_[l] = epoch_;
      comp_links_.push_back(l);
    }
  dirty_.clear();
  if (++dirty_epoch_ == 0) {
    std::fill(dirty_stamp_.begin(), dirty_stamp_.end(), 0u);
    dirty_epoch_ = 1;
  }
  for (std::size_t i = 0; i < comp_links_.size(); ++i) {
    for (std::uint32_t f : on_link_[comp_links_[i]]) {
      if ((flows_[f].stamp & 0x7fffffffu) == epoch_) continue;
      flows_[f].stamp = epoch_;
      comp_flows_.push_back(f);
      for (LinkId l : flow_links_[f])
        if (link_stamp_[l] != epoch_) {
          link_stamp_[l] = epoch_;
          // A link that f alone crosses leads to no other flow, and bounds f only (a cap, below):
          // it is marked so and not visited. Most hops of a ring's path are such links (a ring
          // over 32 GPUs: about 100 of them), and visiting each was a quarter of a flow step's
          // instructions where the ring shared a few hops with short TP flows.
          if (on_link_[l].size() == 1) {
            solo_stamp_[l] = epoch_;
            continue;
          }
          comp_links_.push_back(l);
        }
    }
  }
  if (comp_flows_.empty()) return;

  // A component met before: its rates from memory (see the header). The flows in (route, slot)
  // order: flows of one route can differ in the last bit where a cap ties a link's share, and the
  // solve below breaks such ties the same way (caps_).
  by_route_.clear();
  for (std::uint32_t f : comp_flows_) by_route_.emplace_back(route_of_[f], f);
  std::sort(by_route_.begin(), by_route_.end());
  key_.clear();
  for (const auto& rf : by_route_) key_.push_back(rf.first);
  if (const auto hit = solved_.find(key_); hit != solved_.end()) {
    ++remembered_;
    for (std::size_t i = 0; i < by_route_.size(); ++i) next_rate_[by_route_[i].second] = hit->second[i];
    settle_component();
    return;
  }

  // Progressive filling over the component. A link that one flow alone crosses (most hops of a
  // ring's path) bounds that flow only: it is a cap on the flow's rate (capacity / crossings, the
  // share it would have in the heap) and stays out of the heap.
  // The links several flows share are few in most components (a ring's path is mostly its own):
  // then each round scans them for the lowest share; many, and a heap keeps them in order (each
  // change pushes the link again, stale entries are skipped). Both pick the lowest (share, link).
  shared_.clear();
  for (LinkId l : comp_links_) {
    const auto& on = on_link_[l];
    if (on.empty()) continue;
    if (std::all_of(on.begin() + 1, on.end(), [f = on.front()](std::uint32_t x) { return x == f; })) {
      solo_stamp_[l] = epoch_;
      continue;
    }
    rem_[l] = capacity_[l];
    weight_[l] = std::uint32_t(on.size());
    shared_.push_back(l);
  }
  use_heap_ = shared_.size() > kScanLinks;
  heap_.clear();
  if (use_heap_) {
    for (LinkId l : shared_) heap_.push_back(HeapEntry{rem_[l] / weight_[l], l, ++version_[l]});
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
  caps_.clear();
  for (std::uint32_t f : comp_flows_) {
    double cap = flows_[f].cap;
    bool solo = false;
    for (LinkId l : flow_links_[f])
      if (solo_stamp_[l] == epoch_) {
        solo = true;
        cap = std::min(cap, capacity_[l] / double(on_link_[l].size()));
      }
    if (cap < kNoCap || solo) caps_.emplace_back(cap, f);
  }
  // Equal caps in (route, slot) order: a flow frozen at its cap can leave a link's share an ulp
  // under the next equal cap, so which flow comes first shows in the last bit (see the memo above).
  std::sort(caps_.begin(), caps_.end(), [this](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first < y.first;
    if (route_of_[x.second] != route_of_[y.second]) return route_of_[x.second] < route_of_[y.second];
    return x.second < y.second;
  });
  const std::uint32_t frozen = epoch_ | 0x80000000u;
  std::size_t unfrozen = comp_flows_.size(), next_cap = 0;
  while (unfrozen > 0) {
    // The link of the lowest share (ties: the lowest id), if any.
    LinkId l = 0;
    double share = kNoCap;
    bool found = false;
    if (use_heap_) {
      while (!heap_.empty() && (heap_.front().version != version_[heap_.front().link] || weight_[heap_.front().link] == 0)) {
        std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
        heap_.pop_back();
      }
      if (!heap_.empty()) {
        found = true;
        l = heap_.front().link;
        share = heap_.front().share;
      }
    } else {
      for (std::size_t i = 0; i < shared_.size();) {
        const LinkId x = shared_[i];
        if (weight_[x] == 0) {  // all its flows are frozen
          shared_[i] = shared_.back();
          shared_.pop_back();
          continue;
        }
        const double sx = std::max(rem_[x], 0.0) / weight_[x];
        if (!found || sx < share || (sx == share && x < l)) {
          found = true;
          share = sx;
          l = x;
        }
        ++i;
      }
    }
    while (next_cap < caps_.size() && flows_[caps_[next_cap].second].stamp == frozen) ++next_cap;
    if (next_cap < caps_.size() && caps_[next_cap].first <= share) {
      freeze(caps_[next_cap].second, caps_[next_cap].first);
      --unfrozen;
      continue;
    }
    SCALEOUT_CHECK(found, "flow network: unfrozen flows without links");
    if (use_heap_) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      heap_.pop_back();
    }
    // Copy: freezing edits weights, not membership, so the list is stable; index to be safe.
    for (std::size_t i = 0; i < on_link_[l].size(); ++i) {
      const std::uint32_t f = on_link_[l][i];
      if (flows_[f].stamp == frozen) continue;
      freeze(f, share);
      --unfrozen;
    }
  }

  if (solved_size_ + key_.size() <= kSolvedLimit) {
    std::vector<double> rates(key_.size());
    for (std::size_t i = 0; i < by_route_.size(); ++i) rates[i] = next_rate_[by_route_[i].second];
    solved_size_ += key_.size();
    solved_.emplace(key_, std::move(rates));
  }
  settle_component();
}

void FlowNetwork::settle_component() {
  // Settle and reschedule the flows whose rate changed.
  const Time now = sim_.now();
  for (std::uint32_t s : comp_flows_) {
    Flow& f = flows_[s];
    const double r = next_rate_[s];
    if (std::fabs(r - f.rate) <= 1e-12 * f.rate) continue;
    if (f.rate > 0) f.remaining = std::max(0.0, f.remaining - f.rate * (now - f.updated).seconds());
    f.updated = now;
    f.rate = r;
    if (f.event != kNoEvent) sim_.cancel(f.event);
    f.event = kNoEvent;
    const Time left = r > 0 ? Time::from_seconds(f.remaining / r) : Time::max();
    if (left != Time::max()) schedule_flow(s, now + left, false);
  }
}

void FlowNetwork::drained(std::uint32_t s, std::uint32_t gen) {
  Flow& f = flows_[s];
  if (f.generation != gen || f.state != State::active) return;
  f.remaining = 0;
  f.rate = 0;
  for (LinkId l : flow_links_[s]) {
    auto& v = on_link_[l];
    // (A plain scan: most lists hold one or two flows, where std::find's unrolled loop cost more.)
    std::size_t i = 0;
    while (i < v.size() && v[i] != s) ++i;
    SCALEOUT_CHECK(i < v.size(), "flow network: flow missing from its link");
    v[i] = v.back();
    v.pop_back();
    // A link left empty (most hops of a ring's path are its own) has nothing to solve again.
    if (!v.empty()) mark(l);
  }
  request_solve();
  if (flow_watched_[s]) tell_route_watchers(route_of_[s], flow_start_[s], sim_.now());
  f.state = State::delivering;
  last_drained_ = max(last_drained_, sim_.now());
  schedule_flow(s, sim_.now() + f.latency, true);
}

void FlowNetwork::deliver(std::uint32_t s, std::uint32_t gen) {
  Flow& f = flows_[s];
  if (f.generation != gen || f.state != State::delivering) return;
  Done done = std::move(done_[s]);
  done_[s] = nullptr;
  f.state = State::free;
  f.event = kNoEvent;
  ++f.generation;
  flow_links_[s].clear();
  free_slots_.push_back(s);
  --active_;
  if (done) done();
}

void FlowNetwork::schedule_flow(std::uint32_t s, Time at, bool delivering) {
  Flow& f = flows_[s];
  const std::uint32_t gen = f.generation;
  f.event_at = at;
  if (delivering) f.event = sim_.schedule_at(at, [this, s, gen] { deliver(s, gen); });
  else f.event = sim_.schedule_at(at, [this, s, gen] { drained(s, gen); });
}

void FlowNetwork::rewind() {
  SCALEOUT_CHECK(active_ == 0 && res_expiry_.empty(), "flow network: rewinding with flows or reservations left");
  sim_.rewind();
  last_drained_ = Time::zero();
}

bool FlowNetwork::reserved(LinkId l) const {
  const LinkReservation& r = link_res_[l];
  return r.until > sim_.now() && reservations_[r.slot].live && reservations_[r.slot].generation == r.generation;
}

void FlowNetwork::free_reservation(std::uint32_t slot) {
  Reservation& r = reservations_[slot];
  r.live = false;
  r.evict = nullptr;
  ++r.generation;  // its links' entries and its expiry entry no longer match it
  free_res_.push_back(slot);
}

bool FlowNetwork::idle(std::span<const LinkId> links) const {
  for (LinkId l : links)
    if (!on_link_[l].empty() || reserved(l)) return false;
  return true;
}

void FlowNetwork::reserve(std::span<const LinkId> links, Time until, std::function<void()> evict) {
  // (tell_watchers passes over the links nobody watches.)
  if (book(links, until, std::move(evict)) && !watched_.empty()) tell_watchers(links, sim_.now(), until);
}

void FlowNetwork::reserve(std::uint32_t set, Time until, std::function<void()> evict) {
  SCALEOUT_CHECK(set < route_links_.size(), "flow network: unknown link set");
  // (A set none of whose links is watched has no watchers to tell.)
  if (book(route_links_[set], until, std::move(evict)) && !watched_.empty()) tell_route_watchers(set, sim_.now(), until);
}

bool FlowNetwork::book(std::span<const LinkId> links, Time until, std::function<void()> evict) {
  const Time now = sim_.now();
  if (until <= now || links.empty()) return false;
  // Reservations that lapsed give their slots back.
  while (!res_expiry_.empty() && std::get<0>(res_expiry_.front()) <= now) {
    const auto [t, slot, gen] = res_expiry_.front();
    std::pop_heap(res_expiry_.begin(), res_expiry_.end(), std::greater<>());
    res_expiry_.pop_back();
    if (reservations_[slot].live && reservations_[slot].generation == gen) free_reservation(slot);
  }
  std::uint32_t slot;
  if (!free_res_.empty()) {
    slot = free_res_.back();
    free_res_.pop_back();
  } else {
    slot = std::uint32_t(reservations_.size());
    reservations_.emplace_back();
  }
  Reservation& r = reservations_[slot];
  r.evict = std::move(evict);
  r.until = until;
  r.live = true;
  for (LinkId l : links) {
    SCALEOUT_CHECK(l < link_res_.size(), "flow network: unknown link");
    link_res_[l] = {slot, r.generation, until};
  }
  res_expiry_.emplace_back(until, slot, r.generation);
  std::push_heap(res_expiry_.begin(), res_expiry_.end(), std::greater<>());
  return true;
}

void FlowNetwork::evict_reservations(std::span<const LinkId> links) {
  for (LinkId l : links) {
    if (l >= link_res_.size() || !reserved(l)) continue;  // start() reports unknown links
    const std::uint32_t slot = link_res_[l].slot;
    auto evict = std::move(reservations_[slot].evict);
    free_reservation(slot);
    if (evict) evict();
  }
}

void FlowNetwork::watch(std::span<const LinkId> links, std::uint32_t who) {
  if (watchers_.empty()) {
    watchers_.resize(capacity_.size());
    watched_.assign(capacity_.size(), 0);
  }
  if (busy_.size() <= who) busy_.resize(std::size_t(who) + 1);
  for (LinkId l : links) {
    SCALEOUT_CHECK(l < watchers_.size(), "flow network: unknown link");
    auto& w = watchers_[l];
    if (std::find(w.begin(), w.end(), who) == w.end()) w.push_back(who);
    watched_[l] = 1;
  }
  ++watch_version_;
}

const std::vector<std::pair<Time, Time>>& FlowNetwork::busy(std::uint32_t who) const {
  static const std::vector<std::pair<Time, Time>> none;
  return who < busy_.size() ? busy_[who] : none;
}

// One busy interval to a watcher (once: a watcher of several of a flow's links is told at the
// first, and its list then ends with the interval).
void FlowNetwork::tell(std::uint32_t who, Time from, Time to) {
  auto& b = busy_[who];
  if (b.empty() || b.back() != std::make_pair(from, to)) b.emplace_back(from, to);
}

void FlowNetwork::tell_watchers(std::span<const LinkId> links, Time from, Time to) {
  for (LinkId l : links) {
    if (l >= watched_.size() || !watched_[l]) continue;
    for (std::uint32_t who : watchers_[l]) tell(who, from, to);
  }
}

// A flow's watchers, from its route: the distinct watchers of the route's watched links, listed
// once per route (and again after a watch()) instead of read off every link at every drain; each
// told once, as tell_watchers tells it.
void FlowNetwork::tell_route_watchers(std::uint32_t route, Time from, Time to) {
  if (route_watch_stamp_.size() <= route) {
    route_watch_stamp_.resize(route_links_.size(), 0);
    route_watchers_.resize(route_links_.size());
  }
  auto& ws = route_watchers_[route];
  if (route_watch_stamp_[route] != watch_version_) {
    ws.clear();
    for (LinkId l : route_links_[route]) {
      if (l >= watched_.size() || !watched_[l]) continue;
      for (std::uint32_t who : watchers_[l])
        if (std::find(ws.begin(), ws.end(), who) == ws.end()) ws.push_back(who);
    }
    route_watch_stamp_[route] = watch_version_;
  }
  for (std::uint32_t who : ws) tell(who, from, to);
}

FlowNetwork::Snapshot FlowNetwork::snapshot(FlowId id) const {
  Snapshot out;
  const auto s = std::uint32_t(id & 0xffffffffu);
  if (s >= flows_.size()) return out;
  const Flow& f = flows_[s];
  if (f.generation != std::uint32_t(id >> 32) || f.state == State::free) return out;
  out.live = true;
  out.delivering = f.state == State::delivering;
  out.remaining = f.remaining;
  out.rate = f.rate;
  out.cap = f.cap;
  out.updated = f.updated;
  out.latency = f.latency;
  out.event_at = f.event == kNoEvent ? Time::max() : f.event_at;
  return out;
}

FlowId FlowNetwork::adopt(std::span<const LinkId> links, const Snapshot& snap, std::int64_t offset_ps, Done done) {
  SCALEOUT_CHECK(snap.live, "flow network: adopting a finished flow");
  const auto shift = [offset_ps](Time t) { return Time::from_ps(t.ps() + offset_ps); };
  const std::uint32_t s = new_flow(links, snap.remaining, snap.rate, snap.cap, shift(snap.updated), snap.latency,
                                   snap.delivering ? State::delivering : State::active, std::move(done));
  const std::uint32_t gen = flows_[s].generation;
  if (!snap.delivering) {
    for (LinkId l : links) {
      SCALEOUT_CHECK(l < on_link_.size(), "flow network: unknown link");
      on_link_[l].push_back(s);
    }
    if (snap.event_at == Time::max()) {
      // Not solved yet where it came from: it is solved here.
      for (LinkId l : links) mark(l);
      request_solve();
      return make_id(s, gen);
    }
  }
  schedule_flow(s, shift(snap.event_at), snap.delivering);
  return make_id(s, gen);
}

}  // namespace scaleout
