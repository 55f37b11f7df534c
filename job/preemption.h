// job/preemption.h — SIGTERM / SIGINT as a scheduler sends them.
//
// While a PreemptionGuard lives, the first SIGTERM or SIGINT only sets a flag
// (and says so on stderr): the training loop finishes the step it is in,
// writes a checkpoint, and returns. A second signal exits at once with
// 128 + signal. The previous handlers come back when the guard ends.
#pragma once

namespace titan {

class PreemptionGuard {
 public:
  PreemptionGuard();
  ~PreemptionGuard();
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;
  // The signal received (0 when none).
  int signal() const;
};

}  // namespace titan
