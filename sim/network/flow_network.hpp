#pragma once
// Flows on the links of a topology, sharing bandwidth by max-min fairness (progressive filling,
// Bertsekas & Gallager, Data Networks, sec. 6.5.2; SimGrid's lmm solver does the same): all
// unfrozen flows grow at one rate until a link saturates; the flows crossing it freeze at its
// fair share; repeat with what is left. A flow may cross a link several times (a coupled
// collective phase, see start()); it then takes that many shares of the link.
//
// Rates change only when a flow starts or ends. Each change marks the links it touches; once per
// simulated instant (an event of the lowest priority, so that everything starting or ending at
// that time is batched) the connected component of flows and links reachable from the marked
// links is re-solved, and each flow whose rate changed gets its remaining bytes settled and its
// completion event moved. A flow of S bytes along a path of latency L finishes L after its last
// byte leaves: L + the time S takes at the rates it gets.
//
// Solves remembered: the rates of a component depend on nothing but the multiset of its flows'
// routes (links crossed, with repeats) and caps, and the solve computes them as a function of that
// multiset alone (every choice is by share, cap or link id, and the flows frozen in one round all
// take the same rate, so the order in which they are found or were started never shows). A
// training step meets the same few components over and over (a random 64-GPU plan: 56 distinct
// among 20,378 solves), so each flow's route and cap is interned at its start, a component's key
// is the sorted list of its flows' ids, and a component met before takes its rates from memory:
// the same rates, bit for bit, as solving it again. (Where a cap ties a link's share to the last
// bit, freezing one flow at its cap can leave the share an ulp under the next equal cap: the solve
// takes equal caps in (route, slot) order and the memory hands rates out in that order, so this
// holds there too.)
//
// Reservations: flows that share no link with any other flow run exactly as they would alone,
// and max-min rates and integer-picosecond times make that run the same at any start time. A
// caller that worked out such a run apart (a collective on idle links) may reserve its links
// until its last byte leaves instead of running its flows here; the first flow started on a
// reserved link first evicts the reservation, whose owner must adopt() its flows in the state the
// run apart had reached by then, so the network continues exactly as if they had run here.
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "hardware/topology.hpp"
#include "sim/engine/simulator.hpp"

namespace scaleout {

using FlowId = std::uint64_t;  // (generation << 32) | slot; a finished flow's id matches nothing

class FlowNetwork {
 public:
  using Done = std::function<void()>;
  static constexpr double kNoCap = std::numeric_limits<double>::infinity();
  // Runs after every event of the same instant: rates are solved once for all of them.
  static constexpr std::int64_t kSolvePriority = std::numeric_limits<std::int64_t>::max();

  FlowNetwork(Simulator& sim, const Topology& topo);
  FlowNetwork(const FlowNetwork&) = delete;
  FlowNetwork& operator=(const FlowNetwork&) = delete;

  // `bytes` from one rank to another along the route of (src, dst, flow_tag); `done` runs when
  // the last byte has arrived. Between GPUs of one node the route stays inside it.
  FlowId send(int src_rank, int dst_rank, double bytes, Done done, int flow_tag = 0);
  // A flow along explicit links; a link listed k times carries k times the flow's rate (the
  // members of a pipelined ring move in lockstep, one rate for all). `rate_cap` bounds the rate
  // (bytes/s) whatever the links offer.
  FlowId start(std::span<const LinkId> links, double bytes, Time latency, Done done, double rate_cap = kNoCap);

  // Current rate in bytes/s of an unfinished flow (zero once its bytes have left, or unknown).
  double rate(FlowId id) const;
  bool active(FlowId id) const;
  std::size_t active_flows() const { return active_; }
  // Crossings of a link by unfinished flows, and the bytes/s they put on it together.
  std::size_t flows_on(LinkId l) const { return on_link_[l].size(); }
  double link_rate(LinkId l) const;
  std::uint64_t flows_started() const { return started_; }
  std::uint64_t solves() const { return solves_; }
  // Of those, the components met before, whose rates came from memory.
  std::uint64_t solves_remembered() const { return remembered_; }

  // Whether callers may run work apart and reserve its links (on by default).
  void set_apart(bool on) { apart_ = on; }
  bool apart() const { return apart_; }
  // True when no unfinished flow and no reservation is on any of `links`.
  bool idle(std::span<const LinkId> links) const;
  // Reserves `links` until `until` (exclusive); `evict` runs once if a flow starts on one of them
  // before then (the reservation is gone by the time it runs).
  void reserve(std::span<const LinkId> links, Time until, std::function<void()> evict);
  // The same for a set of links named once (link_set) and reserved many times: its watchers are
  // listed once per set (and again after a watch()) instead of read off every link at every
  // reservation.
  std::uint32_t link_set(std::span<const LinkId> links) { return intern_route(links, kNoCap); }
  // Unique to this network in the process (ids such as link_set's mean nothing on another).
  std::uint64_t serial() const { return serial_; }
  void reserve(std::uint32_t set, Time until, std::function<void()> evict);

  // A flow's state, for carrying a flow from one network to another (times are absolute in the
  // network it was taken from; `event_at` is when its last byte leaves or, delivering, arrives).
  struct Snapshot {
    bool live = false;        // false once delivered
    bool delivering = false;  // its bytes have all left; only the latency remains
    double remaining = 0, rate = 0, cap = kNoCap;
    Time updated, latency, event_at;
  };
  Snapshot snapshot(FlowId id) const;
  // Takes over a flow of another network in the state `s` (its times shifted by `offset`, which
  // may be negative), on `links`; rates are not re-solved (they were those of the same flows).
  FlowId adopt(std::span<const LinkId> links, const Snapshot& s, std::int64_t offset_ps, Done done);
  // When the last flow so far left its links (its last byte sent).
  Time last_drained() const { return last_drained_; }
  // Sets the network and its simulator back to time zero; only when nothing is left to run.
  void rewind();

  // Watching links: each flow on a watched link, from its start (or adoption) until its last byte
  // leaves, and each reservation of one, until it lapses, is an interval the link's watchers are
  // told of (busy()). For callers that assumed some links idle at some times, to check it after.
  void watch(std::span<const LinkId> links, std::uint32_t who);
  // The intervals `who` was told of, in the order they ended (a flow) or began (a reservation).
  const std::vector<std::pair<Time, Time>>& busy(std::uint32_t who) const;
  // The same, handed over (what is left for `who` is empty).
  std::vector<std::pair<Time, Time>> take_busy(std::uint32_t who) {
    return who < busy_.size() ? std::move(busy_[who]) : std::vector<std::pair<Time, Time>>{};
  }

  // Objects that must live as long as their flows (a collective's plan): held until released.
  void hold(std::shared_ptr<void> owner) { held_.push_back(std::move(owner)); }
  void release(const void* owner);
  // A slot for what the layers above keep per network (the collectives' plans, by spec).
  std::shared_ptr<void>& memo() { return memo_; }

  Simulator& simulator() { return sim_; }
  const Topology& topology() const { return topo_; }

 private:
  enum class State : std::uint8_t { free, active, delivering };
  static constexpr EventId kNoEvent = std::numeric_limits<EventId>::max();
  struct Flow {
    double remaining = 0;  // bytes not yet sent at `updated`
    double rate = 0;
    double cap = kNoCap;
    Time updated;
    Time latency;
    Time event_at;
    EventId event = kNoEvent;
    std::uint32_t generation = 0;
    std::uint32_t stamp = 0;  // component search mark
    State state = State::free;
  };
  struct HeapEntry {
    double share;
    LinkId link;
    std::uint32_t version;
    bool operator>(const HeapEntry& o) const { return share != o.share ? share > o.share : link > o.link; }
  };

  std::uint32_t allocate();
  // A flow in a free slot with its links recorded; not yet on those links' lists of flows.
  std::uint32_t new_flow(std::span<const LinkId> links, double remaining, double rate, double cap, Time updated, Time latency,
                         State state, Done done);
  void mark(LinkId l);
  void request_solve();
  void solve();
  void freeze(std::uint32_t f, double rate);
  void settle_component();  // comp_flows_ take their next_rate_
  void drained(std::uint32_t slot, std::uint32_t generation);
  void deliver(std::uint32_t slot, std::uint32_t generation);
  static FlowId make_id(std::uint32_t slot, std::uint32_t gen) { return (FlowId(gen) << 32) | slot; }
  void schedule_flow(std::uint32_t slot, Time at, bool delivering);
  void evict_reservations(std::span<const LinkId> links);
  bool reserved(LinkId l) const;  // by a reservation that has not lapsed
  // Books `links` until `until`; false where nothing was booked (already lapsed, or no links).
  bool book(std::span<const LinkId> links, Time until, std::function<void()> evict);
  void free_reservation(std::uint32_t slot);

  struct LinkReservation {
    std::uint32_t slot = 0, generation = 0;
    Time until;  // free from then on
  };
  struct Reservation {
    std::function<void()> evict;
    std::uint32_t generation = 0;
    Time until;
    bool live = false;
  };
  void tell(std::uint32_t who, Time from, Time to);
  void tell_watchers(std::span<const LinkId> links, Time from, Time to);
  void tell_route_watchers(std::uint32_t route, Time from, Time to);
  std::uint32_t watch_version_ = 1;                     // counts watch() calls
  std::vector<std::uint32_t> route_watch_stamp_;        // by route: the watch_version_ of route_watchers_
  std::vector<std::vector<std::uint32_t>> route_watchers_;  // by route: its links' distinct watchers
  std::vector<std::vector<std::uint32_t>> watchers_;  // by link; empty until watch()
  std::vector<std::uint8_t> watched_;                 // by link: has watchers (dense, for the scans); empty until watch()
  std::vector<std::vector<std::pair<Time, Time>>> busy_;  // by watcher
  std::vector<Time> flow_start_;     // by slot, once watching: when the flow came onto its links
  std::vector<char> flow_watched_;   // by slot: it crosses a watched link

  std::vector<LinkReservation> link_res_;
  std::vector<Reservation> reservations_;
  std::vector<std::uint32_t> free_res_;
  // (until, slot, generation), earliest first: reservations that lapsed free their slots.
  std::vector<std::tuple<Time, std::uint32_t, std::uint32_t>> res_expiry_;
  Time last_drained_;
  bool apart_ = true;

  Simulator& sim_;
  const Topology& topo_;
  std::uint64_t serial_;

  std::vector<Flow> flows_;
  std::vector<std::vector<LinkId>> flow_links_;  // per slot; capacity kept when the slot is reused
  std::vector<Done> done_;
  std::vector<std::uint32_t> free_slots_;

  std::vector<double> capacity_;
  std::vector<std::vector<std::uint32_t>> on_link_;  // flow slots, one entry per crossing

  // Solver scratch, sized once.
  std::vector<double> rem_;
  std::vector<std::uint32_t> weight_, version_, link_stamp_, dirty_stamp_, solo_stamp_;
  std::vector<double> next_rate_;
  std::vector<LinkId> dirty_, comp_links_;
  std::vector<std::uint32_t> comp_flows_;
  std::vector<std::pair<double, std::uint32_t>> caps_;
  std::vector<HeapEntry> heap_;
  std::vector<LinkId> shared_;  // the component's links of several flows, when few: scanned, not heaped
  bool use_heap_ = false;

  // Routes (links and cap) interned, by slot; and the rates of components solved before (see the
  // header comment), keyed by their flows' route ids, sorted, each route's rate in key order.
  std::uint32_t intern_route(std::span<const LinkId> links, double cap);
  struct KeyHash {
    std::size_t operator()(const std::vector<std::uint32_t>& k) const;
  };
  std::vector<std::uint32_t> route_of_;                     // by slot
  std::vector<std::vector<LinkId>> route_links_;            // by route id
  std::vector<double> route_cap_;                           // by route id
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> route_ids_;  // by hash of their links and cap
  std::vector<std::pair<std::uint32_t, std::uint32_t>> by_route_;  // scratch: (route, slot) of the component's flows, sorted
  std::vector<std::uint32_t> key_;                          // scratch: the component's route ids, sorted
  std::unordered_map<std::vector<std::uint32_t>, std::vector<double>, KeyHash> solved_;
  std::size_t solved_size_ = 0;                             // route ids held by solved_'s keys
  std::vector<LinkId> route_;
  std::uint32_t epoch_ = 0, dirty_epoch_ = 1;
  bool solve_pending_ = false;

  std::size_t active_ = 0;
  std::uint64_t started_ = 0, solves_ = 0, remembered_ = 0;
  std::vector<std::shared_ptr<void>> held_;
  std::shared_ptr<void> memo_;
};

}  // namespace scaleout
