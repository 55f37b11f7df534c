// simulator/span_label.cpp — the process's one copy of each timeline slice's label (timeline.h: span_label).
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "simulator/timeline.h"

namespace titan {

std::string_view span_label(std::string_view s) {
  // node-based: an element never moves, so the views handed out stay valid for the process's life
  // never destroyed (nor the lock): views outlive static teardown
  static auto* mu = new std::mutex();
  static auto* labels = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(*mu);
  return *labels->emplace(s).first;
}

}  // namespace titan
