#include "src/train/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <iostream>
#include <sstream>

namespace titan {

namespace {
const auto g_start = std::chrono::steady_clock::now();
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double process_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count(); }

std::string now_hms() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

std::string with_commas(double v) {
  std::string s = std::to_string((long long)std::llround(v));
  int start = s[0] == '-' ? 1 : 0;
  for (int i = (int)s.size() - 3; i > start; i -= 3) s.insert(i, ",");
  return s;
}

int64_t physical_memory_bytes() { return (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE); }

int64_t max_rss_bytes() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return (int64_t)r.ru_maxrss * 1024;
}

namespace {
bool g_log = true;
}
void set_log_enabled(bool on) { g_log = on; }

void log_info(const std::string& msg) {
  if (!g_log) return;
  std::cout << "[titan] " << now_hms() << " - " << msg << std::endl;
}

std::string format_step_line(const StepMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step: %2lld  loss: %7.5f  grad_norm: %7.4f  memory: %5.2fGiB(%.2f%%)  tps: %s  tflops: %.2f  "
                "mfu: %.2f%%",
                (long long)m.step, m.loss, m.grad_norm, m.memory_gib, m.memory_pct, with_commas(m.tps).c_str(),
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

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(total > 0 ? total : 1), t0_(wall_seconds()) {}

void ProgressBar::update(int64_t done) {
  int pct = (int)(100.0 * (double)done / (double)total_);
  if (pct == last_pct_) return;
  last_pct_ = pct;
  const int width = 30, fill = pct * width / 100;
  double rate = (double)done / std::max(1e-9, wall_seconds() - t0_) / 1e6;
  std::cerr << "\r" << label_ << " [" << std::string(fill, '#') << std::string(width - fill, ' ') << "] " << pct
            << "% " << std::fixed;
  std::cerr.precision(1);
  std::cerr << rate << " MB/s" << std::flush;
}

void ProgressBar::finish() {
  update(total_);
  std::cerr << std::endl;
}

}  // namespace titan
