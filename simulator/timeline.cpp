// simulator/timeline.cpp — a placed copy's slices (timeline.h).
#include "simulator/timeline.h"

namespace titan {

SimSpan PlacedSlices::item(size_t k) const {
  SimSpan s = (*record)[k];
  s.start += t0;
  if (s.dep.lane == Timeline::kDepInPass) s.dep = {lane, s0 + s.dep.span};
  else if (s.dep.lane == Timeline::kDepBeforeCompute) s.dep = {lane, before_compute};
  else if (s.dep.lane == Timeline::kDepBeforeStream) s.dep = {lane, before_stream[(size_t)s.dep.span]};
  if (s.flow_to >= 0) s.flow_to += s0;
  if (s.event >= 0) s.event += event0;
  return s;
}

}  // namespace titan
