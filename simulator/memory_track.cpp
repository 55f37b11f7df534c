// simulator/memory_track.cpp — the memory over the step, repeated passes held by reference (memory_track.h).
#include "simulator/memory_track.h"

#include <algorithm>

#include "src/tensor/error.h"

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

MemoryRecord::MemoryRecord(std::vector<std::pair<double, MemoryBytes>> kernels) : kernels_(std::move(kernels)) {
  for (const auto& [t, b] : kernels_) {
    const bool empty = kept_.empty();
    const int what = keep_rule(empty, empty ? 0.0 : kept_.back().first, !empty && kept_.back().second == b, t);
    if (what == 1) kept_.back() = {t, b};
    else if (what == 2) kept_.push_back({t, b});
    tail_.push_back(kept_.size() - 1);
  }
}

MemorySample PlacedSamples::item(size_t k) const {
  const auto& [t, b] = record->kept()[first + k];
  MemorySample m{t0 + t, {}};
  for (size_t c = 0; c < m.bytes.size(); ++c) m.bytes[c] = (double)(b[c] + shift[c]) * factor[c];
  return m;
}

void MemoryTrack::add(double t, const MemoryBytes& bytes) {
  TITAN_CHECK(!scaled_, "MemoryTrack::add: the track was scaled (scale() comes last)");
  const bool empty = own_.empty();
  const bool same = !empty && std::equal(bytes.begin(), bytes.end(), own_.back().bytes.begin());
  const int what = keep_rule(empty, empty ? 0.0 : own_.back().t, same, t);
  if (what == 0) return;
  MemorySample m{t, {}};
  std::copy(bytes.begin(), bytes.end(), m.bytes.begin());
  if (what == 1) own_.back() = m;
  else own_.push_back(m);
}

void MemoryTrack::place(const std::shared_ptr<const MemoryRecord>& record, double t0, const MemoryBytes& shift) {
  const auto& kernels = record->kernels();
  auto shifted = [&](const MemoryBytes& b) {
    MemoryBytes s = b;
    for (size_t c = 0; c < s.size(); ++c) s[c] += shift[c];
    return s;
  };
  for (size_t j = 0; j < kernels.size(); ++j) {
    add(t0 + kernels[j].first, shifted(kernels[j].second));  // the track's last sample is always owned
    // the record's samples after the last one follow as kept when the next kernel starts a sample of its own
    // (the last is final) and the track's last sample is that one
    const size_t k = record->kept_after(j);
    if (j + 1 == kernels.size() || record->kept_after(j + 1) != k + 1) continue;
    const MemorySample last = PlacedSamples{record, k, 1, t0, shift}.item(0);
    if (own_.back().t != last.t || own_.back().bytes != last.bytes) continue;
    const size_t end = record->kept().size() - 1;  // the record's last sample stays owned (a later add may replace it)
    PlacedCopies::place(PlacedSamples{record, k + 1, end - (k + 1), t0, shift});  // none: nothing placed
    own_.push_back(PlacedSamples{record, end, 1, t0, shift}.item(0));
    return;
  }
}

void MemoryTrack::scale(const std::array<double, kNumMemoryCategories>& f) {
  TITAN_CHECK(!scaled_, "MemoryTrack::scale: the track was scaled already");
  scaled_ = true;
  for (MemorySample& m : own_)
    for (size_t c = 0; c < f.size(); ++c) m.bytes[c] *= f[c];
  for (Placed& p : placed_)
    for (size_t c = 0; c < f.size(); ++c) p.copy.factor[c] *= f[c];
}

}  // namespace titan
