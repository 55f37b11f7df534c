// simulator/memory_track.h — the memory a rank holds over the step, sample by sample; a repeated pass's samples
// held by reference to its record, as a Timeline holds its slices (timeline.h).
//
// The scheduler adds a sample per kernel where the memory changed. A pass placed whole (schedule.cpp) adds its
// record's samples from where it starts: the first ones one by one against the track's last sample, until the
// track's last sample is the one the record kept at that point; the record's later samples follow it unchanged
// (add's choices depend on the last sample only), so they are held by reference, the last one owned (a later
// add may replace it). Reading gives what adding each kernel's memory one by one would have kept, with one
// rounding difference: the record decides "a sample at the same time" on times from the pass's start, so two
// kernels less than a rounding step of the start apart (~1e-15 s into a step of seconds) keep two samples
// where adding them at their absolute times could have kept one.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "simulator/placed_copies.h"
#include "src/tensor/memory.h"

namespace titan {

// The memory a rank holds, by category (bytes per chip, MemoryCategory's order), from when a kernel starts.
struct MemorySample {
  double t = 0;
  std::array<double, kNumMemoryCategories> bytes{};
};
using MemoryBytes = std::array<int64_t, kNumMemoryCategories>;

// A pass's memory as recorded: per kernel, its time from the pass's start and its bytes less the run's shift;
// and what MemoryTrack::add keeps of them on an empty track.
class MemoryRecord {
 public:
  explicit MemoryRecord(std::vector<std::pair<double, MemoryBytes>> kernels);
  const std::vector<std::pair<double, MemoryBytes>>& kernels() const { return kernels_; }
  const std::vector<std::pair<double, MemoryBytes>>& kept() const { return kept_; }
  size_t kept_after(size_t j) const { return tail_[j]; }  // kept()'s last index once kernels()[j] is added

 private:
  std::vector<std::pair<double, MemoryBytes>> kernels_, kept_;
  std::vector<size_t> tail_;
};

// kept()[first, first + count) of a record, placed from t0 with `shift` more bytes, times `factor` per category
struct PlacedSamples {
  std::shared_ptr<const MemoryRecord> record;
  size_t first = 0, count = 0;
  double t0 = 0;
  MemoryBytes shift{};
  std::array<double, kNumMemoryCategories> factor{1, 1, 1, 1, 1, 1};
  size_t n() const { return count; }
  MemorySample item(size_t k) const;
};

class MemoryTrack : public PlacedCopies<MemorySample, PlacedSamples> {
 public:
  using Record = MemoryRecord;
  // Appends the memory held at `t` where it changed (a sample at the same time is replaced: the later holds).
  void add(double t, const MemoryBytes& bytes);
  // The record's kernels from t0 on, each `shift` bytes more: as add() one by one would keep them.
  void place(const std::shared_ptr<const MemoryRecord>& record, double t0, const MemoryBytes& shift);
  // Every sample's bytes of category c times f[c], once the track is complete (once: the per-chip scaling).
  void scale(const std::array<double, kNumMemoryCategories>& f);

 private:
  bool scaled_ = false;
};

}  // namespace titan
