#include "src/checkpoint/safetensors.h"

#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "src/checkpoint/blocks.h"
#include "src/config/untrusted_json.h"
#include "src/log/log.h"
#include "src/tensor/error.h"
#include "src/tensor/memory.h"

namespace fs = std::filesystem;

namespace titan {

namespace {
using ojson = nlohmann::ordered_json;

const char* st_name(SafetensorsDType d) { return d == SafetensorsDType::F32 ? "F32" : d == SafetensorsDType::BF16 ? "BF16" : "F16"; }
size_t st_size(SafetensorsDType d) { return d == SafetensorsDType::F32 ? 4 : 2; }

uint16_t f32_to_f16(float f) {  // IEEE binary16, round to nearest even, subnormals, overflow to inf
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);               // NaN
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);              // rounds past 65504: inf
  if (a < 0x38800000u) {                                                 // below 2^-14: subnormal or zero
    if (a < 0x33000000u) return (uint16_t)sign;                          // below half the smallest subnormal
    const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // q = value / 2^-24 = m * 2^(e - 126)
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    uint32_t q = m >> shift;
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal: still right
    return (uint16_t)(sign | q);
  }
  uint32_t h = ((a - 0x38000000u) >> 13);  // rebias exponent 127 -> 15, drop 13 mantissa bits
  const uint32_t rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return (uint16_t)(sign | h);
}
float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  uint32_t u;
  if (e == 0) {
    if (m == 0) u = sign;
    else {  // subnormal: m * 2^-24
      float f = std::ldexp((float)m, -24);
      return sign ? -f : f;
    }
  } else if (e == 31) {
    u = sign | 0x7F800000u | (m << 13);
  } else {
    u = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int rank_of(MPI_Comm comm) {
  int r = 0;
  if (comm) MPI_Comm_rank(comm, &r);
  return r;
}
void barrier(MPI_Comm comm) {
  if (comm) MPI_Barrier(comm);
}

void pwrite_all(int fd, const void* buf, size_t n, off_t at, const std::string& path) {
  const char* p = (const char*)buf;
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, at);
    TITAN_CHECK(w > 0, "safetensors: writing '", path, "' failed: ", std::strerror(errno));
    p += w;
    n -= (size_t)w;
    at += w;
  }
}
void pread_all(int fd, void* buf, size_t n, off_t at, const std::string& path) {
  char* p = (char*)buf;
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, at);
    TITAN_CHECK(r > 0, "safetensors: reading '", path, "' failed", r == 0 ? " (file truncated)" : ": ",
                r == 0 ? "" : std::strerror(errno));
    p += r;
    n -= (size_t)r;
    at += r;
  }
}

struct Fd {
  int fd = -1;
  Fd(const std::string& path, int flags, const char* what) {
    fd = ::open(path.c_str(), flags, 0644);
    TITAN_CHECK(fd >= 0, "safetensors: cannot ", what, " '", path, "': ", std::strerror(errno));
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// One tensor of a file being read.
struct Stored {
  std::string file, dtype;
  Shape shape;
  uint64_t begin = 0;  // absolute offset of its bytes in the file
  std::string checksum;  // titan's (hex), "" for files written elsewhere
};

// A tensor's extent from its header entry: every dimension a non-negative integer, the element count and the
// byte size without overflow. Errors name the file, the tensor and the values as written.
void read_entry(const std::string& file, const std::string& name, const nlohmann::json& t, uint64_t data,
                uint64_t size, Stored& s) {
  const std::string where = "safetensors: tensor '" + name + "' in '" + file + "'";
  TITAN_CHECK(t.is_object() && t.contains("dtype") && t.contains("shape") && t.contains("data_offsets"), where,
              " lacks dtype/shape/data_offsets: ", t.dump().substr(0, 200));
  TITAN_CHECK(t["dtype"].is_string(), where, ": dtype ", t["dtype"].dump(), " is not a string");
  s.dtype = t["dtype"].get<std::string>();
  TITAN_CHECK(s.dtype == "F32" || s.dtype == "BF16" || s.dtype == "F16", where, " is ", s.dtype,
              "; titan loads F32, BF16 and F16 weights");
  TITAN_CHECK(t["shape"].is_array() && t["shape"].size() <= 8, where, ": shape ", t["shape"].dump().substr(0, 200),
              " is not a list of at most 8 dimensions");
  const uint64_t es = s.dtype == "F32" ? 4 : 2;
  // the bytes of the non-zero dimensions fit 2^63 (a zero dimension must not hide huge others: index arithmetic
  // over the shape multiplies them all)
  uint64_t bytes = es, nonzero = es;
  for (const auto& d : t["shape"]) {
    TITAN_CHECK(d.is_number_integer() && (d.is_number_unsigned() || d.get<int64_t>() >= 0), where,
                ": shape ", t["shape"].dump(), " holds ", d.dump(), ", not a non-negative integer");
    const uint64_t n = d.get<uint64_t>();
    TITAN_CHECK(n <= (uint64_t)INT64_MAX && !__builtin_mul_overflow(nonzero, std::max<uint64_t>(n, 1), &nonzero) &&
                    nonzero <= (uint64_t)INT64_MAX,
                where, ": shape ", t["shape"].dump(), " of ", s.dtype, " is more than 2^63 bytes");
    bytes *= n;
    s.shape.push_back((int64_t)n);
  }
  const auto& o = t["data_offsets"];
  TITAN_CHECK(o.is_array() && o.size() == 2 && o[0].is_number_unsigned() && o[1].is_number_unsigned(), where,
              ": data_offsets ", o.dump().substr(0, 200), " is not [begin, end] (two non-negative integers)");
  const uint64_t b = o[0].get<uint64_t>(), e = o[1].get<uint64_t>();
  TITAN_CHECK(e >= b && e - b == bytes && e <= size - data, where, " has data_offsets [", b, ", ", e, "] for ", bytes,
              " bytes of ", shape_str(s.shape), " ", s.dtype, " in a file of ", size, " bytes (", size - data,
              " after the header): damaged or truncated");
  s.begin = data + b;
}

void parse_file(const std::string& file, std::map<std::string, Stored>& out) {
  Fd f(file, O_RDONLY, "open");
  struct stat st {};
  fstat(f.fd, &st);
  const uint64_t size = (uint64_t)st.st_size;
  TITAN_CHECK(size >= 8, "safetensors: '", file, "' is ", size, " bytes: not a safetensors file");
  uint64_t n = 0;
  pread_all(f.fd, &n, 8, 0, file);
  TITAN_CHECK(n <= size - 8 && n < (100u << 20), "safetensors: '", file, "' declares a ", n,
              "-byte header in a file of ", size, " bytes: not a safetensors file, or damaged");
  std::string text(n, '\0');
  pread_all(f.fd, text.data(), n, 8, file);
  const nlohmann::json h = config::parse_untrusted_json(text, "safetensors: the header of '" + file + "'");
  TITAN_CHECK(h.is_object(), "safetensors: the header of '", file, "' is not a JSON object");
  const uint64_t data = 8 + n;
  nlohmann::json sums = nlohmann::json::object();
  if (h.contains("__metadata__")) {
    const auto& meta = h["__metadata__"];
    TITAN_CHECK(meta.is_object(), "safetensors: __metadata__ of '", file, "' is not an object");
    if (meta.contains("titan_checksums")) {
      TITAN_CHECK(meta["titan_checksums"].is_string(), "safetensors: the titan_checksums metadata of '", file,
                  "' is not a string");
      sums = config::parse_untrusted_json(meta["titan_checksums"].get<std::string>(),
                               "safetensors: the titan_checksums metadata of '" + file + "'");
      TITAN_CHECK(sums.is_object(), "safetensors: the titan_checksums metadata of '", file, "' is not an object");
    }
  }
  for (auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;
    Stored s;
    s.file = file;
    read_entry(file, name, t, data, size, s);
    if (sums.contains(name)) {
      TITAN_CHECK(sums[name].is_string(), "safetensors: the titan checksum of '", name, "' in '", file,
                  "' is not a string: ", sums[name].dump());
      s.checksum = sums[name].get<std::string>();
    }
    TITAN_CHECK(!out.count(name), "safetensors: tensor '", name, "' appears twice (in '", out[name].file, "' and '",
                file, "')");
    out[name] = s;
  }
}

// The files of a safetensors path: the file itself, the shards an index names, or what a folder holds.
std::vector<std::string> st_files(const std::string& path) {
  std::string p = path;
  if (fs::is_directory(p)) {
    if (fs::exists(fs::path(p) / "model.safetensors.index.json")) p = (fs::path(p) / "model.safetensors.index.json").string();
    else if (fs::exists(fs::path(p) / "model.safetensors")) p = (fs::path(p) / "model.safetensors").string();
    else fail("safetensors: folder '", path, "' holds neither model.safetensors nor model.safetensors.index.json");
  }
  if (p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0) {
    std::error_code ec;
    const uintmax_t bytes = fs::file_size(p, ec);
    TITAN_CHECK(!ec, "safetensors: cannot open '", p, "': ", ec.message());
    TITAN_CHECK(bytes < (100u << 20), "safetensors: index '", p, "' is ", bytes,
                " bytes; an index of weight names is far smaller (at most 100 MiB read): not an index, or damaged");
    std::ifstream in(p, std::ios::binary);
    TITAN_CHECK(in.good(), "safetensors: cannot open '", p, "'");
    std::string text((size_t)bytes, '\0');
    in.read(text.data(), (std::streamsize)bytes);
    const nlohmann::json j = config::parse_untrusted_json(text, "safetensors: index '" + p + "'");
    TITAN_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "safetensors: index '", p,
                "' has no weight_map object");
    std::set<std::string> files;
    for (auto& [k, v] : j["weight_map"].items()) {
      // a shard is a file beside the index: a path elsewhere (../, /) is refused, never opened
      TITAN_CHECK(v.is_string() && !v.get<std::string>().empty() &&
                      v.get<std::string>().find('/') == std::string::npos && v.get<std::string>() != ".." &&
                      v.get<std::string>() != ".",
                  "safetensors: index '", p, "' maps '", k, "' to ", v.dump().substr(0, 200),
                  ", not the name of a file beside the index");
      files.insert((fs::path(p).parent_path() / v.get<std::string>()).string());
    }
    return {files.begin(), files.end()};
  }
  return {p};
}
}  // namespace

SafetensorsDType safetensors_dtype(const std::string& d) {
  if (d == "float32") return SafetensorsDType::F32;
  if (d == "bfloat16") return SafetensorsDType::BF16;
  if (d == "float16") return SafetensorsDType::F16;
  fail("safetensors: export dtype '", d, "' is not one of float32, bfloat16, float16");
}

bool is_safetensors(const std::string& path) {
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return path.size() >= n && path.compare(path.size() - n, n, s) == 0;
  };
  if (ends(".safetensors") || ends(".safetensors.index.json")) return true;
  return fs::is_directory(path) && (fs::exists(fs::path(path) / "model.safetensors") ||
                                    fs::exists(fs::path(path) / "model.safetensors.index.json"));
}

std::vector<std::string> save_safetensors(const std::string& folder, const std::vector<Region>& params,
                                          SafetensorsDType dtype, int64_t max_shard_bytes, MPI_Comm comm) {
  agree_on_datasets(params, {}, folder, comm);
  const int me = rank_of(comm);
  // ---- the layout, identical on every rank: shards filled in parameter order
  struct Entry {
    const Region* r;
    int shard;
    uint64_t begin, bytes;
  };
  std::vector<Entry> entries;
  std::vector<uint64_t> shard_bytes{0};
  // a name may come in several blocks of one rank (an HF tensor fusing two parameters): one tensor, each block
  // written at its offset
  std::vector<size_t> entry_of;  // per region
  std::map<std::string, size_t> by_name;
  for (const auto& r : params) {
    if (auto it = by_name.find(r.name); it != by_name.end()) {
      TITAN_CHECK(entries[it->second].r->full_shape == r.full_shape, "safetensors: '", r.name,
                  "' comes in blocks of different logical shapes");
      entry_of.push_back(it->second);
      continue;
    }
    by_name[r.name] = entries.size();
    entry_of.push_back(entries.size());
    int64_t numel = 1;
    for (auto d : r.full_shape) numel *= d;
    const uint64_t bytes = (uint64_t)numel * st_size(dtype);
    if (shard_bytes.back() > 0 && shard_bytes.back() + bytes > (uint64_t)max_shard_bytes) shard_bytes.push_back(0);
    entries.push_back({&r, (int)shard_bytes.size() - 1, shard_bytes.back(), bytes});
    shard_bytes.back() += bytes;
  }
  const int n_shards = (int)shard_bytes.size();
  std::vector<std::string> names;
  for (int s = 0; s < n_shards; ++s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
    names.push_back(n_shards == 1 ? "model.safetensors" : buf);
  }
  // checksums of the values as stored (what each tensor reads back as), summed over the ranks' blocks
  std::vector<uint64_t> sums(entries.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    const Region& r = params[i];
    if (r.writer && !r.local->is_meta()) {
      Tensor c = r.local->contiguous().clone();
      float* p = c.data<float>();
      for (int64_t j = 0; j < c.numel(); ++j)
        p[j] = dtype == SafetensorsDType::F32 ? p[j] : dtype == SafetensorsDType::BF16 ? round_to_bf16(p[j])
                                                                                      : f16_to_f32(f32_to_f16(p[j]));
      sums[entry_of[i]] += block_checksum(r.full_shape, r.offset, c.shape(), p);
    }
  }
  if (comm) MPI_Allreduce(MPI_IN_PLACE, sums.data(), (int)sums.size(), MPI_UINT64_T, MPI_SUM, comm);
  std::vector<uint64_t> data_start(n_shards);
  std::vector<std::string> headers(n_shards);
  for (int s = 0; s < n_shards; ++s) {
    ojson h;
    ojson cs = ojson::object();  // titan's checksums ride in the metadata, which HF loaders pass over
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].shard == s) {
        char hex[24];
        std::snprintf(hex, sizeof hex, "%llx", (unsigned long long)sums[i]);
        cs[entries[i].r->name] = hex;
      }
    h["__metadata__"] = {{"format", "pt"}, {"titan_checksums", cs.dump()}};
    for (const auto& e : entries)
      if (e.shard == s) {
        ojson t;
        t["dtype"] = st_name(dtype);
        t["shape"] = e.r->full_shape;
        t["data_offsets"] = {e.begin, e.begin + e.bytes};
        h[e.r->name] = t;
      }
    std::string text = h.dump();
    text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data starts 8-byte aligned
    headers[s] = text;
    data_start[s] = 8 + text.size();
  }
  // ---- rank 0 creates each file at its final size with its header; then every rank writes its blocks
  if (me == 0) {
    fs::create_directories(folder);
    for (int s = 0; s < n_shards; ++s) {
      const std::string tmp = folder + "/" + names[s] + ".tmp";
      Fd f(tmp, O_CREAT | O_TRUNC | O_WRONLY, "create");
      const uint64_t n = headers[s].size();
      pwrite_all(f.fd, &n, 8, 0, tmp);
      pwrite_all(f.fd, headers[s].data(), n, 8, tmp);
      TITAN_CHECK(::ftruncate(f.fd, (off_t)(data_start[s] + shard_bytes[s])) == 0, "safetensors: cannot size '", tmp,
                  "' to ", data_start[s] + shard_bytes[s], " bytes: ", std::strerror(errno));
    }
  }
  barrier(comm);
  {
    uint64_t total = 0;
    for (const auto& r : params) total += r.writer && !r.local->is_meta() ? (uint64_t)r.local->numel() * st_size(dtype) : 0;
    Progress progress("writing safetensors " + folder, (int64_t)std::max<uint64_t>(total, 1));
    std::vector<int> fds(n_shards, -1);
    std::vector<char> buf;
    for (size_t ri = 0; ri < params.size(); ++ri) {
      const Region* block = &params[ri];
      if (!block->writer || block->local->is_meta()) continue;
      Entry e = entries[entry_of[ri]];
      e.r = block;  // this block, at the tensor's place in the file
      const std::string tmp = folder + "/" + names[e.shard] + ".tmp";
      if (fds[e.shard] < 0) {
        fds[e.shard] = ::open(tmp.c_str(), O_WRONLY);
        TITAN_CHECK(fds[e.shard] >= 0, "safetensors: cannot open '", tmp, "' on rank ", me, ": ", std::strerror(errno));
      }
      const Tensor src = e.r->local->contiguous();
      TITAN_CHECK(src.dtype() == DType::F32, "safetensors: parameter ", e.r->name, " is ", dtype_name(src.dtype()),
                  ", expected float32");
      const float* p = src.data<float>();
      const size_t es = st_size(dtype);
      for_each_run(e.r->full_shape, e.r->offset, src.shape(), [&](int64_t fo, int64_t lo, int64_t n) {
        buf.resize((size_t)n * es);
        if (dtype == SafetensorsDType::F32) std::memcpy(buf.data(), p + lo, (size_t)n * 4);
        else {
          auto* o = (uint16_t*)buf.data();
          for (int64_t i = 0; i < n; ++i) o[i] = dtype == SafetensorsDType::BF16 ? float_to_bf16_bits(p[lo + i]) : f32_to_f16(p[lo + i]);
        }
        pwrite_all(fds[e.shard], buf.data(), buf.size(), (off_t)(data_start[e.shard] + e.begin + (uint64_t)fo * es), tmp);
      });
      progress.add(block->local->numel() * (int64_t)st_size(dtype));
    }
    for (int s = 0; s < n_shards; ++s)
      if (fds[s] >= 0) {
        TITAN_CHECK(::fsync(fds[s]) == 0, "safetensors: fsync of '", folder, "/", names[s], ".tmp' failed: ",
                    std::strerror(errno));
        ::close(fds[s]);
      }
    progress.finish();
  }
  barrier(comm);
  if (me == 0) {
    if (n_shards > 1) {
      ojson idx;
      uint64_t total = 0;
      for (auto b : shard_bytes) total += b;
      idx["metadata"] = {{"total_size", total}};
      ojson wm = ojson::object();
      for (const auto& e : entries) wm[e.r->name] = names[e.shard];
      idx["weight_map"] = wm;
      const std::string ip = folder + "/model.safetensors.index.json";
      {
        std::ofstream o(ip + ".tmp");
        o << idx.dump(2) << "\n";
        o.flush();
        TITAN_CHECK(o.good(), "safetensors: writing '", ip, ".tmp' failed (disk full?)");
      }
      fs::rename(ip + ".tmp", ip);
    } else {
      std::error_code ec;
      fs::remove(folder + "/model.safetensors.index.json", ec);  // a stale index would point at old shards
    }
    for (int s = 0; s < n_shards; ++s) fs::rename(folder + "/" + names[s] + ".tmp", folder + "/" + names[s]);
    fsync_dir(folder);
  }
  barrier(comm);
  if (n_shards > 1) names.push_back("model.safetensors.index.json");
  return names;
}

void load_safetensors(const std::string& path, const std::vector<Region>& params, MPI_Comm comm) {
  std::map<std::string, Stored> stored;
  for (const auto& f : st_files(path)) parse_file(f, stored);
  {  // every tensor read whole once (split over the ranks): finite, and equal to titan's checksum when it has one
    int me = 0, world = 1;
    if (comm) {
      MPI_Comm_rank(comm, &me);
      MPI_Comm_size(comm, &world);
    }
    std::string why;
    try {
      int64_t i = 0;
      std::vector<char> raw;
      std::vector<float> vals;
      for (const auto& [name, s] : stored) {
        if (i++ % world != me) continue;
        const size_t es = s.dtype == "F32" ? 4 : 2;
        int64_t n = 1;
        for (auto d : s.shape) n *= d;
        check_memory_budget((double)n * (double)(es + 4), "safetensors: reading tensor '" + name + "' of '" + s.file +
                                                              "' (" + shape_str(s.shape) + " " + s.dtype + ") whole");
        raw.resize((size_t)n * es);
        vals.resize((size_t)n);
        Fd f(s.file, O_RDONLY, "open");
        pread_all(f.fd, raw.data(), raw.size(), (off_t)s.begin, s.file);
        const auto* h = (const uint16_t*)raw.data();
        for (int64_t k = 0; k < n; ++k)
          vals[(size_t)k] = es == 4 ? ((const float*)raw.data())[k] : s.dtype == "BF16" ? bf16_bits_to_float(h[k]) : f16_to_f32(h[k]);
        try {
          check_values(name, vals.data(), s.shape, s.checksum);
        } catch (const std::exception& e) {
          fail(s.file, ": ", e.what());
        }
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    why = agree_on_failure(why, comm);
    TITAN_CHECK(why.empty(), "safetensors: '", path, "' cannot be trusted: ", why);
  }
  std::set<std::string> expected;
  std::map<std::string, int> fds;
  int64_t total = 0;
  for (const auto& r : params) {
    int64_t n = 1;
    for (auto d : r.local->shape()) n *= d;
    total += n;
  }
  Progress progress("loading safetensors " + path, std::max<int64_t>(total, 1), "elements");
  std::vector<char> buf;
  for (const auto& r : params) {
    expected.insert(r.name);
    auto it = stored.find(r.name);
    if (it == stored.end() && r.optional) {
      log_info("safetensors: " + path + " has no '" + r.name + "': it keeps its initial value");
      continue;
    }
    TITAN_CHECK(it != stored.end(), "safetensors: '", path, "' has no tensor '", r.name,
                "': saved from a different model?");
    const Stored& s = it->second;
    TITAN_CHECK(s.shape == r.full_shape, "safetensors: tensor '", r.name, "' in '", s.file, "' has shape ",
                shape_str(s.shape), ", the model expects ", shape_str(r.full_shape));
    if (r.local->is_meta()) continue;
    TITAN_CHECK(r.local->dtype() == DType::F32 && r.local->is_contiguous(), "safetensors: parameter ", r.name,
                " must be a contiguous float32 tensor");
    if (!fds.count(s.file)) {
      const int fd = ::open(s.file.c_str(), O_RDONLY);
      TITAN_CHECK(fd >= 0, "safetensors: cannot open '", s.file, "': ", std::strerror(errno));
      fds[s.file] = fd;
    }
    const int fd = fds[s.file];
    const size_t es = s.dtype == "F32" ? 4 : 2;
    float* dst = r.local->data<float>();
    for_each_run(r.full_shape, r.offset, r.local->shape(), [&](int64_t fo, int64_t lo, int64_t n) {
      buf.resize((size_t)n * es);
      pread_all(fd, buf.data(), buf.size(), (off_t)(s.begin + (uint64_t)fo * es), s.file);
      if (es == 4) std::memcpy(dst + lo, buf.data(), buf.size());
      else {
        const auto* h = (const uint16_t*)buf.data();
        for (int64_t i = 0; i < n; ++i) dst[lo + i] = s.dtype == "BF16" ? bf16_bits_to_float(h[i]) : f16_to_f32(h[i]);
      }
    });
    progress.add(r.local->numel());
  }
  for (auto& [f, fd] : fds) ::close(fd);
  progress.finish();
  for (const auto& [name, s] : stored)
    TITAN_CHECK(expected.count(name), "safetensors: '", s.file, "' has tensor '", name,
                "' that this model does not have (different architecture or tie_word_embeddings?)");
  (void)comm;
}

}  // namespace titan
