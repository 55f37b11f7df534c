// src/autograd/grad_mode.h — RAII switches for graph recording.
#pragma once

namespace titan::autograd {

bool grad_enabled();

class NoGradGuard {  // ops inside record no graph
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {  // re-enables recording (activation checkpoint recompute)
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace titan::autograd

namespace titan {
using autograd::NoGradGuard;
}
