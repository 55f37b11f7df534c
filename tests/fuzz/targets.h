// tests/fuzz/targets.h — one fuzz target per parser of data titan did not write.
//
// A target takes arbitrary bytes, makes of them the file (or text) its parser reads, and runs the parser the way
// titan-train / titan-eval / titan-tokenize do. The contract (`run_target`): the parser accepts the input or
// throws titan::Error (the named error a user sees); any other exception, a crash, a leak, undefined behaviour,
// a hang or an allocation over libFuzzer's limit is a finding.
//
// The same targets run in two places: tests/fuzz/fuzz_main.cpp (libFuzzer, clang + ASan + UBSan; scripts/fuzz.sh)
// and tests/test_hostile_inputs.cpp (every committed regression input gives its named error, in the release suite).
//
// HDF5 files (token files, checkpoints) are generated, not mutated byte by byte: the bytes choose datasets, their
// element types, ranks, sizes and values, and the attributes titan reads — what titan must validate. Raw-byte
// mutation of an HDF5 file exercises libhdf5's own format parser, which is not titan's code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace titan::fuzz {

struct Target {
  const char* name;  // the harness is fuzz_<name>; seeds in tests/fuzz/corpus/<name>, regressions in .../regressions/<name>
  const char* what;  // the parser it drives, for --list and the README
  void (*run)(const uint8_t* data, size_t size);
};
const std::vector<Target>& targets();
const Target* find_target(const std::string& name);

// Runs one input under the contract: returns the titan::Error's message ("" when the input was accepted);
// anything else thrown is printed and aborts (a finding).
std::string run_target(const Target& t, const uint8_t* data, size_t size);

}  // namespace titan::fuzz
