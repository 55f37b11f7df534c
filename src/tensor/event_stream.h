// src/tensor/event_stream.h — a trace's events, its repeated passes kept as references to their record.
//
// A meta plan of a long pipeline repeats most of its passes (cost_segment.h): at PP 64 with 512 micro-batches
// 60,992 of a stage's 65,536 passes are copies of a handful of records, each with its memory moved to the bytes
// held when it ran and its collectives renumbered. Copied out, they were most of the planner's memory (millions
// of events) and of its time (writing them). An EventStream holds the events recorded one by one and, between
// them, runs of a record, and gives every event by its place in program order exactly as the copy held it: a
// run's event is made when it is read (its memory shifted, its collective id = the run's first id + the order in
// which the record first used it).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <vector>

#include "src/tensor/cost.h"
#include "src/tensor/memory.h"

namespace titan {

struct CostSegment;  // cost_segment.h

class EventStream {
 public:
  using Run = CostRepeat;  // cost.h

  EventStream() = default;
  EventStream(std::vector<CostEvent> owned, std::vector<Run> runs = {});  // runs in order of `at`

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  CostEvent operator[](size_t i) const;  // the i-th in program order (a run's made on the fly)
  std::vector<CostEvent> materialize() const;  // every event, copied out

  // The repeated passes: run k's record (run(k).seg, its events run_begin(k) .. + seg->events.size() in program
  // order, made as run(k) shifts them). A scheduler that priced one copy of a record from a like state may
  // place the next copy as a whole (simulator/schedule.cpp).
  // Every event as recorded, a repeated record's once with its number of copies (memory and collective ids as
  // recorded, not shifted): for what does not depend on where a copy runs (FLOPs, precisions, slice counts).
  void for_each_recorded(const std::function<void(const CostEvent&, size_t copies)>& f) const;
  size_t run_count() const { return runs_.size(); }
  const Run& run(size_t k) const { return runs_[k]; }
  size_t run_begin(size_t k) const { return run_start_[k]; }

  // Every event's memory less `held` (the bytes held before the step: plan_step makes them the step's own). A
  // cursor made before keeps its copy of the event it last made: make cursors after.
  void subtract_memory(const std::array<int64_t, kNumMemoryCategories>& held);

  // Reads in (mostly) increasing order without a search: the event at i, as operator[] gives it, valid until
  // the next call (an owned event by reference, a repeated one made into the cursor's copy).
  class Cursor {
   public:
    Cursor() = default;
    explicit Cursor(const EventStream* s) : s_(s) {}
    const CostEvent& at(size_t i);

   private:
    const EventStream* s_ = nullptr;
    size_t k_ = 0;             // the first run starting after the last event read (runs_.size(): none)
    size_t made_ = SIZE_MAX;   // the event in `copy_`
    CostEvent copy_;
  };

  class const_iterator {  // reads in order (an input iterator: a reference lasts until the next step)
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = CostEvent;
    using difference_type = std::ptrdiff_t;
    using pointer = const CostEvent*;
    using reference = const CostEvent&;
    const_iterator() = default;
    const_iterator(const EventStream* s, size_t i) : c_(s), i_(i) {}
    const CostEvent& operator*() { return c_.at(i_); }
    const CostEvent* operator->() { return &c_.at(i_); }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    Cursor c_;
    size_t i_ = 0;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  // the event at `off` in run `r`, as its copy would be: into `e`
  static void make(const Run& r, size_t off, CostEvent& e);
  std::vector<CostEvent> owned_;
  std::vector<Run> runs_;
  std::vector<size_t> run_start_;  // each run's first place in program order
  std::vector<size_t> owned_before_;  // owned events before each run (its `at`)
  size_t size_ = 0;
};

}  // namespace titan
