// simulator/timeline.cpp — a rank's timeline, repeated passes held by reference (timeline.h).
#include "simulator/timeline.h"

#include <algorithm>

namespace titan {

SimSpan Timeline::Copy::slice(size_t k) const {
  SimSpan s = (*record)[k];
  s.start += t0;
  if (s.dep.lane == kDepInPass) s.dep = {lane, (int64_t)at + s.dep.span};
  else if (s.dep.lane == kDepBeforeCompute) s.dep = {lane, before_compute};
  else if (s.dep.lane == kDepBeforeStream) s.dep = {lane, before_stream[(size_t)s.dep.span]};
  if (s.flow_to >= 0) s.flow_to += (int64_t)at;
  if (s.event >= 0) s.event += event0;
  return s;
}

size_t Timeline::copy_at(size_t i) const {
  auto it = std::upper_bound(placed_.begin(), placed_.end(), i, [](size_t v, const Copy& c) { return v < c.at; });
  if (it == placed_.begin()) return placed_.size();
  --it;
  return i < it->at + it->n() ? (size_t)(it - placed_.begin()) : placed_.size();
}

namespace {
// the index in the owned slices of slice i, which no placed copy holds: i less the placed slices before it
template <class Copies>
size_t owned_index(const Copies& placed, size_t i) {
  auto it = std::upper_bound(placed.begin(), placed.end(), i, [](size_t v, const auto& c) { return v < c.at; });
  if (it == placed.begin()) return i;
  --it;  // the last copy before i: the slices before its end less the owned ones among them
  return i - (it->at - it->owned_before + it->n());
}
}  // namespace

SimSpan Timeline::operator[](size_t i) const {
  const size_t c = copy_at(i);
  if (c < placed_.size()) return placed_[c].slice(i - placed_[c].at);
  return own_[owned_index(placed_, i)];
}

void Timeline::write_out(size_t c) {
  const Copy& copy = placed_[c];
  std::vector<SimSpan> slices;
  slices.reserve(copy.n());
  for (size_t k = 0; k < copy.n(); ++k) slices.push_back(copy.slice(k));
  own_.insert(own_.begin() + (std::ptrdiff_t)copy.owned_before, slices.begin(), slices.end());
  placed_slices_ -= copy.n();
  for (size_t d = c + 1; d < placed_.size(); ++d) placed_[d].owned_before += copy.n();
  placed_.erase(placed_.begin() + (std::ptrdiff_t)c);
}

SimSpan& Timeline::edit(size_t i) {
  const size_t c = copy_at(i);
  if (c < placed_.size()) write_out(c);
  return own_[owned_index(placed_, i)];
}

void Timeline::place(Record record, double t0, int lane, int64_t event0, int64_t before_compute,
                     std::vector<int64_t> before_stream) {
  if (record->empty()) return;
  Copy c;
  c.at = size();
  c.owned_before = own_.size();
  c.t0 = t0;
  c.lane = lane;
  c.event0 = event0;
  c.before_compute = before_compute;
  c.before_stream = std::move(before_stream);
  placed_slices_ += record->size();
  c.record = std::move(record);
  placed_.push_back(std::move(c));
}

std::vector<SimSpan>& Timeline::flat() {
  if (placed_.empty()) return own_;
  std::vector<SimSpan> all;
  all.reserve(size());
  for (const SimSpan& s : *this) all.push_back(s);
  own_ = std::move(all);
  placed_.clear();
  placed_slices_ = 0;
  return own_;
}

SimSpan Timeline::const_iterator::operator*() const {
  if (copy_ < t_->placed_.size() && i_ >= t_->placed_[copy_].at) {
    const Copy& c = t_->placed_[copy_];
    return c.slice(i_ - c.at);
  }
  return t_->own_[own_];
}

Timeline::const_iterator& Timeline::const_iterator::operator++() {
  if (copy_ < t_->placed_.size() && i_ >= t_->placed_[copy_].at) {
    if (++i_ == t_->placed_[copy_].at + t_->placed_[copy_].n()) ++copy_;
  } else {
    ++i_;
    ++own_;
  }
  return *this;
}

Timeline::const_iterator Timeline::begin() const {
  const_iterator it;
  it.t_ = this;
  return it;
}

Timeline::const_iterator Timeline::end() const {
  const_iterator it;
  it.t_ = this;
  it.i_ = size();
  return it;
}

}  // namespace titan
