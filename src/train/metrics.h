// src/train/metrics.h — TorchTitan-style step logging, JSONL, timing.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace titan {

double wall_seconds();  // monotonic
double process_seconds();  // since process start (first call to this file's clock)
std::string now_hms();
std::string with_commas(double v);  // 12,345
int64_t physical_memory_bytes();
int64_t max_rss_bytes();

// "[titan] 05:12:01 - " prefix, like TorchTitan's logger; only rank 0 prints
// (set_log_enabled(false) on the others).
void log_info(const std::string& msg);
void set_log_enabled(bool on);

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

// A terminal progress bar on stderr: "label [#####     ] 45% 1.2 MB/s"
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  void update(int64_t done);
  void finish();

 private:
  std::string label_;
  int64_t total_;
  double t0_;
  int last_pct_ = -1;
};

}  // namespace titan
