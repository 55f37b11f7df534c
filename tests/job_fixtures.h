// tests/job_fixtures.h — what the config, data, checkpoint and trainer tests share: a scratch folder, a small
// learnable token file, and the tiny job they train.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "src/data/loader.h"
#include "step/job_config.h"
#include "tests/error_of.h"

namespace titan::testing {

namespace fs = std::filesystem;

inline std::string tmpdir(const std::string& name) {
  std::string d = (fs::temp_directory_path() / ("titan_test_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// A small learnable token stream: repeated random "sentences".
inline void make_tokens(const std::string& path, int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<std::vector<uint32_t>> phrases(8);
  for (auto& p : phrases)
    for (int i = 0; i < 12; ++i) p.push_back((uint32_t)(g.next_u64() % 64));
  std::vector<uint32_t> t;
  while ((int64_t)t.size() < n) {
    auto& p = phrases[g.next_u64() % phrases.size()];
    t.insert(t.end(), p.begin(), p.end());
  }
  t.resize(n);
  write_token_file(path, t, "test", 64);
}

inline JobConfig tiny_job(const std::string& dir) {
  JobConfig c;
  c.job.dump_folder = dir + "/run";
  c.job.print_args = false;
  c.model.dim = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 8;
  c.model.hidden_dim = 64;
  c.model.vocab_size = 64;
  c.training.dataset_path = dir + "/train.h5";
  c.validation.dataset_path = dir + "/val.h5";
  c.training.steps = 8;
  c.training.seq_len = 16;
  c.training.local_batch_size = 2;
  c.lr_scheduler.warmup_steps = 2;
  c.validation.freq = 4;
  c.validation.steps = 2;
  c.metrics.log_freq = 4;
  c.optimizer.lr = 3e-3;
  if (!fs::exists(dir + "/train.h5")) {
    make_tokens(dir + "/train.h5", 4000, 1);
    make_tokens(dir + "/val.h5", 600, 2);
  }
  return c;
}

}  // namespace titan::testing
