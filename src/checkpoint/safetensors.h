// src/checkpoint/safetensors.h — Hugging Face safetensors, in and out.
//
// The format: 8 bytes little-endian header length N, N bytes of JSON
// ({"__metadata__": {...}, name: {"dtype": "F32"|"BF16"|"F16", "shape": [...],
// "data_offsets": [begin, end]}, ...}; padded with spaces so the data starts
// 8-byte aligned), then the raw little-endian row-major tensor bytes. Above
// a size limit the tensors are spread over `model-0000i-of-0000n.safetensors`
// with `model.safetensors.index.json` ({"metadata": {"total_size": ...},
// "weight_map": {name: file}}), as transformers' save_pretrained writes them.
//
// Every rank computes the same layout from the regions' full shapes; rank 0
// writes the headers, then each rank writes the bytes of its own block
// (pwrite, contiguous runs), so no rank gathers the model — the file lands as
// the HDF5 export does, under any parallel layout. Reading takes each rank's
// block the same way and converts BF16/F16/F32 to float32.
#pragma once
#include <string>
#include <vector>

#include "src/checkpoint/checkpoint.h"

namespace titan {

// Element types a safetensors export can hold.
enum class SafetensorsDType { F32, BF16, F16 };
SafetensorsDType safetensors_dtype(const std::string& export_dtype);  // float32 | bfloat16 | float16

// Writes the regions into `folder` (model.safetensors, or shards + index when
// the bytes exceed max_shard_bytes); returns the file names written.
std::vector<std::string> save_safetensors(const std::string& folder, const std::vector<Region>& params,
                                          SafetensorsDType dtype, int64_t max_shard_bytes, MPI_Comm comm = nullptr);

// `path`: a .safetensors file, a model.safetensors.index.json, or a folder
// holding either. Strict as load_hf: every parameter present with its shape,
// no tensor the model lacks; errors name the file and the tensor.
void load_safetensors(const std::string& path, const std::vector<Region>& params, MPI_Comm comm = nullptr);

// True when `path` names safetensors (a file, an index, or a folder holding one).
bool is_safetensors(const std::string& path);

}  // namespace titan
