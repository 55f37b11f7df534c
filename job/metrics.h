// job/metrics.h — TorchTitan-style step logging, JSONL, timing.
// Every write is checked: a full disk is an error naming the file, never an empty file.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "src/log/log.h"
#include "src/tensor/memory.h"  // physical_memory_bytes

namespace titan {

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
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Writes `text` to `path` through path.tmp + fsync + rename; a failed write (ENOSPC, EIO) throws naming the file.
void write_file_checked(const std::string& path, const std::string& text);
// A resumed job drops the rows of metrics.jsonl after the step it resumed from (they are about to be redone).
void truncate_metrics_after(const std::string& path, int64_t step);


}  // namespace titan
