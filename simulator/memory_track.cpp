// simulator/memory_track.cpp — the memory over the step, repeated passes held by reference (memory_track.h).
#include "simulator/memory_track.h"

#include <algorithm>

namespace titan {

namespace {
// add()'s rule: unchanged memory adds nothing (0); a sample at the last one's time replaces it (1); else a new
// sample (2)
int keep_rule(bool empty, double last_t, bool same_bytes, double t) {
  if (!empty && same_bytes) return 0;
  if (!empty && last_t == t) return 1;
  return 2;
}
}  // namespace

MemoryTrack::Record::Record(std::vector<std::pair<double, MemoryBytes>> kernels) : kernels_(std::move(kernels)) {
  for (const auto& [t, b] : kernels_) {
    const bool empty = kept_.empty();
    const int what = keep_rule(empty, empty ? 0.0 : kept_.back().first, !empty && kept_.back().second == b, t);
    if (what == 1) kept_.back() = {t, b};
    else if (what == 2) kept_.push_back({t, b});
    tail_.push_back(kept_.size() - 1);
  }
}

void MemoryTrack::add(double t, const MemoryBytes& bytes) {
  const bool empty = own_.empty();
  const bool same = !empty && std::equal(bytes.begin(), bytes.end(), own_.back().bytes.begin());
  const int what = keep_rule(empty, empty ? 0.0 : own_.back().t, same, t);
  if (what == 0) return;
  MemorySample m{t, {}};
  std::copy(bytes.begin(), bytes.end(), m.bytes.begin());
  if (what == 1) own_.back() = m;
  else own_.push_back(m);
}

MemorySample MemoryTrack::Copy::sample(size_t k) const {
  const auto& [t, b] = record->kept_[first + k];
  MemorySample m{t0 + t, {}};
  for (int c = 0; c < kNumMemoryCategories; ++c) m.bytes[(size_t)c] = (double)(b[(size_t)c] + shift[(size_t)c]);
  return m;
}

void MemoryTrack::place(const std::shared_ptr<const Record>& record, double t0, const MemoryBytes& shift) {
  const auto& kernels = record->kernels_;
  auto shifted = [&](const MemoryBytes& b) {
    MemoryBytes s = b;
    for (size_t c = 0; c < s.size(); ++c) s[c] += shift[c];
    return s;
  };
  for (size_t j = 0; j < kernels.size(); ++j) {
    add(t0 + kernels[j].first, shifted(kernels[j].second));
    // the record's samples after the last one follow as kept when the next kernel starts a sample of its own
    // (the last is final) and the track's last sample is that one
    const size_t k = record->tail_[j];
    if (j + 1 == kernels.size() || record->tail_[j + 1] != k + 1) continue;
    const MemorySample last = Copy{record, k, 1, 0, 0, t0, shift}.sample(0);
    if (own_.back().t != last.t || own_.back().bytes != last.bytes) continue;
    const size_t end = record->kept_.size() - 1;  // the record's last sample stays owned
    if (end > k + 1) {
      placed_.push_back(Copy{record, k + 1, end - (k + 1), size(), own_.size(), t0, shift});
      placed_samples_ += end - (k + 1);
    }
    own_.push_back(Copy{record, end, 1, 0, 0, t0, shift}.sample(0));
    return;
  }
}

void MemoryTrack::scale(const std::array<double, kNumMemoryCategories>& f) {
  if (!scaled_) scale_.fill(1.0);
  scaled_ = true;
  for (size_t c = 0; c < f.size(); ++c) scale_[c] *= f[c];
}

MemorySample MemoryTrack::scaled(MemorySample s) const {
  if (scaled_)
    for (size_t c = 0; c < s.bytes.size(); ++c) s.bytes[c] *= scale_[c];
  return s;
}

MemorySample MemoryTrack::raw(size_t i) const {
  auto it = std::upper_bound(placed_.begin(), placed_.end(), i, [](size_t v, const Copy& c) { return v < c.at; });
  if (it == placed_.begin()) return own_[i];
  --it;
  if (i < it->at + it->n) return it->sample(i - it->at);
  return own_[i - (it->at - it->owned_before + it->n)];
}

MemorySample MemoryTrack::operator[](size_t i) const { return scaled(raw(i)); }

MemorySample MemoryTrack::const_iterator::operator*() const {
  if (copy_ < t_->placed_.size() && i_ >= t_->placed_[copy_].at) {
    const Copy& c = t_->placed_[copy_];
    return t_->scaled(c.sample(i_ - c.at));
  }
  return t_->scaled(t_->own_[own_]);
}

MemoryTrack::const_iterator& MemoryTrack::const_iterator::operator++() {
  if (copy_ < t_->placed_.size() && i_ >= t_->placed_[copy_].at) {
    if (++i_ == t_->placed_[copy_].at + t_->placed_[copy_].n) ++copy_;
  } else {
    ++i_;
    ++own_;
  }
  return *this;
}

MemoryTrack::const_iterator MemoryTrack::begin() const {
  const_iterator it;
  it.t_ = this;
  return it;
}

MemoryTrack::const_iterator MemoryTrack::end() const {
  const_iterator it;
  it.t_ = this;
  it.i_ = size();
  return it;
}

}  // namespace titan
