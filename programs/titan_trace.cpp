// titan-trace merge -o profile_trace.json profile_trace_rank0.json profile_trace_rank1.json ...
// titan-trace check profile_trace.json
// merge: the per-rank Chrome traces of one job (a profiled step, from any hosts) as one file: every rank a
// process, flow ids already unique across ranks (titan writes them so); refused when two files hold the same
// rank. check: the problems a viewer or trace-analysis tool would trip on (pids / tids below 1, slices that
// overlap on a track without nesting, flows whose ends are not bound to one slice each, ids that repeat, no
// ProfilerStep# or distributedInfo); exit status 1 when there is any.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "simulator/trace.h"
#include "src/config/version.h"
#include "src/tensor/error.h"

using namespace titan;

int main(int argc, char** argv) {
  CLI::App app{"titan-trace: merge a job's per-rank Chrome traces into one file, check a trace's structure",
               "titan-trace"};
  app.set_version_flag("--version", version_string("titan-trace"));
  app.require_subcommand(1);
  std::string out;
  std::vector<std::string> inputs;
  CLI::App* merge = app.add_subcommand("merge", "join per-rank traces (profile_trace_rank*.json) into one file");
  merge->add_option("-o,--output", out, "the merged trace")->required();
  merge->add_option("inputs", inputs, "per-rank trace files")->required()->check(CLI::ExistingFile);
  std::string path;
  CLI::App* check = app.add_subcommand("check", "list what a viewer or trace-analysis tool would trip on");
  check->add_option("trace", path, "a Chrome trace file")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*merge) {
      const auto summary = merge_chrome_traces(inputs, out);
      std::printf("merged %zu traces into %s\n", inputs.size(), out.c_str());
      for (const auto& l : summary) std::printf("%s\n", l.c_str());
      return 0;
    }
    const auto problems = check_chrome_trace(path);
    for (const auto& p : problems) std::printf("%s: %s\n", path.c_str(), p.c_str());
    if (problems.empty()) std::printf("%s: ok\n", path.c_str());
    return problems.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan-trace: %s\n", e.what());
    return 1;
  }
}
