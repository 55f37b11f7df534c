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

#include "src/tensor/memory.h"

namespace titan {

// The memory a rank holds, by category (bytes per chip, MemoryCategory's order), from when a kernel starts.
struct MemorySample {
  double t = 0;
  std::array<double, kNumMemoryCategories> bytes{};
};
using MemoryBytes = std::array<int64_t, kNumMemoryCategories>;

class MemoryTrack {
 public:
  // A pass's memory as recorded: per kernel, its time from the pass's start and its bytes less the run's shift;
  // and what add() keeps of them on an empty track.
  class Record {
   public:
    explicit Record(std::vector<std::pair<double, MemoryBytes>> kernels);

   private:
    friend class MemoryTrack;
    std::vector<std::pair<double, MemoryBytes>> kernels_;
    std::vector<std::pair<double, MemoryBytes>> kept_;
    std::vector<size_t> tail_;  // kept_'s last index once kernels_[j] is added
  };

  // Appends the memory held at `t` where it changed (a sample at the same time is replaced: the later holds).
  void add(double t, const MemoryBytes& bytes);
  // The record's kernels from t0 on, each `shift` bytes more: as add() one by one would keep them.
  void place(const std::shared_ptr<const Record>& record, double t0, const MemoryBytes& shift);
  // Every sample's bytes of category c times f[c] from now on (as read).
  void scale(const std::array<double, kNumMemoryCategories>& f);

  size_t size() const { return own_.size() + placed_samples_; }
  bool empty() const { return size() == 0; }
  MemorySample operator[](size_t i) const;
  size_t placed_copies() const { return placed_.size(); }

  class const_iterator {  // yields samples by value, in order
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = MemorySample;
    using difference_type = std::ptrdiff_t;
    using reference = MemorySample;  // by value
    using pointer = void;
    MemorySample operator*() const;
    const_iterator& operator++();
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    friend class MemoryTrack;
    const MemoryTrack* t_ = nullptr;
    size_t i_ = 0, copy_ = 0, own_ = 0;  // sample index; the next (or current) placed copy; the next owned sample
  };
  const_iterator begin() const;
  const_iterator end() const;

 private:
  struct Copy {  // kept_[first, first + n) of a record, placed
    std::shared_ptr<const Record> record;
    size_t first = 0, n = 0;
    size_t at = 0;            // the index of its first sample
    size_t owned_before = 0;  // owned samples before it
    double t0 = 0;
    MemoryBytes shift{};
    MemorySample sample(size_t k) const;  // unscaled
  };
  MemorySample scaled(MemorySample s) const;
  MemorySample raw(size_t i) const;

  std::vector<MemorySample> own_;  // the owned samples in order (the track's last sample is always one)
  std::vector<Copy> placed_;       // the placed copies in order
  size_t placed_samples_ = 0;
  std::array<double, kNumMemoryCategories> scale_{};
  bool scaled_ = false;
};

}  // namespace titan
