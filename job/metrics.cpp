#include "job/metrics.h"

#include <nlohmann/json.hpp>

#include "src/tensor/error.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <ctime>
#include <iostream>
#include <sstream>

namespace titan {


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

JsonlWriter::JsonlWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "a");
  TITAN_CHECK(f_ != nullptr, "metrics: cannot open '", path, "' for appending: ", std::strerror(errno));
}
JsonlWriter::~JsonlWriter() {
  if (f_) std::fclose(f_);
}
void JsonlWriter::write(const std::string& line) {
  if (!f_) return;
  errno = 0;
  const bool ok = std::fputs(line.c_str(), f_) >= 0 && std::fputc('\n', f_) != EOF && std::fflush(f_) == 0;
  TITAN_CHECK(ok, "metrics: writing '", path_, "' failed: ", std::strerror(errno ? errno : EIO),
              " (disk full?); stopping rather than losing the record");
}

void truncate_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string kept, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    // a row's step; a line cut short by a crash still shows the step it began
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    int64_t s = 0;
    if (row.is_object() && row.contains("step") && row["step"].is_number_integer()) {
      s = row["step"].get<int64_t>();
    } else if (const size_t at = line.find("\"step\":"); at != std::string::npos) {
      s = std::atoll(line.c_str() + at + 7);
    }
    if (s > step) ++dropped;
    else kept += line + "\n";
  }
  in.close();
  if (dropped == 0) return;
  write_file_checked(path, kept);
}

void write_file_checked(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  TITAN_CHECK(f != nullptr, "cannot create '", tmp, "': ", std::strerror(errno));
  errno = 0;
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const int err = errno ? errno : EIO;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("writing '", path, "' failed: ", std::strerror(err), " (disk full?)");
  }
  TITAN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "': ",
              std::strerror(errno));
}

}  // namespace titan
