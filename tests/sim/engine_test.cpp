// The engine: deterministic order (time, priority, FIFO), cancellation, streams with
// cross-stream dependencies.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/engine/chunked_vector.hpp"
#include "sim/engine/simulator.hpp"
#include "sim/engine/stream.hpp"

using namespace scaleout;

TEST_CASE("events run by time, then priority, then insertion order", "[sim]") {
  Simulator sim;
  std::string order;
  sim.schedule_at(Time::from_us(2), [&] { order += "c"; });
  sim.schedule_at(Time::from_us(1), [&] { order += "b"; }, 1);
  sim.schedule_at(Time::from_us(1), [&] { order += "a"; }, 0);
  sim.schedule_at(Time::from_us(1), [&] { order += "B"; }, 1);
  sim.schedule_at(Time::from_us(2), [&] { order += "d"; });
  CHECK(sim.run() == 5);
  CHECK(order == "abBcd");
  CHECK(sim.now() == Time::from_us(2));
}

TEST_CASE("a cancelled event does not run and a stale id cancels nothing", "[sim]") {
  Simulator sim;
  int ran = 0;
  const EventId a = sim.schedule_in(Time::from_ns(10), [&] { ran += 1; });
  sim.schedule_in(Time::from_ns(20), [&] { ran += 10; });
  CHECK(sim.cancel(a));
  CHECK_FALSE(sim.cancel(a));
  sim.run();
  CHECK(ran == 10);
  // The slot of `a` is reused by a new event; the old id must not cancel it.
  sim.schedule_in(Time::from_ns(5), [&] { ran += 100; });
  CHECK_FALSE(sim.cancel(a));
  sim.run();
  CHECK(ran == 110);
}

TEST_CASE("events scheduled from events see the current time", "[sim]") {
  Simulator sim;
  std::vector<double> seen;
  sim.schedule_in(Time::from_us(3), [&] {
    seen.push_back(sim.now().us());
    sim.schedule_in(Time::from_us(4), [&] { seen.push_back(sim.now().us()); });
  });
  sim.run();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == Approx(3));
  CHECK(seen[1] == Approx(7));
}

TEST_CASE("run(limit) stops before later events", "[sim]") {
  Simulator sim;
  int ran = 0;
  sim.schedule_at(Time::from_us(1), [&] { ++ran; });
  sim.schedule_at(Time::from_us(5), [&] { ++ran; });
  sim.run(Time::from_us(2));
  CHECK(ran == 1);
  sim.run();
  CHECK(ran == 2);
}

TEST_CASE("a stream runs its tasks in order, one at a time", "[sim]") {
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId s = ex.add_stream();
  const TaskId a = ex.add(s, Time::from_us(3));
  const TaskId b = ex.add(s, Time::from_us(2));
  ex.start();
  sim.run();
  CHECK(ex.finish_time(a) == Time::from_us(3));
  CHECK(ex.start_time(b) == Time::from_us(3));
  CHECK(ex.finish_time(b) == Time::from_us(5));
}

TEST_CASE("a task waits for its dependencies on other streams", "[sim]") {
  // host issues launches of 1 us; GPU kernels of 5 us and 0.5 us: the second kernel waits for the
  // first kernel (same stream), the third for its own launch (host-bound).
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId host = ex.add_stream(), gpu = ex.add_stream();
  const TaskId h1 = ex.add(host, Time::from_us(1));
  const TaskId h2 = ex.add(host, Time::from_us(1));
  const TaskId g1 = ex.add(gpu, Time::from_us(5), {h1});
  const TaskId g2 = ex.add(gpu, Time::from_ns(500), {h2});
  const TaskId h3 = ex.add(host, Time::from_us(10));
  const TaskId g3 = ex.add(gpu, Time::from_ns(500), {h3});
  ex.start();
  sim.run();
  CHECK(ex.start_time(g1) == Time::from_us(1));
  CHECK(ex.start_time(g2) == Time::from_us(6));
  CHECK(ex.finish_time(h3) == Time::from_us(12));
  CHECK(ex.start_time(g3) == Time::from_us(12));
  CHECK(ex.all_finished());
}

TEST_CASE("tasks of no length end as they start, without events, however long their chain", "[sim]") {
  // Barriers and memory-only tasks last nothing: they finish at once (in order, without nesting
  // calls), and what waits on them starts at the same instant as it would through an event each.
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId a = ex.add_stream(), b = ex.add_stream();
  const TaskId k1 = ex.add(a, Time::from_us(2));
  TaskId prev = k1;
  for (int i = 0; i < 100000; ++i) prev = ex.add(i % 2 ? a : b, Time::zero(), {prev});
  const TaskId k2 = ex.add(b, Time::from_us(3), {prev});
  std::vector<std::pair<TaskId, Time>> finished;
  ex.on_finish([&](TaskId id, Time at) {
    if (id == k1 || id == prev || id == k2) finished.push_back({id, at});
  });
  ex.start();
  const std::uint64_t events = sim.run();
  CHECK(ex.all_finished());
  CHECK(ex.start_time(prev) == Time::from_us(2));
  CHECK(ex.start_time(k2) == Time::from_us(2));
  CHECK(ex.finish_time(k2) == Time::from_us(5));
  CHECK(events == 2);  // the two kernels' ends
  REQUIRE(finished.size() == 3);
  CHECK(finished[0].first == k1);
  CHECK(finished[1].first == prev);
  CHECK(finished[2].first == k2);
}

TEST_CASE("a launched task completes when its launcher says so", "[sim]") {
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId s = ex.add_stream();
  const TaskId t = ex.add_launched(s, [&](TaskId id) { sim.schedule_in(Time::from_us(7), [&ex, id] { ex.finish(id); }); }, {});
  const TaskId after = ex.add(s, Time::from_us(1));
  ex.start();
  sim.run();
  CHECK(ex.finish_time(t) == Time::from_us(7));
  CHECK(ex.finish_time(after) == Time::from_us(8));
}

TEST_CASE("launchers released after the run: the results stay, a later launch is refused", "[sim]") {
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId s = ex.add_stream();
  int calls = 0;
  const TaskId t = ex.add_launched(s, [&](TaskId id) { ++calls; sim.schedule_in(Time::from_us(3), [&ex, id] { ex.finish(id); }); }, {});
  ex.start();
  sim.run();
  ex.release_launchers();
  CHECK(calls == 1);
  CHECK(ex.finish_time(t) == Time::from_us(3));
  CHECK(ex.all_finished());
  CHECK_THROWS_WITH(ex.add_launched(s, [](TaskId) {}, {}), Catch::Contains("release_launchers"));
}

TEST_CASE("a launched task that would start after its launchers were released is refused", "[sim]") {
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId s = ex.add_stream();
  ex.add(s, Time::from_us(5));
  int calls = 0;
  const TaskId late = ex.add_launched(s, [&](TaskId id) { ++calls; ex.finish(id); }, {});
  ex.start();
  sim.run(Time::from_us(1));  // the first task still runs: the launched one has not started
  ex.release_launchers();
  CHECK_THROWS_WITH(sim.run(), Catch::Contains("release_launchers"));
  CHECK(calls == 0);
  CHECK(ex.start_time(late) == Time::from_us(5));  // started (its hooks ran), never launched
}

TEST_CASE("a dependency on a later task, and a cycle leaves tasks unfinished", "[sim]") {
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId a = ex.add_stream(), b = ex.add_stream();
  const TaskId first = ex.add(a, Time::from_us(1));
  const TaskId later = ex.add(b, Time::from_us(4));
  ex.add_dependency(first, later);
  ex.start();
  sim.run();
  CHECK(ex.start_time(first) == Time::from_us(4));

  Simulator sim2;
  StreamExecutor cyc(sim2);
  const StreamId s1 = cyc.add_stream(), s2 = cyc.add_stream();
  const TaskId x = cyc.add(s1, Time::from_us(1));
  const TaskId y = cyc.add(s2, Time::from_us(1), {x});
  cyc.add_dependency(x, y);
  cyc.start();
  sim2.run();
  CHECK_FALSE(cyc.all_finished());
}

TEST_CASE("a chunked vector keeps its elements in place across chunks, and gives them back", "[sim]") {
  using V = ChunkedVector<std::uint32_t>;
  STATIC_REQUIRE(V::kPerChunk * sizeof(std::uint32_t) <= V::kChunkBytes);
  V v;
  v.reserve(3 * V::kPerChunk);
  for (std::uint32_t i = 0; i < 3 * V::kPerChunk + 5; ++i) v.push_back(i * 7u);
  const std::uint32_t* first = &v[0];
  v.push_back(1);  // a new element moves none of the others
  CHECK(&v[0] == first);
  REQUIRE(v.size() == 3 * V::kPerChunk + 6);
  bool all = true;
  for (std::uint32_t i = 0; i < 3 * V::kPerChunk + 5; ++i) all = all && v[i] == i * 7u;
  CHECK(all);
  CHECK(v.back() == 1u);
  CHECK(reinterpret_cast<std::uintptr_t>(&v[V::kPerChunk]) % 64 == 0);  // a chunk starts on a cache line
  v.grow_to(v.size() + 2, 9u);
  CHECK(v[v.size() - 2] == 9u);
  v.grow_to(3, 0u);  // never shrinks
  CHECK(v.size() == 3 * V::kPerChunk + 8);
  V w = std::move(v);
  CHECK(v.empty());
  CHECK(w[V::kPerChunk + 1] == (V::kPerChunk + 1) * 7u);
  // Elements with destructors are destroyed on clear (and by the destructor).
  auto token = std::make_shared<int>(0);
  {
    ChunkedVector<std::shared_ptr<int>> owners;
    for (int i = 0; i < 5000; ++i) owners.push_back(token);
    CHECK(token.use_count() == 5001);
    owners.clear();
    CHECK(token.use_count() == 1);
    owners.emplace_back(token);
  }
  CHECK(token.use_count() == 1);
}
