#include "src/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <climits>
#include <map>
#include <cmath>
#include <sstream>
#include <filesystem>
#include <set>

#include "src/checkpoint/blocks.h"
#include "src/checkpoint/h5.h"
#include "src/checkpoint/safetensors.h"
#include "src/log/log.h"
#include "src/tensor/memory.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace titan {

std::vector<Region> whole(const NamedParams& params) {
  std::vector<Region> out;
  for (auto& [n, p] : params) out.push_back({n, p, p->shape(), Shape(p->dim(), 0), true});
  return out;
}

namespace {
int rank_of(MPI_Comm comm) {
  int r = 0;
  if (comm) MPI_Comm_rank(comm, &r);
  return r;
}

void fsync_path(const std::string& path, bool dir) {
  const int fd = ::open(path.c_str(), dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  TITAN_CHECK(fd >= 0, "checkpoint: cannot open '", path, "' to sync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TITAN_CHECK(rc == 0, "checkpoint: fsync of '", path, "' failed: ", std::strerror(err));
}

// Writes to path.tmp, closes it (checked: a full disk fails here, naming the file), syncs it to disk, renames
// it over path and syncs the folder: a crash at any point leaves the old file or the new one, never half of one.
void write_atomic(const std::string& path, MPI_Comm comm, const std::function<void(h5::File&)>& body) {
  const std::string tmp = path + ".tmp";
  std::string err;
  try {
    h5::File f(tmp, h5::File::Create, comm);
    body(f);
    f.close();
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!err.empty()) {
    if (rank_of(comm) == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);  // never leave a partial file behind
    }
    fail("checkpoint: writing '", path, "' failed: ", err, "; the previous files are untouched");
  }
  if (comm) MPI_Barrier(comm);
  if (rank_of(comm) == 0) {
    fsync_path(tmp, false);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    TITAN_CHECK(!ec, "checkpoint: cannot rename '", tmp, "' to '", path, "': ", ec.message());
    fsync_path(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string(), true);
  }
  if (comm) MPI_Barrier(comm);
}

void read_block(const h5::File& f, const std::string& key, const Region& r, const Tensor& dst) {
  TITAN_CHECK(f.has(key), "checkpoint: '", f.path(), "' has no tensor '", key, "' (for parameter ", r.name,
              "): saved from a different model?");
  Shape s = f.shape(key);
  TITAN_CHECK(s == r.full_shape, "checkpoint: tensor '", key, "' in '", f.path(), "' has shape ", shape_str(s),
              ", the model expects ", shape_str(r.full_shape));
  if (!dst.is_meta()) f.read_region(key, r.offset, dst);
}

int64_t local_bytes(const std::vector<Region>& params) {
  int64_t n = 0;
  for (auto& r : params) n += r.local->numel() * 4;
  return std::max<int64_t>(n, 1);
}

Tensor* moment(AdamW* opt, const std::string& name, bool second) {
  for (auto& s : opt->slots())
    if (s.name == name) return second ? &s.exp_avg_sq : &s.exp_avg;
  return nullptr;
}
}  // namespace

namespace {
// The checksum of a rank's block of `t` (laid out as region r) as stored: bf16 values are summed as the float32
// they read back as; non-writers add nothing, so the sum over ranks counts each element once.
uint64_t stored_checksum(const Region& r, const Tensor& t, DType stored) {
  if (!r.writer || t.is_meta()) return 0;
  Tensor c = t.contiguous();
  if (stored == DType::BF16) {
    c = c.clone();
    float* p = c.data<float>();
    for (int64_t i = 0; i < c.numel(); ++i) p[i] = round_to_bf16(p[i]);
  }
  return block_checksum(r.full_shape, r.offset, c.shape(), c.data<float>());
}

// The `checksums` attribute: "dataset hex" lines, each sum all-reduced over the ranks' blocks.
std::string checksum_lines(const std::vector<std::string>& names, std::vector<uint64_t> sums, MPI_Comm comm) {
  if (comm) MPI_Allreduce(MPI_IN_PLACE, sums.data(), (int)sums.size(), MPI_UINT64_T, MPI_SUM, comm);
  std::ostringstream o;
  for (size_t i = 0; i < names.size(); ++i) o << names[i] << ' ' << std::hex << sums[i] << std::dec << '\n';
  return o.str();
}

// The checksums of every dataset of a checkpoint.
std::string checksum_attr(const std::vector<Region>& params, AdamW* opt, MPI_Comm comm) {
  std::vector<std::string> names;
  std::vector<uint64_t> sums;
  auto add = [&](const std::string& name, const Region& r, const Tensor& t) {
    names.push_back(name);
    sums.push_back(stored_checksum(r, t, DType::F32));
  };
  for (auto& r : params) add("model/" + r.name, r, *r.local);
  if (opt)
    for (auto& r : params) {
      Tensor* m = moment(opt, r.name, false);
      if (!m) continue;
      add("optim/exp_avg/" + r.name, r, *m);
      add("optim/exp_avg_sq/" + r.name, r, *moment(opt, r.name, true));
    }
  return checksum_lines(names, sums, comm);
}
}  // namespace

void agree_on_datasets(const std::vector<Region>& regions, const std::vector<bool>& optimizer,
                       const std::string& path, MPI_Comm comm) {
  if (!comm) return;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over names, shapes and moment flags
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ULL;
  };
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    mix(r.name.data(), r.name.size() + 1);
    const int64_t nd = (int64_t)r.full_shape.size();
    mix(&nd, sizeof nd);
    mix(r.full_shape.data(), r.full_shape.size() * sizeof(int64_t));
    const char m = i < optimizer.size() && optimizer[i];
    mix(&m, 1);
  }
  int n = 0, me = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  uint64_t mine[2] = {h, (uint64_t)regions.size()};
  std::vector<uint64_t> all(2 * (size_t)n);
  MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm);
  std::ostringstream differ;
  int bad = 0;
  for (int q = 1; q < n; ++q)
    if (all[2 * q] != all[0]) differ << (bad++ ? ", " : "") << q << " (" << all[2 * q + 1] << " datasets)";
  TITAN_CHECK(bad == 0, "checkpoint: writing '", path, "': rank", bad > 1 ? "s " : " ", differ.str(),
              " would write a different list of datasets than rank 0 (", all[1], " datasets; names, shapes or "
              "optimizer moments differ). Every rank must write the same datasets in the same order (the write is "
              "collective): this is a bug in the parallel plan, nothing was written");
}

std::string agree_on_failure(const std::string& mine, MPI_Comm comm) {
  if (!comm) return mine;
  int me = 0;
  MPI_Comm_rank(comm, &me);
  int bad = mine.empty() ? INT_MAX : me;  // every rank takes the lowest failing rank's finding
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MIN, comm);
  if (bad == INT_MAX) return "";
  std::string why = mine;
  int n = (int)why.size();
  MPI_Bcast(&n, 1, MPI_INT, bad, comm);
  why.resize(n);
  MPI_Bcast(why.data(), n, MPI_CHAR, bad, comm);
  return why;
}

void check_values(const std::string& name, const float* p, const Shape& shape, const std::string& hex) {
  const int64_t n = numel(shape);
  for (int64_t k = 0; k < n; ++k)
    TITAN_CHECK(std::isfinite(p[k]), "tensor '", name, "' holds a non-finite value (", p[k], ") at element ", k);
  if (hex.empty() || hex == "-") return;
  TITAN_CHECK(hex.size() <= 16 && hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
              "tensor '", name, "' has checksum '", hex.substr(0, 40), "', not a 64-bit hex number: the file's "
              "checksum record is damaged");
  const uint64_t want = std::stoull(hex, nullptr, 16);
  const uint64_t got = block_checksum(shape, Shape(shape.size(), 0), shape, p);
  TITAN_CHECK(got == want, "tensor '", name, "' fails its checksum (stored ", hex, ", computed ", std::hex, got,
              std::dec, "): the file was altered after it was written");
}

namespace {
// Checks an HDF5 file titan wrote: the tensors of its `checksums` attribute, split over the ranks.
std::string verify_h5(const std::string& path, MPI_Comm comm, bool training_state, bool* legacy) {
  if (legacy) *legacy = false;
  int me = 0, world = 1;
  if (comm) {
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &world);
  }
  std::string why;  // this rank's first finding
  try {
    h5::File f(path, h5::File::Read);  // serial: each rank reads its share of the datasets on its own
    if (training_state)
      for (const char* a : {"step", "data_position", "data_epoch", "rng", "config"})
        TITAN_CHECK(f.has_attr(a), "attribute '", a, "' is missing");
    std::string list;
    if (f.has_attr("checksums")) {
      list = f.attr_string("checksums");
    } else {  // written by a titan before checksums: its values can still be checked for finiteness
      if (legacy) *legacy = true;
      for (const auto& d : f.datasets()) list += d + " -\n";
    }
    std::istringstream in(list);
    std::string name, hex;
    int64_t i = 0;
    while (in >> name >> hex) {
      if (i++ % world != me) continue;
      TITAN_CHECK(f.has(name), "tensor '", name, "' is missing");
      const Shape shape = f.shape(name);
      double elements = 1;
      for (int64_t d : shape) elements *= (double)d;
      check_memory_budget(4.0 * elements, "tensor '" + name + "' " + shape_str(shape) + " read whole to verify it");
      const Tensor t = f.read_f32(name);
      check_values(name, t.data<float>(), t.shape(), hex);
    }
    TITAN_CHECK(i > 0, "it holds no tensors");
  } catch (const std::exception& e) {
    why = e.what();
  }
  return agree_on_failure(why, comm);
}

}  // namespace

std::string verify_checkpoint(const std::string& path, MPI_Comm comm, bool* legacy) {
  return verify_h5(path, comm, /*training_state=*/true, legacy);
}

void save_checkpoint(const std::string& path, const std::vector<Region>& params, AdamW* opt, const TrainState& st,
                     MPI_Comm comm) {
  std::vector<bool> moments;
  for (auto& r : params) moments.push_back(opt && moment(opt, r.name, false));
  agree_on_datasets(params, moments, path, comm);
  const std::string sums = checksum_attr(params, opt, comm);
  Progress progress("saving checkpoint " + path, local_bytes(params) * (opt ? 3 : 1));
  write_atomic(path, comm, [&](h5::File& f) {
    for (auto& r : params) {
      f.write_region("model/" + r.name, r.full_shape, r.offset, *r.local, r.writer);
      progress.add(r.local->numel() * 4);
    }
    if (opt) {
      for (auto& r : params) {
        Tensor* m = moment(opt, r.name, false);
        Tensor* v = moment(opt, r.name, true);
        if (!m) continue;
        f.write_region("optim/exp_avg/" + r.name, r.full_shape, r.offset, *m, r.writer);
        f.write_region("optim/exp_avg_sq/" + r.name, r.full_shape, r.offset, *v, r.writer);
        progress.add(r.local->numel() * 8);
      }
      f.set_attr("optim_step", opt->step_count());
    }
    f.set_attr("step", st.step);
    f.set_attr("data_position", st.data_position);
    f.set_attr("data_epoch", st.data_epoch);
    f.set_attr("rng", st.rng);
    f.set_attr("config", st.config);
    f.set_attr("checksums", sums);
  });
  progress.finish();
}

namespace {
// A step, position or epoch count: in [0, 2^53) (a count a job reaches; one step more must not overflow).
int64_t counter(const h5::File& f, const std::string& name) {
  const int64_t v = f.attr_int(name);
  TITAN_CHECK(v >= 0 && v < (int64_t(1) << 53), "checkpoint: '", f.path(), "' has ", name, " = ", v,
              ", not a count in [0, 2^53): damaged");
  return v;
}
}  // namespace

TrainState load_checkpoint(const std::string& path, const std::vector<Region>& params, AdamW* opt, MPI_Comm comm) {
  h5::File f(path, h5::File::Read, comm);
  Progress progress("loading checkpoint " + path, local_bytes(params) * (opt ? 3 : 1));
  for (auto& r : params) {
    if (r.optional && !f.has("model/" + r.name)) {
      log_info("checkpoint: " + path + " has no '" + r.name + "' (written before titan kept it): it keeps its " +
               "initial value");
      continue;
    }
    read_block(f, "model/" + r.name, r, *r.local);
    progress.add(r.local->numel() * 4);
  }
  if (opt) {
    for (auto& r : params) {
      Tensor* m = moment(opt, r.name, false);
      if (!m) continue;
      read_block(f, "optim/exp_avg/" + r.name, r, *m);
      read_block(f, "optim/exp_avg_sq/" + r.name, r, *moment(opt, r.name, true));
      progress.add(r.local->numel() * 8);
    }
    opt->set_step_count(counter(f, "optim_step"));
  }
  TrainState st;
  st.step = counter(f, "step");
  st.data_position = counter(f, "data_position");
  st.data_epoch = counter(f, "data_epoch");
  st.rng = f.attr_string("rng");
  st.config = f.attr_string("config");
  progress.finish();
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

void export_hf(const std::string& path, const std::vector<Region>& params, const std::string& cfg, DType stored,
               MPI_Comm comm) {
  agree_on_datasets(params, {}, path, comm);
  // a name may come in several blocks of one rank (an HF tensor fusing two parameters): one dataset, its
  // checksum the sum of the blocks'
  std::vector<std::string> names;
  std::vector<uint64_t> sums;
  std::vector<std::vector<const Region*>> blocks;
  std::map<std::string, size_t> at;
  for (auto& r : params) {
    auto [it, fresh] = at.emplace(r.name, names.size());
    if (fresh) {
      names.push_back(r.name);
      sums.push_back(0);
      blocks.emplace_back();
    }
    TITAN_CHECK(blocks[it->second].empty() || blocks[it->second][0]->full_shape == r.full_shape, "export: '", r.name,
                "' comes in blocks of different logical shapes");
    sums[it->second] += stored_checksum(r, *r.local, stored);
    blocks[it->second].push_back(&r);
  }
  const std::string lines = checksum_lines(names, sums, comm);
  Progress progress("writing " + path, local_bytes(params));
  write_atomic(path, comm, [&](h5::File& f) {
    for (const auto& bs : blocks) {
      std::vector<h5::File::Box> boxes;
      for (const Region* r : bs) {
        boxes.push_back({r->offset, r->local, r->writer});
        progress.add(r->local->numel() * 4);
      }
      f.write_boxes(bs[0]->name, bs[0]->full_shape, boxes, stored);
    }
    f.set_attr("config", cfg);
    f.set_attr("checksums", lines);
  });
  progress.finish();
}

namespace {
// A folder holding an HDF5 export reads as its model.h5.
std::string h5_path(const std::string& path) {
  if (fs::is_directory(path)) {
    TITAN_CHECK(fs::exists(fs::path(path) / "model.h5"), "checkpoint: folder '", path,
                "' holds no model.safetensors, model.safetensors.index.json or model.h5");
    return (fs::path(path) / "model.h5").string();
  }
  return path;
}
}  // namespace

std::string with_torch_dtype(const std::string& hf_config_json, const std::string& dtype) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(hf_config_json);
  j["torch_dtype"] = dtype;
  return j.dump(2);
}

std::vector<std::string> export_hf_folder(const std::string& folder, const std::vector<Region>& params,
                                          const std::string& hf_config_json, const ExportOptions& opt, MPI_Comm comm) {
  const std::string dtype = config::enum_name(opt.dtype);
  TITAN_CHECK(opt.dtype != ExportDType::float16 || opt.format == ExportFormat::safetensors,
              "checkpoint.export_dtype '", dtype, "' with export_format '", config::enum_name(opt.format),
              "': float32 and bfloat16 go to any format, float16 to safetensors only");
  const std::string cfg = with_torch_dtype(hf_config_json, dtype);
  std::vector<std::string> written;
  if (rank_of(comm) == 0) {
    fs::create_directories(folder);
    const std::string p = folder + "/config.json";
    {
      std::ofstream o(p + ".tmp");
      o << cfg << "\n";
      o.flush();
      TITAN_CHECK(o.good(), "checkpoint: cannot write '", p, ".tmp'");
    }
    fs::rename(p + ".tmp", p);
  }
  written.push_back("config.json");
  if (opt.format != ExportFormat::hdf5) {
    auto files = save_safetensors(folder, params, safetensors_dtype(dtype), opt.max_shard_bytes, comm);
    written.insert(written.end(), files.begin(), files.end());
  }
  if (opt.format != ExportFormat::safetensors) {
    export_hf(folder + "/model.h5", params, cfg, opt.dtype == ExportDType::bfloat16 ? DType::BF16 : DType::F32, comm);
    written.push_back("model.h5");
  }
  return written;
}

void load_hf(const std::string& path_in, const std::vector<Region>& params, MPI_Comm comm) {
  if (is_safetensors(path_in)) return load_safetensors(path_in, params, comm);
  const std::string path = h5_path(path_in);
  const std::string why = verify_h5(path, comm, /*training_state=*/false, nullptr);
  TITAN_CHECK(why.empty(), "checkpoint: '", path, "' cannot be trusted: ", why);
  h5::File f(path, h5::File::Read, comm);
  std::set<std::string> expected;
  Progress progress("loading " + path, local_bytes(params));
  for (auto& r : params) {
    expected.insert(r.name);
    if (r.optional && !f.has(r.name)) {
      log_info("checkpoint: " + path + " has no '" + r.name + "': it keeps its initial value");
      continue;
    }
    read_block(f, r.name, r, *r.local);
    progress.add(r.local->numel() * 4);
  }
  progress.finish();
  for (auto& d : f.datasets())
    TITAN_CHECK(expected.count(d), "checkpoint: '", path, "' has tensor '", d,
                "' that this model does not have (different architecture or tie_word_embeddings?)");
}

std::string read_hf_config(const std::string& path_in) {
  if (is_safetensors(path_in)) {  // HF's layout: config.json beside the weights
    const fs::path dir = fs::is_directory(path_in) ? fs::path(path_in) : fs::path(path_in).parent_path();
    const fs::path cfg = dir / "config.json";
    std::ifstream in(cfg);
    TITAN_CHECK(in.good(), "checkpoint: safetensors weights '", path_in, "' need their config.json beside them (",
                cfg.string(), " not found)");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text;
  }
  const std::string path = h5_path(path_in);
  h5::File f(path, h5::File::Read);
  TITAN_CHECK(f.has_attr("config"), "checkpoint: '", path,
              "' has no root 'config' attribute (HF config.json content expected)");
  return f.attr_string("config");
}

}  // namespace titan
