#include "src/checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "src/checkpoint/h5.h"

namespace fs = std::filesystem;

namespace titan {

namespace {
void write_atomic(const std::string& path, const std::function<void(h5::File&)>& body) {
  const std::string tmp = path + ".tmp";
  {
    h5::File f(tmp, h5::File::Create);
    body(f);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  TITAN_CHECK(!ec, "checkpoint: cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

void read_param(const h5::File& f, const std::string& key, const std::string& name, const Tensor& dst) {
  TITAN_CHECK(f.has(key), "checkpoint: '", f.path(), "' has no tensor '", key, "' (for parameter ", name,
              "): saved from a different model?");
  Shape s = f.shape(key);
  TITAN_CHECK(s == dst.shape(), "checkpoint: tensor '", key, "' in '", f.path(), "' has shape ", shape_str(s),
              ", the model expects ", shape_str(dst.shape()));
  if (!dst.is_meta()) f.read_into(key, dst);
}
}  // namespace

void save_checkpoint(const std::string& path, const NamedParams& params, AdamW* opt, const TrainState& st) {
  write_atomic(path, [&](h5::File& f) {
    for (auto& [n, p] : params) f.write("model/" + n, *p);
    if (opt) {
      for (auto& s : opt->slots()) {
        f.write("optim/exp_avg/" + s.name, s.exp_avg);
        f.write("optim/exp_avg_sq/" + s.name, s.exp_avg_sq);
      }
      f.set_attr("optim_step", opt->step_count());
    }
    f.set_attr("step", st.step);
    f.set_attr("data_position", st.data_position);
    f.set_attr("data_epoch", st.data_epoch);
    f.set_attr("rng", st.rng);
    f.set_attr("config", st.config);
  });
}

TrainState load_checkpoint(const std::string& path, const NamedParams& params, AdamW* opt) {
  h5::File f(path, h5::File::Read);
  for (auto& [n, p] : params) read_param(f, "model/" + n, n, *p);
  if (opt) {
    for (auto& s : opt->slots()) {
      read_param(f, "optim/exp_avg/" + s.name, s.name, s.exp_avg);
      read_param(f, "optim/exp_avg_sq/" + s.name, s.name, s.exp_avg_sq);
    }
    opt->set_step_count(f.attr_int("optim_step"));
  }
  TrainState st;
  st.step = f.attr_int("step");
  st.data_position = f.attr_int("data_position");
  st.data_epoch = f.attr_int("data_epoch");
  st.rng = f.attr_string("rng");
  st.config = f.attr_string("config");
  return st;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& folder) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!fs::exists(folder)) return out;
  for (auto& e : fs::directory_iterator(folder)) {
    std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) != 0 || n.size() < 9 || n.substr(n.size() - 3) != ".h5") continue;
    try {
      out.emplace_back(std::stoll(n.substr(5, n.size() - 8)), e.path().string());
    } catch (...) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void prune_checkpoints(const std::string& folder, int64_t keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(folder);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i].second);
}

void export_hf(const std::string& path, const NamedParams& params, const std::string& cfg, DType stored) {
  write_atomic(path, [&](h5::File& f) {
    for (auto& [n, p] : params) f.write(n, *p, stored);
    f.set_attr("config", cfg);
  });
}

void load_hf(const std::string& path, const NamedParams& params) {
  h5::File f(path, h5::File::Read);
  std::set<std::string> expected;
  for (auto& [n, p] : params) {
    expected.insert(n);
    read_param(f, n, n, *p);
  }
  for (auto& d : f.datasets())
    TITAN_CHECK(expected.count(d), "checkpoint: '", path, "' has tensor '", d,
                "' that this model does not have (different architecture or tie_word_embeddings?)");
}

std::string read_hf_config(const std::string& path) {
  h5::File f(path, h5::File::Read);
  TITAN_CHECK(f.has_attr("config"), "checkpoint: '", path,
              "' has no root 'config' attribute (HF config.json content expected)");
  return f.attr_string("config");
}

}  // namespace titan
