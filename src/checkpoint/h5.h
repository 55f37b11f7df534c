// src/checkpoint/h5.h — a small RAII layer over the HDF5 C API.
//
// Every failure names the file and the dataset/attribute and what was
// expected; HDF5's own error stack printing is silenced (we throw instead).
// Float tensors are stored as float32 or as a true 16-bit bfloat16 HDF5
// float type (sign 15, exponent 7..14, mantissa 0..6, bias 127), which HDF5
// converts to float32 on read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/tensor/tensor.h"

typedef struct ompi_communicator_t* MPI_Comm;

namespace titan::h5 {

// Open MPI's MPI-IO (ompio) opens every file with its shared-file-pointer component, whose shared-memory flavour
// takes and releases a named POSIX semaphore keyed by the file's base name (OMPIO_<base name>, in /dev/shm) inside
// MPI_File_open and unlinks it once every rank has opened the file. A process killed in between leaves it taken
// under that name, and every later parallel open of a file of that base name on the machine waits on it forever.
// While any open uses it some process holds it (mapped or open), so one that exists and that no process holds is
// such a leftover: removed, with a line on stderr. Returns whether it removed one. A semaphore of another user is
// left alone (they alone can hold it; it cannot be removed by us). File's parallel opens call it on every rank, then
// wait for all of comm's ranks before the open.
bool clear_stale_mpiio_semaphore(const std::string& path);

class File {
 public:
  enum Mode { Read, Create /* truncates */ };
  // comm != nullptr: parallel HDF5 over MPI-IO; every rank of comm opens the
  // file and calls every create/attribute function in the same order.
  File(const std::string& path, Mode mode, MPI_Comm comm = nullptr);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  const std::string& path() const { return path_; }
  void close();  // flush and close, throwing on failure (the destructor cannot report one)
  int64_t id() const { return id_; }

  bool has(const std::string& name) const;  // dataset or group, "a/b/c"
  std::vector<std::string> datasets(const std::string& group = "/") const;  // full names, sorted
  Shape shape(const std::string& name) const;
  bool holds_integers(const std::string& name) const;  // an integer element type (token ids, offsets)

  // Writes a tensor (float32 tensors as float32 or bfloat16; int64; uint32 from int64/int32 data).
  void write(const std::string& name, const Tensor& t, DType stored = DType::F32);
  // Creates `name` with the logical `full_shape` and writes `local` at
  // `offset` (nothing when !writer: another rank holds that block). In a
  // parallel file every rank calls this for every tensor (collective).
  void write_region(const std::string& name, const Shape& full_shape, const Shape& offset, const Tensor& local,
                    bool writer, DType stored = DType::F32);
  // One tensor written from several blocks of this rank (an HF tensor fusing two parameters, each cut by a
  // plan): every block at its offset; the same collective rules.
  struct Box {
    Shape offset;
    const Tensor* local;
    bool writer;
  };
  void write_boxes(const std::string& name, const Shape& full_shape, const std::vector<Box>& boxes,
                   DType stored = DType::F32);
  // Reads the block of `name` at `offset` with dst's shape into dst.
  void read_region(const std::string& name, const Shape& offset, const Tensor& dst) const;
  void write_u32(const std::string& name, const std::vector<uint32_t>& v);
  void write_i64(const std::string& name, const std::vector<int64_t>& v);  // 1-D int64
  std::vector<int64_t> read_i64(const std::string& name) const;            // a whole 1-D dataset
  // Reads a whole dataset as float32 (any stored float type) into `dst`'s
  // shape; the stored shape must equal `dst`'s.
  void read_into(const std::string& name, const Tensor& dst) const;
  Tensor read_f32(const std::string& name) const;
  // Reads count uint32 values from offset of a 1-D dataset.
  void read_u32(const std::string& name, int64_t offset, int64_t count, uint32_t* out) const;

  void set_attr(const std::string& name, const std::string& value);  // root attributes
  void set_attr(const std::string& name, int64_t value);
  void set_attr(const std::string& name, double value);
  bool has_attr(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;

 private:
  void ensure_groups(const std::string& name);
  // A 1-D dataset of n elements: `file_type` on disk, `mem_type` in memory (HDF5 type ids).
  void write_1d(const std::string& name, const void* data, int64_t n, int64_t file_type, int64_t mem_type);
  std::string path_;
  int64_t id_ = -1;
  bool parallel_ = false;
};

}  // namespace titan::h5
