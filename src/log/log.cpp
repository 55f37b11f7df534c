#include "src/log/log.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>

namespace titan {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

namespace {
const auto g_start = std::chrono::steady_clock::now();
bool g_log = true;

std::string clock_str(double s) {  // 0:07, 12:03, 1:02:03
  const long t = std::lround(std::max(0.0, s));
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}
}  // namespace

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

void set_log_enabled(bool on) { g_log = on; }
bool log_enabled() { return g_log; }

void log_info(const std::string& msg) {
  if (!g_log) return;
  std::cout << "[titan] " << now_hms() << " - " << msg << std::endl;
}

Progress::Progress(std::string label, int64_t total, std::string unit, double quiet_s)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(std::max<int64_t>(total, 1)),
      t0_(wall_seconds()),
      quiet_s_(quiet_s),
      tty_(isatty(fileno(stdout)) != 0) {}

Progress::~Progress() {
  if (shown_ && tty_ && !finished_) std::cout << std::endl;  // leave the cursor on a fresh line (e.g. on an error)
}

double Progress::elapsed() const { return wall_seconds() - t0_; }

std::string Progress::amount(double v) const {
  if (unit_ != "B") return with_commas(v);
  if (total_ >= (int64_t)1 << 30) return fmt("%.2f", v / (1 << 30)) + (v == (double)total_ ? " GiB" : "");
  return fmt("%.1f", v / (1 << 20)) + (v == (double)total_ ? " MiB" : "");
}

void Progress::print(bool final_line) {
  const double t = elapsed();
  const double rate = (double)done_ / std::max(t, 1e-9);
  const int pct = (int)(100.0 * (double)done_ / (double)total_);
  std::string rate_s = unit_ == "B"     ? fmt("%.1f MB/s", rate / 1e6)
                       : rate >= 1e6  ? fmt("%.1fM ", rate / 1e6) + unit_ + "/s"
                       : rate >= 1e4  ? fmt("%.1fk ", rate / 1e3) + unit_ + "/s"
                                      : fmt("%.1f ", rate) + unit_ + "/s";
  std::string line = label_;
  if (tty_) {
    const int width = 24, fill = std::min(width, pct * width / 100);
    line += " [" + std::string(fill, '#') + std::string(width - fill, ' ') + "]";
  }
  line += " " + std::to_string(pct) + "%  " + amount((double)done_) + "/" + amount((double)total_) +
          (unit_ == "B" ? "" : " " + unit_) + "  " + rate_s;
  if (final_line) line += "  done in " + clock_str(t);
  else if (done_ > 0) line += "  ETA " + clock_str((double)(total_ - done_) / std::max(rate, 1e-12));
  if (tty_) {
    std::cout << "\r[titan] " << now_hms() << " - " << line << "\033[K" << (final_line ? "\n" : "") << std::flush;
  } else {
    std::cout << "[titan] " << now_hms() << " - " << line << std::endl;
  }
  last_print_ = t;
  last_pct_ = pct;
  shown_ = true;
}

void Progress::update(int64_t done) {
  done_ = std::min(done, total_);
  if (!g_log || finished_) return;
  const double t = elapsed();
  if (t < quiet_s_ || done_ == total_) return;  // the closing line is finish()'s
  const int pct = (int)(100.0 * (double)done_ / (double)total_);
  if (tty_ ? (pct != last_pct_ || t - last_print_ > 0.5) : (pct / 10 != last_pct_ / 10 || t - last_print_ >= 5.0))
    print(false);
}

void Progress::finish() {
  if (finished_) return;
  done_ = total_;
  if (g_log && (shown_ || elapsed() >= quiet_s_)) print(true);
  finished_ = true;
}

}  // namespace titan
