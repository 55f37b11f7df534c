// models/decoder/rope.h — RoPE cos/sin tables as Hugging Face computes them
// (float32 inverse frequencies, float32 angles): the default frequencies,
// YaRN (gpt-oss), Llama-3.1's scaling and linear scaling (Gemma 3).
#pragma once
#include <utility>
#include <vector>

#include "models/decoder/args.h"
#include "src/tensor/tensor.h"

namespace titan::decoder {

// [S, head_dim/2] each, already multiplied by the scaling's attention factor
// (YaRN: 0.1 ln(factor) + 1, or DeepSeek's ratio of two such; otherwise 1).
std::pair<Tensor, Tensor> rope_tables(int64_t seq_len, int64_t head_dim, double theta, const RopeScaling& scaling,
                                      Device d);
// The rows of the given positions (a context-parallel rank's chunks), [positions.size(), head_dim/2] each.
std::pair<Tensor, Tensor> rope_tables(const std::vector<int64_t>& positions, int64_t head_dim, double theta,
                                      const RopeScaling& scaling, Device d);

}  // namespace titan::decoder
