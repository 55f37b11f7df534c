// src/train/metrics.h — TorchTitan-style step logging, JSONL, timing.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "src/log/log.h"

namespace titan {

int64_t physical_memory_bytes();
int64_t max_rss_bytes();


struct StepMetrics {
  int64_t step;
  double loss, grad_norm, lr;
  double memory_gib, memory_pct;
  double tps, tflops, mfu_pct;
  double elapsed_s;
};
std::string format_step_line(const StepMetrics& m);

class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path);
  ~JsonlWriter();
  void write(const std::string& json_line);
  bool open() const { return f_ != nullptr; }

 private:
  std::FILE* f_ = nullptr;
};


}  // namespace titan
