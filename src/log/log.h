// src/log/log.h — TorchTitan-style log lines, clocks, and progress of long work.
//
// log_info prints "[titan] 2026-11-30 05:12:01 - msg" on the ranks where
// logging is enabled (rank 0). Progress reports work that takes more than a
// couple of seconds (model init, checkpoint I/O, export, evaluation,
// tokenization, benchmarks): rate and ETA, a self-rewriting bar on a
// terminal, plain lines when stdout is a file or a pipe.
#pragma once
#include <cstdint>
#include <string>

namespace titan {

// One number through a printf format ("%.2f"), as a string.
std::string fmt(const char* f, double v);

double wall_seconds();     // monotonic
double process_seconds();  // since process start (first call to this file's clock)
std::string now_hms();
std::string with_commas(double v);  // 12,345

void log_info(const std::string& msg);
void set_log_enabled(bool on);
bool log_enabled();

// Progress of `total` units of work. Silent while the work is younger than
// `quiet_s` seconds, so short work prints nothing; then
//   terminal: "[titan] saving checkpoint [########      ] 57%  4.1/7.2 GB  310 MB/s  ETA 0:10" (rewritten in place)
//   pipe:     the same as a plain log line, at most every 10% / 5 s.
// `unit` "B" prints sizes and MB/s; any other unit prints counts ("tensors", "batches").
class Progress {
 public:
  Progress(std::string label, int64_t total, std::string unit = "B", double quiet_s = 2.0);
  ~Progress();
  void update(int64_t done);  // absolute amount done
  void add(int64_t n = 1) { update(done_ + n); }
  // Ends the bar; when anything was shown, prints a closing line with the elapsed time and rate.
  void finish();
  double elapsed() const;

 private:
  std::string amount(double v) const;
  void print(bool final_line);
  std::string label_, unit_;
  int64_t total_, done_ = 0;
  double t0_, quiet_s_, last_print_ = -1e9;
  int last_pct_ = -1;
  bool tty_, shown_ = false, finished_ = false;
};

}  // namespace titan
