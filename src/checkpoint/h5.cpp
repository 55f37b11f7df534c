#include "src/checkpoint/h5.h"

#include <hdf5.h>

#include <dirent.h>
#include <semaphore.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/ops/ops.h"
#include "src/tensor/bfloat16.h"
#include "src/tensor/memory.h"

namespace titan::h5 {

namespace {
struct Silence {  // HDF5 prints its error stack by default; we throw our own messages
  Silence() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
void silence() { static Silence s; }

struct Handle {  // closes any HDF5 id
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

hid_t bf16_type() {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 7, 8, 0, 7);
  H5Tset_offset(t, 0);
  H5Tset_precision(t, 16);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 127);
  return t;
}

// Whether any process this one can see holds the file `st` describes: an open descriptor on it or a mapping of it
// (fuser's test), matched by device and inode (a semaphore glibc creates is mapped under the temporary name it was
// made as). Processes whose /proc entries it cannot read are not counted (another user's: see
// clear_stale_mpiio_semaphore).
bool held_by_a_process(const struct stat& st) {
  DIR* proc = opendir("/proc");
  if (!proc) return true;  // nothing can be told: leave it
  char dev[32];
  std::snprintf(dev, sizeof(dev), "%02x:%02x", major(st.st_dev), minor(st.st_dev));
  const std::string inode = std::to_string((unsigned long long)st.st_ino);
  bool held = false;
  while (dirent* e = readdir(proc)) {
    if (held) break;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string pid = std::string("/proc/") + e->d_name;
    std::ifstream maps(pid + "/maps");  // "address perms offset dev inode path"
    for (std::string line; !held && std::getline(maps, line);) {
      std::istringstream in(line);
      std::string addr, perms, offset, d, ino;
      in >> addr >> perms >> offset >> d >> ino;
      held = d == dev && ino == inode;
    }
    if (held) break;
    if (DIR* fds = opendir((pid + "/fd").c_str())) {
      while (dirent* f = readdir(fds)) {
        struct stat t;
        if (f->d_name[0] != '.' && stat((pid + "/fd/" + f->d_name).c_str(), &t) == 0 && t.st_dev == st.st_dev &&
            t.st_ino == st.st_ino) {
          held = true;
          break;
        }
      }
      closedir(fds);
    }
  }
  closedir(proc);
  return held;
}

}  // namespace

bool clear_stale_mpiio_semaphore(const std::string& path) {
  const std::string name = "OMPIO_" + std::filesystem::path(path).filename().string();
  const std::string file = "/dev/shm/sem." + name;  // where glibc keeps a named semaphore
  struct stat st;
  if (stat(file.c_str(), &st) != 0) return false;             // none: the usual case
  if (st.st_uid != geteuid() && geteuid() != 0) return false;  // another user's: theirs to hold, not ours to remove
  if (held_by_a_process(st)) return false;                     // an open in progress (this job's or another's)
  if (sem_unlink(name.c_str()) != 0) return false;
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  std::fprintf(stderr, "[titan] removed %s on %s: an MPI-IO semaphore no process held, left taken by a process "
               "killed inside an MPI-IO open of a file named %s; it would have made this open of '%s' wait forever\n",
               file.c_str(), host, std::filesystem::path(path).filename().c_str(), path.c_str());
  return true;
}

File::File(const std::string& path, Mode mode, MPI_Comm comm) : path_(path), parallel_(comm != nullptr) {
  silence();
  Handle fapl{H5Pcreate(H5P_FILE_ACCESS), H5Pclose};
  if (comm) {
    clear_stale_mpiio_semaphore(path);  // every rank, on its own machine, before any rank opens (creates a new one)
    MPI_Barrier(comm);
    H5Pset_fapl_mpio(fapl.id, comm, MPI_INFO_NULL);
  }
  if (mode == Create) {
    id_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id);
    TITAN_CHECK(id_ >= 0, "hdf5: cannot create '", path, "' (directory missing or not writable?)");
  } else {
    TITAN_CHECK(std::filesystem::exists(path), "hdf5: '", path, "' does not exist");
    TITAN_CHECK(H5Fis_hdf5(path.c_str()) > 0, "hdf5: '", path, "' is not an HDF5 file (truncated or wrong format?)");
    id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id);
    TITAN_CHECK(id_ >= 0, "hdf5: cannot open '", path, "' (truncated or corrupt?)");
  }
}

File::~File() {
  if (id_ >= 0) H5Fclose(id_);
}

void File::close() {
  if (id_ < 0) return;
  const herr_t rc = H5Fclose(id_);  // flushes: a full disk shows here
  id_ = -1;
  TITAN_CHECK(rc >= 0, "hdf5: closing '", path_, "' failed (disk full or I/O error?)");
}

bool File::has(const std::string& name) const {
  // check each path component (H5Lexists needs the parents to exist)
  size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    std::string part = name.substr(0, pos);
    if (!part.empty() && part != "/" && H5Lexists(id_, part.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

std::vector<std::string> File::datasets(const std::string& group) const {
  std::vector<std::string> out;
  struct Ctx {
    std::vector<std::string>* out;
    std::string prefix;
  } ctx{&out, group == "/" ? "" : group + "/"};
  auto cb = [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    auto* c = static_cast<Ctx*>(data);
    if (info->type == H5O_TYPE_DATASET) c->out->push_back(c->prefix + name);
    return 0;
  };
  Handle g{H5Oopen(id_, group.c_str(), H5P_DEFAULT), H5Oclose};
  TITAN_CHECK(g.id >= 0, "hdf5: '", path_, "' has no group '", group, "'");
  H5Ovisit2(g.id, H5_INDEX_NAME, H5_ITER_NATIVE, cb, &ctx, H5O_INFO_BASIC);
  std::sort(out.begin(), out.end());
  return out;
}

bool File::holds_integers(const std::string& name) const {
  TITAN_CHECK(has(name), "hdf5: '", path_, "' has no dataset '", name, "'");
  Handle d{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  TITAN_CHECK(d.id >= 0, "hdf5: cannot open dataset '", name, "' in '", path_, "'");
  Handle t{H5Dget_type(d.id), H5Tclose};
  return H5Tget_class(t.id) == H5T_INTEGER;
}

Shape File::shape(const std::string& name) const {
  TITAN_CHECK(has(name), "hdf5: '", path_, "' has no dataset '", name, "'");
  Handle d{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  TITAN_CHECK(d.id >= 0, "hdf5: cannot open dataset '", name, "' in '", path_, "'");
  Handle sp{H5Dget_space(d.id), H5Sclose};
  int nd = H5Sget_simple_extent_ndims(sp.id);
  std::vector<hsize_t> dims(std::max(nd, 0));
  H5Sget_simple_extent_dims(sp.id, dims.data(), nullptr);
  // a file's shape: the product of its non-zero dimensions within 2^62 elements (index arithmetic multiplies them)
  double elements = 1;
  for (hsize_t d : dims) elements *= (double)std::max<hsize_t>(d, 1);
  TITAN_CHECK(elements < 4.6e18, "hdf5: dataset '", name, "' in '", path_, "' declares ", elements,
              " elements: more than any tensor titan reads (damaged file?)");
  return Shape(dims.begin(), dims.end());
}

void File::ensure_groups(const std::string& name) {
  size_t pos = 0;
  while ((pos = name.find('/', pos + 1)) != std::string::npos) {
    std::string g = name.substr(0, pos);
    if (g.empty() || g == "/") continue;
    if (H5Lexists(id_, g.c_str(), H5P_DEFAULT) <= 0) {
      Handle h{H5Gcreate2(id_, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
      TITAN_CHECK(h.id >= 0, "hdf5: cannot create group '", g, "' in '", path_, "'");
    }
  }
}

void File::write(const std::string& name, const Tensor& t, DType stored) {
  write_region(name, t.shape(), Shape(t.dim(), 0), t, true, stored);
}

void File::write_region(const std::string& name, const Shape& full_shape, const Shape& offset, const Tensor& t,
                        bool writer, DType stored) {
  write_boxes(name, full_shape, {Box{offset, &t, writer}}, stored);
}

void File::write_boxes(const std::string& name, const Shape& full_shape, const std::vector<Box>& boxes, DType stored) {
  TITAN_CHECK(!boxes.empty(), "hdf5: no block of '", name, "' to write");
  for (const Box& b : boxes) {
    TITAN_CHECK(!b.local->is_meta(), "hdf5: cannot write meta tensor '", name, "'");
    TITAN_CHECK(full_shape.size() == b.local->shape().size() && b.offset.size() == full_shape.size(), "hdf5: region of '",
                name, "' has rank ", b.local->dim(), ", logical shape ", shape_str(full_shape));
  }
  ensure_groups(name);
  std::vector<hsize_t> dims(full_shape.begin(), full_shape.end());
  Handle fsp{H5Screate_simple((int)dims.size(), dims.data(), nullptr), H5Sclose};
  const bool ints = boxes[0].local->dtype() == DType::I64;
  Handle own{-1, H5Tclose};
  hid_t ftype, mtype;
  if (ints) {
    ftype = H5T_STD_I64LE;
    mtype = H5T_NATIVE_INT64;
  } else if (stored == DType::BF16) {
    own.id = bf16_type();
    ftype = mtype = own.id;
  } else {
    ftype = H5T_IEEE_F32LE;
    mtype = H5T_NATIVE_FLOAT;
  }
  Handle d{H5Dcreate2(id_, name.c_str(), ftype, fsp.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
  TITAN_CHECK(d.id >= 0, "hdf5: cannot create dataset '", name, "' in '", path_, "'");
  for (const Box& b : boxes) {  // one collective write per block (every rank lists the same blocks)
    const Tensor& t = *b.local;
    TITAN_CHECK((t.dtype() == DType::I64) == ints, "hdf5: the blocks of '", name, "' mix integer and float types");
    Tensor c = t.contiguous();
    std::vector<uint16_t> bf;
    const void* buf = nullptr;
    Tensor f32;
    if (ints) {
      buf = c.data<int64_t>();
    } else {
      f32 = c.dtype() == DType::F32 ? c : cast(c, DType::F32);
      if (stored == DType::BF16) {
        const float* p = f32.data<float>();
        bf.resize(f32.numel());
        for (int64_t i = 0; i < f32.numel(); ++i) bf[i] = float_to_bf16_bits(p[i]);
        buf = bf.data();
      } else {
        buf = f32.data<float>();
      }
    }
    std::vector<hsize_t> off(b.offset.begin(), b.offset.end()), cnt(t.shape().begin(), t.shape().end());
    const bool any = b.writer && t.numel() > 0;
    // an empty block (a pipeline stage's parameter held elsewhere) still joins the collective write: with a
    // one-element memory space selecting nothing (a zero-extent space takes HDF5 down a path that skips
    // the collective and hangs the other ranks)
    std::vector<hsize_t> one(cnt.size(), 1);
    Handle msp{H5Screate_simple((int)cnt.size(), t.numel() > 0 ? cnt.data() : one.data(), nullptr), H5Sclose};
    if (any) {
      H5Sselect_hyperslab(fsp.id, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr);
    } else {
      H5Sselect_none(fsp.id);
      H5Sselect_none(msp.id);
    }
    Handle dx{H5Pcreate(H5P_DATASET_XFER), H5Pclose};
    if (parallel_) H5Pset_dxpl_mpio(dx.id, H5FD_MPIO_COLLECTIVE);
    TITAN_CHECK(H5Dwrite(d.id, mtype, msp.id, fsp.id, dx.id, any ? buf : nullptr) >= 0, "hdf5: writing '", name,
                "' to '", path_, "' failed (disk full?)");
  }
}

void File::write_1d(const std::string& name, const void* data, int64_t n, int64_t file_type, int64_t mem_type) {
  ensure_groups(name);
  hsize_t len = (hsize_t)n;
  Handle sp{H5Screate_simple(1, &len, nullptr), H5Sclose};
  Handle d{H5Dcreate2(id_, name.c_str(), (hid_t)file_type, sp.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
  TITAN_CHECK(d.id >= 0, "hdf5: cannot create dataset '", name, "' in '", path_, "'");
  TITAN_CHECK(H5Dwrite(d.id, (hid_t)mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, "hdf5: writing '", name,
              "' to '", path_, "' failed");
}

void File::write_u32(const std::string& name, const std::vector<uint32_t>& v) {
  write_1d(name, v.data(), (int64_t)v.size(), H5T_STD_U32LE, H5T_NATIVE_UINT32);
}

void File::write_i64(const std::string& name, const std::vector<int64_t>& v) {
  write_1d(name, v.data(), (int64_t)v.size(), H5T_STD_I64LE, H5T_NATIVE_INT64);
}

std::vector<int64_t> File::read_i64(const std::string& name) const {
  Shape s = shape(name);
  TITAN_CHECK(s.size() == 1, "hdf5: '", name, "' in '", path_, "' must be 1-D, has shape ", shape_str(s));
  TITAN_CHECK(holds_integers(name), "hdf5: '", name, "' in '", path_, "' does not hold integers");
  check_memory_budget(8.0 * (double)s[0], "hdf5: reading '" + name + "' from '" + path_ + "' (" +
                                              std::to_string(s[0]) + " int64 values)");
  std::vector<int64_t> v((size_t)s[0]);
  Handle d{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  TITAN_CHECK(v.empty() || H5Dread(d.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0,
              "hdf5: reading '", name, "' from '", path_, "' failed (file truncated?)");
  return v;
}

void File::read_into(const std::string& name, const Tensor& dst) const {
  Shape s = shape(name);
  TITAN_CHECK(s == dst.shape(), "hdf5: dataset '", name, "' in '", path_, "' has shape ", shape_str(s),
              ", expected ", shape_str(dst.shape()));
  read_region(name, Shape(dst.dim(), 0), dst);
}

void File::read_region(const std::string& name, const Shape& offset, const Tensor& dst) const {
  Shape s = shape(name);
  TITAN_CHECK(s.size() == dst.shape().size() && offset.size() == s.size(), "hdf5: dataset '", name, "' in '", path_,
              "' has shape ", shape_str(s), ", cannot read a block of rank ", dst.dim());
  for (size_t i = 0; i < s.size(); ++i)
    TITAN_CHECK(offset[i] >= 0 && offset[i] + dst.shape()[i] <= s[i], "hdf5: block ", shape_str(dst.shape()), " at ",
                shape_str(offset), " is outside dataset '", name, "' ", shape_str(s), " in '", path_, "'");
  TITAN_CHECK(dst.is_contiguous() && !dst.is_meta(), "hdf5: read target for '", name, "' must be a contiguous cpu tensor");
  if (dst.numel() == 0) return;
  Handle d{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  Handle fsp{H5Dget_space(d.id), H5Sclose};
  std::vector<hsize_t> off(offset.begin(), offset.end()), cnt(dst.shape().begin(), dst.shape().end());
  H5Sselect_hyperslab(fsp.id, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr);
  Handle msp{H5Screate_simple((int)cnt.size(), cnt.data(), nullptr), H5Sclose};
  herr_t rc;
  if (dst.dtype() == DType::I64) rc = H5Dread(d.id, H5T_NATIVE_INT64, msp.id, fsp.id, H5P_DEFAULT, dst.data<int64_t>());
  else if (dst.dtype() == DType::F64) rc = H5Dread(d.id, H5T_NATIVE_DOUBLE, msp.id, fsp.id, H5P_DEFAULT, dst.data<double>());
  else rc = H5Dread(d.id, H5T_NATIVE_FLOAT, msp.id, fsp.id, H5P_DEFAULT, dst.data<float>());
  TITAN_CHECK(rc >= 0, "hdf5: reading dataset '", name, "' from '", path_, "' failed (file truncated?)");
}

Tensor File::read_f32(const std::string& name) const {
  Tensor t = empty(shape(name), DType::F32, Device::CPU);
  read_into(name, t);
  return t;
}

void File::read_u32(const std::string& name, int64_t offset, int64_t count, uint32_t* out) const {
  Shape s = shape(name);
  TITAN_CHECK(s.size() == 1, "hdf5: '", name, "' in '", path_, "' must be 1-D, has shape ", shape_str(s));
  TITAN_CHECK(offset >= 0 && offset + count <= s[0], "hdf5: reading ", count, " tokens at ", offset, " from '", name,
              "' in '", path_, "' (", s[0], " tokens)");
  Handle d{H5Dopen2(id_, name.c_str(), H5P_DEFAULT), H5Dclose};
  Handle fs{H5Dget_space(d.id), H5Sclose};
  hsize_t off = offset, cnt = count;
  H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, &off, nullptr, &cnt, nullptr);
  Handle ms{H5Screate_simple(1, &cnt, nullptr), H5Sclose};
  TITAN_CHECK(H5Dread(d.id, H5T_NATIVE_UINT32, ms.id, fs.id, H5P_DEFAULT, out) >= 0, "hdf5: reading '", name,
              "' from '", path_, "' failed (file truncated?)");
}

namespace {
void write_attr(hid_t file, const std::string& path, const std::string& name, hid_t type, const void* buf) {
  if (H5Aexists(file, name.c_str()) > 0) H5Adelete(file, name.c_str());
  Handle sp{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate2(file, name.c_str(), type, sp.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  TITAN_CHECK(a.id >= 0 && H5Awrite(a.id, type, buf) >= 0, "hdf5: cannot write attribute '", name, "' to '", path,
              "'");
}
}  // namespace

void File::set_attr(const std::string& name, const std::string& value) {
  Handle t{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(t.id, H5T_VARIABLE);
  H5Tset_cset(t.id, H5T_CSET_UTF8);
  const char* p = value.c_str();
  write_attr(id_, path_, name, t.id, &p);
}
void File::set_attr(const std::string& name, int64_t value) { write_attr(id_, path_, name, H5T_NATIVE_INT64, &value); }
void File::set_attr(const std::string& name, double value) { write_attr(id_, path_, name, H5T_NATIVE_DOUBLE, &value); }
bool File::has_attr(const std::string& name) const { return H5Aexists(id_, name.c_str()) > 0; }

std::string File::attr_string(const std::string& name) const {
  TITAN_CHECK(has_attr(name), "hdf5: '", path_, "' has no attribute '", name, "'");
  Handle a{H5Aopen(id_, name.c_str(), H5P_DEFAULT), H5Aclose};
  Handle ft{H5Aget_type(a.id), H5Tclose};
  TITAN_CHECK(H5Tget_class(ft.id) == H5T_STRING, "hdf5: attribute '", name, "' in '", path_, "' is not a string");
  {
    Handle sp{H5Aget_space(a.id), H5Sclose};
    const hssize_t n = H5Sget_simple_extent_npoints(sp.id);
    TITAN_CHECK(n == 1, "hdf5: attribute '", name, "' in '", path_, "' holds ", n, " strings; titan expects one");
  }
  if (H5Tis_variable_str(ft.id) > 0) {
    Handle mt{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mt.id, H5T_VARIABLE);
    H5Tset_cset(mt.id, H5Tget_cset(ft.id));
    char* p = nullptr;
    TITAN_CHECK(H5Aread(a.id, mt.id, &p) >= 0, "hdf5: cannot read attribute '", name, "' of '", path_, "'");
    std::string s = p ? p : "";
    Handle sp{H5Aget_space(a.id), H5Sclose};
    H5Dvlen_reclaim(mt.id, sp.id, H5P_DEFAULT, &p);
    return s;
  }
  size_t n = H5Tget_size(ft.id);
  std::string s(n, '\0');
  TITAN_CHECK(H5Aread(a.id, ft.id, s.data()) >= 0, "hdf5: cannot read attribute '", name, "' of '", path_, "'");
  s.resize(strnlen(s.c_str(), n));
  return s;
}

namespace {
// One number of the class asked for (an integer attribute for attr_int; any number for attr_double): a file
// holding a list, a string or a float there is refused before anything is read into the one value.
template <typename T>
T read_scalar_attr(int64_t file, const std::string& path, const std::string& name, hid_t type) {
  Handle a{H5Aopen(file, name.c_str(), H5P_DEFAULT), H5Aclose};
  TITAN_CHECK(a.id >= 0, "hdf5: cannot open attribute '", name, "' of '", path, "'");
  Handle sp{H5Aget_space(a.id), H5Sclose};
  const hssize_t n = H5Sget_simple_extent_npoints(sp.id);
  Handle ft{H5Aget_type(a.id), H5Tclose};
  const H5T_class_t cls = H5Tget_class(ft.id);
  const bool integer = H5Tget_class(type) == H5T_INTEGER;
  TITAN_CHECK(n == 1 && (cls == H5T_INTEGER || (!integer && cls == H5T_FLOAT)), "hdf5: attribute '", name, "' of '",
              path, "' holds ", n, " value(s) of HDF5 class ", (int)cls, "; titan expects one ",
              integer ? "integer" : "number");
  T v{};
  TITAN_CHECK(H5Aread(a.id, type, &v) >= 0, "hdf5: cannot read attribute '", name, "' of '", path,
              "' (out of range for ", integer ? "int64" : "double", "?)");
  return v;
}
}  // namespace

int64_t File::attr_int(const std::string& name) const {
  TITAN_CHECK(has_attr(name), "hdf5: '", path_, "' has no attribute '", name, "'");
  return read_scalar_attr<int64_t>(id_, path_, name, H5T_NATIVE_INT64);
}

double File::attr_double(const std::string& name) const {
  TITAN_CHECK(has_attr(name), "hdf5: '", path_, "' has no attribute '", name, "'");
  return read_scalar_attr<double>(id_, path_, name, H5T_NATIVE_DOUBLE);
}

}  // namespace titan::h5
