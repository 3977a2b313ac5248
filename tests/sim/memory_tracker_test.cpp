// The memory tracker: a recorded run's changes applied at once (MemoryTracker::Block) give the
// same level, peak, peak time and breakdown as the same changes told one by one, whatever falls
// around them: allocations and frees of other tasks, changes arriving out of time order,
// changes inside a block's span, parts of a byte.
#include <catch2/catch.hpp>

#include <deque>
#include <random>
#include <vector>

#include "sim/training/memory_tracker.hpp"

using namespace scaleout;

namespace {

// Two trackers fed the same changes: `blocks` gets each run as a block, `each` one by one.
struct Pair {
  MemoryTracker blocks, each;
  void alloc(MemCategory c, double bytes, Time at) {
    blocks.alloc(c, bytes, at);
    each.alloc(c, bytes, at);
  }
  void later(MemCategory c, double bytes, Time at) {
    blocks.later(c, bytes, at);
    each.later(c, bytes, at);
  }
  void run(const MemoryTracker::Block& b, Time start) {
    blocks.later_block(b, start);
    for (const auto& x : b.changes) each.later(x.c, x.bytes, start + x.offset);
  }
  void same() {
    blocks.settle();
    each.settle();
    CHECK(blocks.current() == each.current());
    CHECK(blocks.peak() == each.peak());
    CHECK(blocks.peak_time() == each.peak_time());
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) CHECK(blocks.peak_breakdown()[c] == each.peak_breakdown()[c]);
  }
};

MemCategory category(std::mt19937& rng) { return static_cast<MemCategory>(rng() % kMemCategoryCount); }

}  // namespace

TEST_CASE("a block's running totals: its highest point, where it is, what it holds", "[sim][memory]") {
  MemoryTracker::Block b;
  b.changes = {{Time::from_us(0), 100, MemCategory::activations},
               {Time::from_us(1), 50, MemCategory::other},
               {Time::from_us(1), -50, MemCategory::other},
               {Time::from_us(2), 50, MemCategory::activations},
               {Time::from_us(3), -120, MemCategory::activations}};
  REQUIRE(b.build());
  CHECK(b.peak_gain == 150);  // the first of the two running totals of 150
  CHECK(b.peak_offset == Time::from_us(1));
  CHECK(b.at_peak[std::size_t(MemCategory::activations)] == 100);
  CHECK(b.at_peak[std::size_t(MemCategory::other)] == 50);
  CHECK(b.net_total == 30);
  CHECK(b.low_gain == 30);
  CHECK(b.span == Time::from_us(3));
  MemoryTracker::Block late = b;
  late.changes[3].offset = Time::zero();  // out of time order
  CHECK_FALSE(late.build());
  MemoryTracker::Block part = b;
  part.changes[1].bytes = 0.5;  // part of a byte: sums would round in another order
  CHECK_FALSE(part.build());
}

TEST_CASE("runs applied as blocks match their changes told one by one", "[sim][memory]") {
  // Runs follow one another on their stream (each starts once the last has ended); other tasks'
  // allocations and frees come at the simulation's clock, behind or inside them; changes dated
  // ahead come from runs on other streams. `busy`: how often something other than a run comes.
  for (const int busy : {0, 2, 5}) {
    for (const bool parts : {false, true}) {
      for (std::uint32_t seed = 1; seed <= 30; ++seed) {
        INFO("seed " << seed << ", busy " << busy << (parts ? ", with parts of bytes" : ""));
        std::mt19937 rng(seed);
        Pair p;
        p.alloc(MemCategory::params, 1e9, Time::zero());  // (never freed below zero)
        std::deque<MemoryTracker::Block> kept;
        Time now = Time::zero(), stream = Time::zero();
        for (int step = 0; step < 300; ++step) {
          now = now + Time::from_us(int(rng() % 5));
          const auto what = rng() % 10;
          if (what >= std::uint32_t(2 * busy)) {
            // A run starting when its stream is free: changes at increasing offsets, some at one instant.
            const Time start = max(now, stream);
            MemoryTracker::Block& b = kept.emplace_back();
            Time off = Time::from_us(int(rng() % 3));
            const int n = 1 + int(rng() % 12);
            for (int i = 0; i < n; ++i) {
              off = off + Time::from_us(int(rng() % 3));
              double bytes = double(int(rng() % 2001) - 1000);
              if (parts && rng() % 20 == 0) bytes += 1.0 / 3.0;
              b.changes.push_back({off, bytes, category(rng)});
            }
            stream = start + off + Time::from_us(int(rng() % 3));
            if (b.build())
              p.run(b, start);
            else
              for (const auto& x : b.changes) p.later(x.c, x.bytes, start + x.offset);
          } else if (what % 2 == 0) {
            p.alloc(category(rng), double(int(rng() % 2001) - 1000), now);  // another task's, at its start or end
          } else {
            // A change dated ahead (a run on another stream), maybe inside a pending block's span.
            p.later(category(rng), double(int(rng() % 2001) - 1000), now + Time::from_us(int(rng() % 20)));
          }
        }
        p.same();
      }
    }
  }
}
