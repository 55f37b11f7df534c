// tests/fuzz/fuzz_main.cpp — libFuzzer's entry for one target (CMake builds fuzz_<name> with TITAN_FUZZ_TARGET=name).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/tensor/memory.h"
#include "tests/fuzz/targets.h"

#define TITAN_STR2(x) #x
#define TITAN_STR(x) TITAN_STR2(x)

// Under libFuzzer's 2 GB malloc limit: a bigger ask is refused by titan's budget (src/tensor/memory.h), by name,
// and one that bypasses the budget is a finding.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  titan::set_memory_budget_bytes(int64_t(1) << 30);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const titan::fuzz::Target* target = [] {
    const titan::fuzz::Target* t = titan::fuzz::find_target(TITAN_STR(TITAN_FUZZ_TARGET));
    if (!t) {
      std::fprintf(stderr, "no fuzz target '%s' (tests/fuzz/targets.cpp)\n", TITAN_STR(TITAN_FUZZ_TARGET));
      std::abort();
    }
    return t;
  }();
  const std::string error = titan::fuzz::run_target(*target, data, size);
  static const bool verbose = std::getenv("TITAN_FUZZ_VERBOSE") != nullptr;  // what each input gives (triage)
  if (verbose) std::fprintf(stderr, "%s\n", error.empty() ? "accepted" : error.c_str());
  return 0;
}
