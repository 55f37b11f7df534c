// src/checkpoint/checkpoint.h — training-state checkpoints and HF-named exports (HDF5).
//
// Every tensor is stored once with its full logical shape; each rank writes
// (and reads) only its own block (`Region`), through parallel HDF5 when a
// communicator is given, so no rank ever holds the whole model and a file
// saved under one layout loads under any other.
// Training state (`step-N.h5`): /model/<name>, /optim/exp_avg/<name>,
// /optim/exp_avg_sq/<name>, root attributes step, optim_step, data_position,
// data_epoch, rng, config, checksums. Written to a temp file then renamed
// (atomic); the last keep_latest_k are kept.
// Export: one dataset per tensor at the root named exactly as the Hugging
// Face state-dict key, HF shapes, float32 or bfloat16, and a root string
// attribute `config` with the HF config.json content.
#pragma once
#include "src/config/enum_names.h"
#include <string>
#include <vector>

#include "src/optim/adamw.h"
#include "src/tensor/tensor.h"

typedef struct ompi_communicator_t* MPI_Comm;

namespace titan {

using NamedParams = std::vector<std::pair<std::string, Tensor*>>;

// A rank's block of a logical tensor.
struct Region {
  std::string name;
  Tensor* local = nullptr;
  Shape full_shape;
  Shape offset;
  bool writer = true;  // exactly one rank writes each element
  bool optional = false;  // a file without it loads (the tensor keeps its value; the loader says so): state
                          // added to checkpoints after files were written without it
};
// The single-rank case: every tensor whole.
std::vector<Region> whole(const NamedParams& params);

struct TrainState {
  int64_t step = 0;
  int64_t data_position = 0, data_epoch = 0;
  std::string rng;
  std::string config;
};

// Optimizer moments are stored under the region of the parameter of the same name.
void save_checkpoint(const std::string& path, const std::vector<Region>& params, AdamW* opt, const TrainState& st,
                     MPI_Comm comm = nullptr);
// Loads into existing tensors; every name and logical shape must match (errors name the tensor).
TrainState load_checkpoint(const std::string& path, const std::vector<Region>& params, AdamW* opt,
                           MPI_Comm comm = nullptr);
// Checks a checkpoint before it is trusted: every tensor present, finite and
// equal to the checksum stored when it was written (root attribute
// `checksums`: per dataset, the sum over elements of a mix of index and value
// bits, so any layout's blocks add up to it). The datasets are split over the
// ranks of comm, each reading its share with serial HDF5; all ranks return the
// same verdict: "" when good, else what failed, naming the tensor. A file
// from before checksums (*legacy = true) is checked for finiteness only.
std::string verify_checkpoint(const std::string& path, MPI_Comm comm = nullptr, bool* legacy = nullptr);
// Writing a file collectively (parallel HDF5's dataset creation, the checksums' reduction) needs every
// rank of comm to write the same datasets, with the same logical shapes, in the same order; otherwise the
// ranks would wait for each other forever. The writers compare that list first (a hash of it per rank,
// all-gathered): a difference throws on every rank, naming `path` and the ranks that differ from rank 0.
// `optimizer`: also which datasets carry optimizer moments.
void agree_on_datasets(const std::vector<Region>& regions, const std::vector<bool>& optimizer,
                       const std::string& path, MPI_Comm comm);
// What the ranks of comm agree on: "" when every rank's finding is "", else the lowest failing rank's.
std::string agree_on_failure(const std::string& mine, MPI_Comm comm);
// Throws naming `name` when p holds a non-finite value or (hex given, not "-") misses its checksum.
void check_values(const std::string& name, const float* p, const Shape& shape, const std::string& hex);
// step-N.h5 files in `folder`, sorted by N; and pruning to the latest k.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& folder);
void prune_checkpoints(const std::string& folder, int64_t keep_latest_k);

void export_hf(const std::string& path, const std::vector<Region>& params, const std::string& hf_config_json,
               DType stored = DType::F32, MPI_Comm comm = nullptr);
// A Hugging Face model folder: config.json (torch_dtype = what was written)
// and the weights as safetensors (src/checkpoint/safetensors.h), HDF5
// (model.h5, config as its root attribute) or both. Returns the files written.
enum class ExportFormat { safetensors, hdf5, both };
constexpr std::array<std::string_view, 3> enum_names(ExportFormat) { return {"safetensors", "hdf5", "both"}; }
enum class ExportDType { float32, bfloat16, float16 };  // float16: safetensors only
constexpr std::array<std::string_view, 3> enum_names(ExportDType) { return {"float32", "bfloat16", "float16"}; }

struct ExportOptions {
  ExportFormat format = ExportFormat::safetensors;
  ExportDType dtype = ExportDType::float32;
  int64_t max_shard_bytes = 5000LL * 1000 * 1000;  // safetensors shards (transformers' default 5 GB)
};
std::vector<std::string> export_hf_folder(const std::string& folder, const std::vector<Region>& params,
                                          const std::string& hf_config_json, const ExportOptions& opt,
                                          MPI_Comm comm = nullptr);
// The HF config with torch_dtype set.
std::string with_torch_dtype(const std::string& hf_config_json, const std::string& dtype);
// Loads HF-named weights (strict: missing, unexpected or mis-shaped tensors
// are errors naming the tensor). `path`: an HDF5 export, a .safetensors file,
// a model.safetensors.index.json, or a folder holding any of them.
void load_hf(const std::string& path, const std::vector<Region>& params, MPI_Comm comm = nullptr);
// The HF config.json text: the HDF5 root attribute, or config.json beside safetensors.
std::string read_hf_config(const std::string& path);

}  // namespace titan
