#include "src/train/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <iostream>
#include <sstream>

namespace titan {

int64_t physical_memory_bytes() { return (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE); }

int64_t max_rss_bytes() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return (int64_t)r.ru_maxrss * 1024;
}

std::string format_step_line(const StepMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step: %2lld  loss: %7.5f  grad_norm: %7.4f  lr: %.4e  memory: %5.2fGiB(%.2f%%)  tps: %s  tflops: %.2f  "
                "mfu: %.2f%%",
                (long long)m.step, m.loss, m.grad_norm, m.lr, m.memory_gib, m.memory_pct, with_commas(m.tps).c_str(),
                m.tflops, m.mfu_pct);
  return buf;
}

JsonlWriter::JsonlWriter(const std::string& path) { f_ = std::fopen(path.c_str(), "a"); }
JsonlWriter::~JsonlWriter() {
  if (f_) std::fclose(f_);
}
void JsonlWriter::write(const std::string& line) {
  if (!f_) return;
  std::fputs(line.c_str(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
}

}  // namespace titan
