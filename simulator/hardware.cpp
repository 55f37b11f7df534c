#include "simulator/hardware.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <stdexcept>

#include "src/config/field.h"
#include "src/tensor/error.h"

#ifndef TITAN_DEVICE_SPECS_DIR
#define TITAN_DEVICE_SPECS_DIR "simulator/specs"
#endif
#ifndef TITAN_INSTALL_SPECS_DIR
#define TITAN_INSTALL_SPECS_DIR "/usr/local/share/titan/specs"
#endif

namespace titan::sim {
namespace fs = std::filesystem;

const char* topology_name(Topology t) {
  switch (t) {
    case Topology::Chip: return "chip";
    case Topology::Ring: return "ring";
    case Topology::Torus2D: return "torus2d";
    case Topology::Switch: return "switch";
  }
  return "?";
}

// $TITAN_DEVICE_SPECS, else the source tree's (a build), else the installed copy
// (an installed titan-train whose source folder is gone).
std::string specs_dir() {
  if (const char* e = std::getenv("TITAN_DEVICE_SPECS")) return e;
  std::error_code ec;
  if (fs::is_directory(TITAN_DEVICE_SPECS_DIR, ec)) return TITAN_DEVICE_SPECS_DIR;
  return TITAN_INSTALL_SPECS_DIR;
}

namespace {
[[noreturn]] void fail(const std::string& file, const std::string& msg) {
  throw Error("hardware spec " + file + ": " + msg);
}

std::vector<std::string> stems(const std::string& sub) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(specs_dir()) / sub, ec))
    if (e.path().extension() == ".yaml") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string resolve(const std::string& name, const std::string& sub, const char* what) {
  if (name.size() > 5 && name.substr(name.size() - 5) == ".yaml") {
    if (!fs::exists(name)) throw std::runtime_error(std::string("unknown ") + what + " file '" + name + "' (not found)");
    return name;
  }
  fs::path p = fs::path(specs_dir()) / sub / (name + ".yaml");
  if (!fs::exists(p))
    throw std::runtime_error(std::string("unknown ") + what + " '" + name + "'; known " + what + "s: " +
                             join(stems(sub)) + " (files in " + (fs::path(specs_dir()) / sub).string() + ")");
  return p.string();
}

YAML::Node load_yaml(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in.good()) fail(file, "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  config::check_nesting(text.str(), file);
  try {
    return YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    fail(file, std::string("cannot parse: ") + e.what());
  }
}

// read(file), with yaml-cpp's errors (a value of the wrong shape; they name the line) as titan's, naming the file.
template <class Read>
auto with_file_named(const std::string& file, Read read) -> decltype(read(file)) {
  try {
    return read(file);
  } catch (const YAML::Exception& e) {
    fail(file, e.what());
  }
}

// A required positive (or >= 0 with allow_zero) number.
double number(const YAML::Node& n, const std::string& key, const std::string& file, bool allow_zero = false) {
  if (!n[key]) fail(file, "missing key '" + key + "'");
  double v = 0;
  try {
    v = n[key].as<double>();
  } catch (const YAML::Exception&) {
    fail(file, "key '" + key + "' must be a number, got '" + n[key].as<std::string>("?") + "'");
  }
  if (!std::isfinite(v) || v < 0 || (!allow_zero && v == 0))
    fail(file, "key '" + key + "' must be " + (allow_zero ? ">= 0" : "> 0") + ", got " + n[key].as<std::string>());
  return v;
}

// A required whole count (chips, units, cores, links) in [1, 10^7]: no system has more chips than that, and the
// counts multiply (int).
int count(const YAML::Node& n, const std::string& key, const std::string& file) {
  const double v = number(n, key, file);
  if (v != std::floor(v) || v > 1e7)
    fail(file, "key '" + key + "' must be a whole number in [1, 10000000], got " + n[key].as<std::string>());
  return (int)v;
}

void check_keys(const YAML::Node& n, const std::vector<std::string>& allowed, const std::string& file,
                const std::string& where) {
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) fail(file, "a key" + where + " is not a plain name (line " +
                                              std::to_string(it->first.Mark().line + 1) + ")");
    const std::string k = it->first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      fail(file, "unknown key '" + k + "'" + where + "; allowed: " + join(allowed));
  }
}

// Where a level sits: one of a system's own levels, or the network between systems (what a key may mean differs).
enum class LevelPlace { Inside, ScaleOut };

NetworkLevel parse_level(const YAML::Node& n, const std::string& file, const std::string& where, LevelPlace place) {
  if (!n.IsMap()) fail(file, where + " must be a map");
  check_keys(n, {"name", "topology", "units", "shape", "bandwidth_gbps", "links_per_chip", "latency_us", "efficiency",
                 "nvls_efficiency"},
             file, " in " + where);
  NetworkLevel l;
  l.name = n["name"] ? n["name"].as<std::string>() : where;
  if (!n["topology"]) fail(file, "missing key '" + where + ".topology' (ring | torus2d | switch)");
  const std::string t = n["topology"].as<std::string>();
  if (t == "ring") l.topology = Topology::Ring;
  else if (t == "torus2d") l.topology = Topology::Torus2D;
  else if (t == "switch") l.topology = Topology::Switch;
  else fail(file, where + ".topology: unknown '" + t + "' (ring | torus2d | switch)");
  if (l.topology == Topology::Torus2D) {
    if (!n["shape"] || !n["shape"].IsSequence() || n["shape"].size() != 2)
      fail(file, where + ".shape: a torus2d level needs shape: [x, y]");
    const double x = n["shape"][0].as<double>(), y = n["shape"][1].as<double>();
    if (!(x >= 1 && y >= 1 && x == std::floor(x) && y == std::floor(y) && x * y <= 1e7))
      fail(file, where + ".shape must be two whole numbers >= 1 whose product is at most 10000000");
    l.shape = {(int)x, (int)y};
    l.units = l.shape[0] * l.shape[1];
  } else {
    l.units = count(n, "units", file);
  }
  l.bandwidth_gbps = number(n, "bandwidth_gbps", file);
  l.links_per_chip = n["links_per_chip"] ? count(n, "links_per_chip", file)
                                         : (l.topology == Topology::Torus2D ? 4 : l.topology == Topology::Ring ? 2 : 1);
  l.latency_us = number(n, "latency_us", file, true);
  l.efficiency = number(n, "efficiency", file);
  if (l.efficiency > 1) fail(file, where + ".efficiency must be <= 1, got " + std::to_string(l.efficiency));
  if (n["nvls_efficiency"]) {
    if (l.topology != Topology::Switch || place == LevelPlace::ScaleOut)
      fail(file, where + ".nvls_efficiency: in-switch reduction (NVLink SHARP) is a property of a switch level inside "
                 "a system, not of a " + (place == LevelPlace::ScaleOut ? std::string("scale_out network") : t + " level"));
    l.nvls_efficiency = number(n, "nvls_efficiency", file, /*allow_zero=*/true);
    if (l.nvls_efficiency > 1)
      fail(file, where + ".nvls_efficiency must be <= 1, got " + n["nvls_efficiency"].as<std::string>());
  }
  return l;
}
}  // namespace

std::vector<std::string> known_chips() { return stems("chips"); }
std::vector<std::string> known_systems() { return stems("systems"); }

namespace {
// A table row as written: "64, 0.3, 0.3".
std::string row_text(const YAML::Node& row) {
  std::string t;
  for (size_t k = 0; row.IsSequence() && k < row.size(); ++k)
    t += (k ? ", " : "") + row[k].as<std::string>("?");
  return t;
}
// Element `col` of a row of table `what` as a number, or an error naming the table and the row as written.
double number_at(const YAML::Node& row, size_t col, const std::string& what, const std::string& file) {
  try {
    return row[col].as<double>();
  } catch (const YAML::Exception&) {
    fail(file, what + " entry [" + row_text(row) + "]: '" + row[col].as<std::string>("?") + "' is not a number");
  }
  return 0;
}
// Applies edit `e` at parts[i..] below node `n` (SpecEdit); errors name the file and the edit as written.
void apply_edit(YAML::Node n, const std::vector<std::string>& parts, size_t i, const SpecEdit& e,
                const std::string& file) {
  const std::string& key = parts[i];
  if (!n.IsMap()) fail(file, "'" + e.as_written + "': '" + e.path + "' does not name a figure");
  if (i + 1 == parts.size()) {
    if (n[key] && n[key].IsMap())
      fail(file, "'" + e.as_written + "': '" + key + "' is a map of figures: name one (" + e.path + ".<key>)");
    if (e.scale) {
      if (!n[key]) fail(file, "'" + e.as_written + "': the spec gives no '" + key + "' to scale (set it with =)");
      n[key] = number(n, key, file, true) * e.value;
    } else {
      n[key] = e.value;
    }
    // An attention figure whose spec also has it by head dim (attention_by_head_dim; a kernel's by_head_dim): a
    // scaled figure scales its rows' columns alike, a set one replaces the rows (it then prices every head dim)
    const bool root_fig = key == "attention_efficiency" || key == "attention_backward_efficiency";
    const char* rows_key = root_fig ? "attention_by_head_dim" : key == "efficiency" ? "by_head_dim" : nullptr;
    if (rows_key && n[rows_key] && n[rows_key].IsSequence()) {
      if (!e.scale) {
        n.remove(rows_key);
      } else {
        const size_t first = key == "attention_backward_efficiency" ? 2 : 1;  // the backward column, or both
        for (auto row : n[rows_key])
          for (size_t col = first; row.IsSequence() && col < row.size() && col <= 2; ++col)
            row[col] = number_at(row, col, std::string(rows_key), file) * e.value;
      }
    }
    return;
  }
  YAML::Node c = n[key];
  if (!c) fail(file, "'" + e.as_written + "': the spec has no '" + key + "'");
  if (!c.IsSequence()) return apply_edit(c, parts, i + 1, e, file);
  // a list of named entries (a system's levels): the next part names one, or * for all
  if (i + 2 >= parts.size())
    fail(file, "'" + e.as_written + "': '" + key + "' is a list: name an entry (" + key + ".<name>.<key>, or " + key +
                   ".*.<key>)");
  std::string names;
  bool found = false;
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string nm = c[k]["name"] ? c[k]["name"].as<std::string>() : std::to_string(k);
    names += (names.empty() ? "" : ", ") + nm;
    if (parts[i + 1] == "*" || parts[i + 1] == nm) {
      apply_edit(c[k], parts, i + 2, e, file);
      found = true;
    }
  }
  if (!found) fail(file, "'" + e.as_written + "': no entry of '" + key + "' named '" + parts[i + 1] + "' (" + names + ")");
}
void apply_edits(YAML::Node& root, const std::vector<SpecEdit>& edits, const std::string& file) {
  for (const SpecEdit& e : edits) {
    std::vector<std::string> parts;
    for (size_t a = 0;;) {
      const size_t b = e.path.find('.', a);
      parts.push_back(e.path.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    apply_edit(root, parts, 0, e, file);
  }
}
ChipSpec read_chip(const std::string& file, const std::vector<SpecEdit>& edits);
}
ChipSpec load_chip(const std::string& name_or_path, const std::vector<SpecEdit>& edits) {
  return with_file_named(resolve(name_or_path, "chips", "chip"),
                         [&](const std::string& f) { return read_chip(f, edits); });
}
namespace {
// Rows of [head dim, forward, backward] fractions of peak, by increasing head dim (`what`: the key, for errors).
std::vector<AttentionPoint> attention_rows(const YAML::Node& t, const std::string& what, const std::string& file) {
  if (!t.IsSequence() || t.size() == 0)
    fail(file, "key '" + what + "' must be a non-empty list of [head dim, forward, backward] (fractions of peak)");
  std::vector<AttentionPoint> rows;
  for (const auto& p : t) {
    if (!p.IsSequence() || p.size() != 3) fail(file, what + " entries must be [head dim, forward, backward]");
    const double d = number_at(p, 0, what, file), f = number_at(p, 1, what, file), b = number_at(p, 2, what, file);
    if (!(d >= 1) || !(d <= 1e6) || d != std::floor(d) || !(f > 0) || f > 1 || !(b > 0) || b > 1)
      fail(file, what + " entry [" + row_text(p) + "]: need a whole head dim >= 1 and fractions of peak in (0, 1]");
    const AttentionPoint a{(int64_t)d, f, b};  // d checked first: a whole number in [1, 10^6]
    if (!rows.empty() && a.head_dim <= rows.back().head_dim)
      fail(file, what + " must be sorted by increasing head dim (" + p[0].as<std::string>() + " follows " +
                     std::to_string(rows.back().head_dim) + ")");
    rows.push_back(a);
  }
  return rows;
}
ChipSpec read_chip(const std::string& file, const std::vector<SpecEdit>& edits) {
  YAML::Node n = load_yaml(file);
  apply_edits(n, edits, file);
  if (!n.IsMap()) fail(file, "expected a map of chip figures");
  check_keys(n,
             {"name", "cores", "peak_tflops", "headline_tflops", "mfu_peak_tflops", "vector_tflops", "hbm_gib",
              "hbm_tbps", "memory_efficiency", "attention_efficiency", "attention_backward_efficiency",
              "eager_launch_us", "compiled_launch_us", "comm_interference", "gemm_tile", "gemm_efficiency",
              "attention_kernels", "attention_by_head_dim", "gemm_power_limit_tflops",
              "eager_host_us", "compiled_host_us", "local_comm_gbps", "local_comm_latency_us", "gemm_efficiency_per",
              "fp8_tflops", "mxfp8_tflops", "fp32_tflops", "engines", "fp8_split_accumulation_rate"},
             file, "");
  ChipSpec c;
  c.file = file;
  c.name = n["name"] ? n["name"].as<std::string>() : fs::path(file).stem().string();
  c.cores = count(n, "cores", file);
  c.peak_tflops = number(n, "peak_tflops", file);
  c.headline_tflops = n["headline_tflops"] ? number(n, "headline_tflops", file) : c.peak_tflops;
  c.mfu_peak_tflops = n["mfu_peak_tflops"] ? number(n, "mfu_peak_tflops", file) : c.peak_tflops;
  c.vector_tflops = number(n, "vector_tflops", file);
  c.fp8_tflops = n["fp8_tflops"] ? number(n, "fp8_tflops", file) : 0.0;
  c.mxfp8_tflops = n["mxfp8_tflops"] ? number(n, "mxfp8_tflops", file) : 0.0;
  c.fp32_tflops = n["fp32_tflops"] ? number(n, "fp32_tflops", file) : 0.0;
  c.fp8_split_accumulation_rate =
      n["fp8_split_accumulation_rate"] ? number(n, "fp8_split_accumulation_rate", file) : 1.0;
  if (!(c.fp8_split_accumulation_rate > 0 && c.fp8_split_accumulation_rate <= 1))
    fail(file, "fp8_split_accumulation_rate must be in (0, 1] (the fraction of the FP8 rate a GEMM without fast "
               "accumulation reaches), got " + std::to_string(c.fp8_split_accumulation_rate));
  c.hbm_gib = number(n, "hbm_gib", file);
  c.hbm_tbps = number(n, "hbm_tbps", file);
  c.memory_efficiency = number(n, "memory_efficiency", file);
  c.attention_efficiency = number(n, "attention_efficiency", file);
  c.attention_backward_efficiency =
      n["attention_backward_efficiency"] ? number(n, "attention_backward_efficiency", file) : 0.0;
  c.eager_launch_us = number(n, "eager_launch_us", file, true);
  c.compiled_launch_us = number(n, "compiled_launch_us", file, true);
  c.eager_host_us = n["eager_host_us"] ? number(n, "eager_host_us", file, true) : 0.0;
  c.compiled_host_us = n["compiled_host_us"] ? number(n, "compiled_host_us", file, true) : 0.0;
  if (!n["local_comm_gbps"] != !n["local_comm_latency_us"])
    fail(file, "keys 'local_comm_gbps' and 'local_comm_latency_us' go together (the exchange between the ranks of "
               "a chip: GB/s and us per step); give both or neither");
  c.local_comm_gbps = n["local_comm_gbps"] ? number(n, "local_comm_gbps", file) : 0.0;
  c.local_comm_latency_us = n["local_comm_latency_us"] ? number(n, "local_comm_latency_us", file, true) : 0.0;
  if (n["gemm_efficiency_per"]) {
    const std::string per = n["gemm_efficiency_per"].as<std::string>();
    if (per != "rank" && per != "chip")
      fail(file, "key 'gemm_efficiency_per': '" + per + "' is not one of rank, chip");
    c.gemm_table_per_chip = per == "chip";
  }
  c.comm_interference = n["comm_interference"] ? number(n, "comm_interference", file, true) : 0.0;
  if (c.comm_interference >= 1) fail(file, "key 'comm_interference' must be < 1");
  for (const char* k : {"memory_efficiency", "attention_efficiency", "attention_backward_efficiency"})
    if (n[k] && n[k].as<double>() > 1) fail(file, std::string("key '") + k + "' must be <= 1");
  if (n["attention_kernels"]) {  // kernel: fraction, or kernel: {efficiency: fraction, by_head_dim: rows}
    if (!n["attention_kernels"].IsMap())
      fail(file, "key 'attention_kernels' must be a map of kernel: fraction of peak (or {efficiency, by_head_dim})");
    for (const auto& kv : n["attention_kernels"]) {
      const std::string name = kv.first.as<std::string>();
      AttentionKernel a;
      if (kv.second.IsMap()) {
        check_keys(kv.second, {"efficiency", "by_head_dim"}, file, " in attention_kernels." + name);
        if (!kv.second["efficiency"])
          fail(file, "attention_kernels." + name + " needs 'efficiency' (its fraction of peak where the head dim is "
                     "unknown) beside by_head_dim");
        a.efficiency = number(kv.second, "efficiency", file);
        if (kv.second["by_head_dim"])
          a.by_head_dim = attention_rows(kv.second["by_head_dim"], "attention_kernels." + name + ".by_head_dim", file);
      } else {
        a.efficiency = number(n["attention_kernels"], name, file);  // a number > 0, or an error naming the file
      }
      if (a.efficiency > 1) fail(file, "attention_kernels." + name + " must be <= 1");
      c.attention_kernels[name] = a;
    }
  }
  if (n["attention_by_head_dim"])
    c.attention_by_head_dim = attention_rows(n["attention_by_head_dim"], "attention_by_head_dim", file);
  c.gemm_power_limit_tflops = n["gemm_power_limit_tflops"] ? number(n, "gemm_power_limit_tflops", file) : 0.0;
  if (n["engines"]) {  // one core's engines (simulator/engines.h)
    const YAML::Node en = n["engines"];
    if (!en.IsMap()) fail(file, "key 'engines' must be a map of one core's engine figures");
    check_keys(en, {"tensor_ghz", "array", "moving_max", "stationary_min_cycles", "vector_ghz", "scalar_ghz",
                    "gpsimd_ghz", "min_ii_cycles", "dma_gbps", "dma_latency_us"},
               file, " in engines");
    EngineSpec& e = c.engines;
    e.tensor_ghz = number(en, "tensor_ghz", file);
    e.array = count(en, "array", file);
    e.moving_max = count(en, "moving_max", file);
    e.stationary_min = number(en, "stationary_min_cycles", file);
    e.vector_ghz = number(en, "vector_ghz", file);
    e.scalar_ghz = number(en, "scalar_ghz", file);
    e.gpsimd_ghz = number(en, "gpsimd_ghz", file);
    e.min_ii = number(en, "min_ii_cycles", file, true);
    e.dma_gbps = number(en, "dma_gbps", file);
    e.dma_latency_us = number(en, "dma_latency_us", file, true);
  }
  if (!n["gemm_tile"] || !n["gemm_tile"].IsSequence() || n["gemm_tile"].size() != 3)
    fail(file, "missing key 'gemm_tile' ([m, n, k] padding multiples)");
  for (const auto& v : n["gemm_tile"]) {
    const int t = v.as<int>();
    if (t < 1) fail(file, "gemm_tile entries must be >= 1");
    c.gemm_tile.push_back(t);
  }
  if (!n["gemm_efficiency"] || !n["gemm_efficiency"].IsSequence() || n["gemm_efficiency"].size() < 1)
    fail(file, "missing key 'gemm_efficiency' (list of [GFLOP per call, fraction of peak])");
  for (const auto& p : n["gemm_efficiency"]) {
    if (!p.IsSequence() || p.size() != 2) fail(file, "gemm_efficiency entries must be [gflop, efficiency]");
    EfficiencyPoint e{p[0].as<double>(), p[1].as<double>()};
    if (!(e.gflop > 0) || !(e.efficiency > 0) || e.efficiency > 1)
      fail(file, "gemm_efficiency entry [" + p[0].as<std::string>() + ", " + p[1].as<std::string>() +
                     "]: need gflop > 0 and 0 < efficiency <= 1");
    if (!c.gemm_efficiency.empty() && e.gflop <= c.gemm_efficiency.back().gflop)
      fail(file, "gemm_efficiency must be sorted by increasing gflop");
    c.gemm_efficiency.push_back(e);
  }
  return c;
}
}  // namespace

namespace {
SystemSpec read_system(const std::string& file, const std::vector<SpecEdit>& edits);
}
SystemSpec load_system(const std::string& name_or_path, const std::vector<SpecEdit>& edits) {
  return with_file_named(resolve(name_or_path, "systems", "system"),
                         [&](const std::string& f) { return read_system(f, edits); });
}
namespace {
SystemSpec read_system(const std::string& file, const std::vector<SpecEdit>& edits) {
  YAML::Node n = load_yaml(file);
  apply_edits(n, edits, file);
  if (!n.IsMap()) fail(file, "expected a map");
  check_keys(n, {"name", "chip", "chips", "levels", "scale_out", "collective_library"}, file, "");
  SystemSpec s;
  s.file = file;
  s.name = n["name"] ? n["name"].as<std::string>() : fs::path(file).stem().string();
  if (!n["chip"]) fail(file, "missing key 'chip'");
  s.chip_name = n["chip"].as<std::string>();
  // a chip given as a relative .yaml path is the file beside this system's (titan-calibrate writes them so)
  if (s.chip_name.size() > 5 && s.chip_name.substr(s.chip_name.size() - 5) == ".yaml" &&
      fs::path(s.chip_name).is_relative())
    s.chip_name = (fs::path(file).parent_path() / s.chip_name).string();
  s.chips = count(n, "chips", file);
  if (n["collective_library"]) {
    const std::string lib = n["collective_library"].as<std::string>();
    const auto parsed = config::parse_enum<CollectiveLibrary>(lib);
    if (!parsed) {
      std::string allowed;
      for (const auto& c : config::enum_choices<CollectiveLibrary>()) allowed += (allowed.empty() ? "" : ", ") + c;
      fail(file, "key 'collective_library': '" + lib + "' is not a known library (" + allowed + ")");
    }
    s.library = *parsed;
  }
  if (!n["levels"] || !n["levels"].IsSequence() || n["levels"].size() == 0)
    fail(file, "missing key 'levels' (the interconnect, innermost first)");
  double prod = 1;
  for (size_t i = 0; i < n["levels"].size(); ++i) {
    s.levels.push_back(parse_level(n["levels"][i], file, "levels[" + std::to_string(i) + "]", LevelPlace::Inside));
    prod *= s.levels.back().units;
  }
  for (const NetworkLevel& l : s.levels)
    if (l.nvls_efficiency > 0 && s.library != CollectiveLibrary::nccl)
      fail(file, "level '" + l.name + "': nvls_efficiency needs collective_library: nccl (the generic model picks no "
                 "algorithm, so an in-switch reduction would never be priced)");
  if (prod != s.chips) {
    std::ostringstream o;
    o << "the levels' units multiply to " << prod << " chips but 'chips' is " << s.chips;
    fail(file, o.str());
  }
  if (n["scale_out"]) {
    s.has_scale_out = true;
    YAML::Node so = n["scale_out"];
    if (!so["units"]) so["units"] = 1;  // the number of systems is the job's
    if (!so["topology"]) so["topology"] = "switch";
    s.scale_out = parse_level(so, file, "scale_out", LevelPlace::ScaleOut);
  }
  return s;
}
}  // namespace

double gemm_efficiency(const ChipSpec& c, double gflop) {
  const auto& t = c.gemm_efficiency;
  if (gflop <= t.front().gflop) return t.front().efficiency;
  if (gflop >= t.back().gflop) return t.back().efficiency;
  for (size_t i = 1; i < t.size(); ++i)
    if (gflop <= t[i].gflop) {
      const double a = std::log10(t[i - 1].gflop), b = std::log10(t[i].gflop), x = std::log10(gflop);
      const double w = (x - a) / (b - a);
      return t[i - 1].efficiency + w * (t[i].efficiency - t[i - 1].efficiency);
    }
  return t.back().efficiency;
}

}  // namespace titan::sim
