// tests/test_hostile_inputs.cpp — files titan did not write: every committed hostile input gives its named error
// (tests/fuzz/regressions, run through the fuzz targets), and sizes over the memory budget are refused before
// anything is allocated.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "models/decoder/args.h"
#include "step/train_step.h"
#include "src/tensor/memory.h"
#include "tests/error_of.h"
#include "tests/fuzz/targets.h"

namespace fs = std::filesystem;
using namespace titan;
using titan::testing::error_of;

namespace {
std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
const fs::path kFuzz = fs::path(TITAN_SOURCE_DIR) / "tests" / "fuzz";

// Restores the machine's budget when a test lowers it.
struct Budget {
  explicit Budget(int64_t bytes) { set_memory_budget_bytes(bytes); }
  ~Budget() { set_memory_budget_bytes(0); }
};
}  // namespace

// The targets CMake builds (the foreach in CMakeLists.txt, which scripts/fuzz.sh reads too) are the table's.
TEST(HostileInputs, EveryTargetHasAHarnessSeedsAndRegressions) {
  std::smatch m;
  const std::string cmake = read(fs::path(TITAN_SOURCE_DIR) / "CMakeLists.txt");
  ASSERT_TRUE(std::regex_search(cmake, m, std::regex("foreach\\(target ([a-z_ ]+)\\)")));
  std::set<std::string> built;
  std::istringstream names(m[1].str());
  for (std::string n; names >> n;) built.insert(n);
  std::set<std::string> table;
  for (const auto& t : fuzz::targets()) {
    table.insert(t.name);
    EXPECT_FALSE(fs::is_empty(kFuzz / "corpus" / t.name)) << t.name << " has no seeds";
    EXPECT_TRUE(fs::exists(kFuzz / "regressions" / t.name)) << t.name << " has no regression inputs";
  }
  EXPECT_EQ(built, table);
}

// Each regression input gives the error its .expect names (or is accepted when it says "accepted"); run through
// the same target code libFuzzer runs, so an input that once crashed now stops at its check.
TEST(HostileInputs, RegressionInputsGiveTheirNamedErrors) {
  int cases = 0;
  for (const auto& t : fuzz::targets()) {
    const fs::path dir = kFuzz / "regressions" / t.name;
    if (!fs::exists(dir)) continue;
    std::vector<fs::path> inputs;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() != ".expect") inputs.push_back(e.path());
    std::sort(inputs.begin(), inputs.end());
    for (const auto& in : inputs) {
      std::string expect = read(in.string() + ".expect");
      while (!expect.empty() && (expect.back() == '\n' || expect.back() == '\r')) expect.pop_back();
      ASSERT_FALSE(expect.empty()) << in << ": its .expect file is missing or empty";
      const std::string bytes = read(in);
      const std::string error = fuzz::run_target(t, (const uint8_t*)bytes.data(), bytes.size());
      if (expect == "accepted") EXPECT_EQ(error, "") << in;
      else EXPECT_NE(error.find(expect), std::string::npos) << in << "\n  expected: " << expect << "\n  got: " << error;
      ++cases;
    }
  }
  EXPECT_GE(cases, 25);  // the issue's four and the rest: none may silently disappear
}

// The seeds are valid inputs: each target accepts its own (else the fuzzer starts from errors only).
TEST(HostileInputs, SeedsAreAccepted) {
  for (const auto& t : fuzz::targets())
    for (const auto& e : fs::directory_iterator(kFuzz / "corpus" / t.name)) {
      const std::string bytes = read(e.path());
      const std::string error = fuzz::run_target(t, (const uint8_t*)bytes.data(), bytes.size());
      // the token-file seeds name no tokenizer titan can find, and one checkpoint seed replaces a tensor: their
      // errors are the ones the seeds are for
      if (e.path().filename() == "replace_w") EXPECT_NE(error.find("fails its checksum"), std::string::npos);
      else if (std::string(t.name) == "token_file") EXPECT_TRUE(error.empty() || error.find("tokenizer") != std::string::npos) << error;
      else EXPECT_EQ(error, "") << e.path();
    }
}

// A tensor over the budget is refused before allocating, naming its size; nothing is charged.
TEST(MemoryBudget, TensorOverTheBudgetIsRefusedBeforeAllocating) {
  EXPECT_EQ(memory_budget_bytes(), physical_memory_bytes());
  Budget budget(int64_t(1) << 30);
  const int64_t before = MemoryTracker::get(Device::CPU).stats().total_current;
  const std::string e = error_of([] { (void)empty({int64_t(1) << 16, int64_t(1) << 16}, DType::F32, Device::CPU); });
  EXPECT_NE(e.find("needs 17179869184 bytes (16 GiB), more than the memory budget (1 GiB)"), std::string::npos) << e;
  EXPECT_EQ(MemoryTracker::get(Device::CPU).stats().total_current, before);
  EXPECT_NO_THROW((void)empty({1024, 1024}, DType::F32, Device::CPU));  // within it
}

// A config.json whose model is bigger than this machine (a 2^40 vocabulary, 1.4e14 parameters: plannable on meta)
// is imported, then refused by name when titan-eval's assembly would build its weights: before any allocation.
TEST(MemoryBudget, ImportedConfigBiggerThanTheMachineIsRefusedBeforeBuilding) {
  JobConfig cfg;
  cfg.model = decoder::Args::from_hf_json(
      R"({"model_type": "qwen3", "vocab_size": 1099511627776, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128})");
  cfg.training.seq_len = 16;
  cfg.training.local_batch_size = 1;
  EXPECT_EQ(cfg.model.vocab_size, 1099511627776);  // read as written, never truncated
  comms::DeviceMesh mesh(mesh_degrees(cfg), /*fake=*/true, 0, 1);
  const int64_t before = MemoryTracker::get(Device::CPU).stats().total_current;
  const std::string e = error_of([&] { (void)build_job(cfg, mesh, nullptr, JobPurpose::evaluate); });
  EXPECT_GT(cfg.model.num_params(), int64_t(1) << 47);
  EXPECT_NE(e.find("build_job: the weights of model qwen3 (" + std::to_string(cfg.model.num_params()) +
                   " float32 parameters, vocab_size 1099511627776, dim 64): needs "), std::string::npos) << e;
  EXPECT_NE(e.find("refused before allocating"), std::string::npos) << e;
  EXPECT_EQ(MemoryTracker::get(Device::CPU).stats().total_current, before);
}
