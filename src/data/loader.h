// src/data/loader.h — deterministic, rank-sharded, checkpointable batches.
//
// Token files are HDF5 with a 1-D uint32 dataset `/tokens`. A step consumes
// dp_size * B * S tokens from position p: rank r reads the B*S+1 tokens at
// p + r*B*S (llm.c layout: inputs = first B*S as [B, S], targets = the same
// shifted by one). p advances by dp_size*B*S and wraps to 0 (next epoch)
// when the next step would run past the end. State = (position, epoch).
// Files from titan-tokenize also hold /doc_starts (the first token of each
// document; documents are separated by the tokenizer's end-of-text id,
// attribute separator_id, -1 for none); the loader checks them and hands out
// the document starts inside a window of tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "src/checkpoint/h5.h"
#include "src/tensor/tensor.h"

typedef struct ompi_communicator_t* MPI_Comm;

namespace titan {

struct Batch {
  Tensor inputs;   // int64 [B, S]
  Tensor targets;  // int64 [B, S]
  Tensor doc_ids;  // int64 [B, S]: document index of each input token within its row (0 at the row start,
                   // +1 at every /doc_starts entry inside it); all 0 for a file without /doc_starts
};

class DataLoader {
 public:
  DataLoader(const std::string& path, int64_t batch, int64_t seq, int64_t dp_rank = 0, int64_t dp_size = 1);
  Batch next();
  int64_t num_tokens() const { return n_; }
  // The vocabulary size recorded by titan-tokenize (-1 when absent) and the tokenizer's name.
  int64_t vocab_size() const { return vocab_; }
  const std::string& tokenizer() const { return tokenizer_; }
  // The tokenizer.json's SHA-256 titan-tokenize recorded ("" in older files or byte-level ones written before).
  const std::string& tokenizer_sha256() const { return tokenizer_sha256_; }
  const std::string& path() const { return path_; }
  int64_t position() const { return pos_; }
  int64_t epoch() const { return epoch_; }
  void set_state(int64_t position, int64_t epoch);
  void reset() { set_state(0, 0); }
  // Batches left before the end of the file in this epoch (for a full pass).
  int64_t steps_left() const;
  // Documents in the file (1 when it has no /doc_starts) and the starts in [begin, end), as offsets from begin.
  int64_t num_documents() const { return doc_starts_.empty() ? 1 : (int64_t)doc_starts_.size(); }
  std::vector<int64_t> document_starts(int64_t begin, int64_t end) const;
  int64_t separator_id() const { return separator_; }
  // Every token id < vocab, checked before training starts (streamed, with progress on big files; the ranks
  // of comm split the file and agree); the error names the file, the offset and the id.
  void check_ids(int64_t vocab, MPI_Comm comm = nullptr) const;

 private:
  std::unique_ptr<h5::File> file_;
  std::string path_, tokenizer_, tokenizer_sha256_;
  int64_t vocab_ = -1, separator_ = -1;
  std::vector<int64_t> doc_starts_;
  int64_t B_, S_, rank_, world_, n_ = 0, pos_ = 0, epoch_ = 0;
};

// Writes `tokens` to an HDF5 token file (/tokens, uint32; /doc_starts, int64) plus attributes.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, const std::string& tokenizer,
                      int64_t vocab_size, const std::vector<int64_t>& doc_starts = {0}, int64_t separator_id = -1,
                      const std::string& tokenizer_sha256 = "");

}  // namespace titan
