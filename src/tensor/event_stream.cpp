#include "src/tensor/event_stream.h"

#include <algorithm>

#include "src/tensor/cost_segment.h"
#include "src/tensor/error.h"

namespace titan {

EventStream::EventStream(std::vector<CostEvent> owned, std::vector<Run> runs)
    : owned_(std::move(owned)), runs_(std::move(runs)) {
  size_t before = 0, at = 0;
  for (const Run& r : runs_) {
    TITAN_CHECK(r.seg && r.at >= at && r.at <= owned_.size(), "EventStream: run at ", r.at, " out of order (",
                owned_.size(), " owned events)");
    at = r.at;
    run_start_.push_back(r.at + before);
    owned_before_.push_back(r.at);
    before += r.seg->events.size();
  }
  size_ = owned_.size() + before;
}

CostEvent EventStream::operator[](size_t i) const {
  TITAN_CHECK(i < size_, "EventStream: event ", i, " of ", size_);
  // the last run starting at or before i
  auto it = std::upper_bound(run_start_.begin(), run_start_.end(), i);
  if (it == run_start_.begin()) return owned_[i];
  const size_t k = (size_t)(it - run_start_.begin()) - 1;
  const Run& r = runs_[k];
  const size_t off = i - run_start_[k];
  if (off >= r.seg->events.size()) return owned_[owned_before_[k] + (off - r.seg->events.size())];
  CostEvent e;
  make(r, off, e);
  return e;
}

void EventStream::make(const Run& r, size_t off, CostEvent& e) {
  e = r.seg->events[off];
  const auto& shift = e.kind == CostEvent::Kind::Compute ? r.kernel_shift : r.other_shift;
  for (int c = 0; c < kNumMemoryCategories; ++c) e.memory[c] += shift[c];
  if (e.kind != CostEvent::Kind::Compute) e.comm_id = r.first_id + r.seg->id_ordinal[off];
}

const CostEvent& EventStream::Cursor::at(size_t i) {
  const EventStream& s = *s_;
  TITAN_CHECK(i < s.size_, "EventStream: event ", i, " of ", s.size_);
  if (i == made_) return copy_;
  // k_: the first run that starts after i (moves forward as the reads do; back by a search)
  if (k_ > 0 && s.run_start_[k_ - 1] > i)
    k_ = (size_t)(std::upper_bound(s.run_start_.begin(), s.run_start_.end(), i) - s.run_start_.begin());
  while (k_ < s.run_start_.size() && s.run_start_[k_] <= i) ++k_;
  if (k_ == 0) return s.owned_[i];
  const size_t k = k_ - 1;
  const EventStream::Run& r = s.runs_[k];
  const size_t off = i - s.run_start_[k];
  if (off >= r.seg->events.size()) return s.owned_[s.owned_before_[k] + (off - r.seg->events.size())];
  make(r, off, copy_);
  made_ = i;
  return copy_;
}

void EventStream::for_each_recorded(const std::function<void(const CostEvent&, size_t)>& f) const {
  for (const CostEvent& e : owned_) f(e, 1);
  std::vector<std::pair<const CostSegment*, size_t>> copies;  // each record once, in order of its first run
  for (const Run& r : runs_) {
    auto it = std::find_if(copies.begin(), copies.end(), [&](const auto& c) { return c.first == r.seg.get(); });
    if (it == copies.end()) copies.push_back({r.seg.get(), 1});
    else ++it->second;
  }
  for (const auto& [seg, n] : copies)
    for (const CostEvent& e : seg->events) f(e, n);
}

std::vector<CostEvent> EventStream::materialize() const {
  std::vector<CostEvent> out;
  out.reserve(size_);
  for (const CostEvent& e : *this) out.push_back(e);
  return out;
}

void EventStream::subtract_memory(const std::array<int64_t, kNumMemoryCategories>& held) {
  for (CostEvent& e : owned_)
    for (int c = 0; c < kNumMemoryCategories; ++c) e.memory[c] -= held[c];
  for (Run& r : runs_)
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      r.kernel_shift[c] -= held[c];
      r.other_shift[c] -= held[c];
    }
}

}  // namespace titan
