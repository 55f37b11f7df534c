#include "src/data/loader.h"

#include <mpi.h>

#include <algorithm>
#include <climits>

#include "src/log/log.h"

namespace titan {

DataLoader::DataLoader(const std::string& path, int64_t batch, int64_t seq, int64_t dp_rank, int64_t dp_size)
    : path_(path), B_(batch), S_(seq), rank_(dp_rank), world_(dp_size) {
  file_ = std::make_unique<h5::File>(path, h5::File::Read);
  TITAN_CHECK(file_->has("tokens"), "data: '", path, "' has no /tokens dataset (make one with titan-tokenize)");
  Shape s = file_->shape("tokens");
  TITAN_CHECK(s.size() == 1, "data: /tokens in '", path, "' must be 1-D, has shape ", shape_str(s));
  TITAN_CHECK(file_->holds_integers("tokens"), "data: /tokens in '", path,
              "' does not hold integers; token ids are unsigned integers (make the file with titan-tokenize)");
  n_ = s[0];
  TITAN_CHECK(B_ > 0 && S_ > 0 && world_ > 0 && rank_ >= 0 && rank_ < world_, "data: loader of '", path,
              "' with batch ", B_, ", seq ", S_, ", rank ", rank_, " of ", world_, ": each must be positive (rank in [0, ",
              world_, "))");
  if (file_->has_attr("vocab_size")) vocab_ = file_->attr_int("vocab_size");
  tokenizer_ = file_->has_attr("tokenizer") ? file_->attr_string("tokenizer") : "unknown";
  if (file_->has_attr("tokenizer_sha256")) tokenizer_sha256_ = file_->attr_string("tokenizer_sha256");
  if (file_->has_attr("separator_id")) separator_ = file_->attr_int("separator_id");
  if (file_->has("doc_starts")) {
    const Shape ds = file_->shape("doc_starts");  // at most one start per token: checked before it is read
    TITAN_CHECK(ds.size() == 1 && ds[0] <= n_, "data: /doc_starts in '", path, "' has shape ", shape_str(ds),
                "; a 1-D list of at most one start per token (", n_, ") is expected: file damaged?");
    doc_starts_ = file_->read_i64("doc_starts");
    for (size_t i = 0; i < doc_starts_.size(); ++i)
      TITAN_CHECK(doc_starts_[i] >= 0 && doc_starts_[i] < n_ && (i == 0 || doc_starts_[i] > doc_starts_[i - 1]),
                  "data: /doc_starts in '", path, "' is not increasing within the ", n_, " tokens (entry ", i, " = ",
                  doc_starts_[i], "): file damaged?");
  }
  TITAN_CHECK((double)n_ >= (double)world_ * (double)B_ * (double)S_ + 1, "data: '", path, "' holds ", n_,
              " tokens; one step needs ", (double)world_ * (double)B_ * (double)S_ + 1, " (", world_, " ranks x batch ",
              B_, " x seq ", S_, " + 1)");
}

void DataLoader::set_state(int64_t position, int64_t epoch) {
  TITAN_CHECK(epoch >= 0, "data: loader epoch ", epoch, " of '", path_, "' is negative: the checkpoint is damaged");
  TITAN_CHECK(position >= 0 && position < n_, "data: loader position ", position, " outside '", path_, "' (", n_,
              " tokens): checkpoint from another dataset?");
  pos_ = position;
  epoch_ = epoch;
}

std::vector<int64_t> DataLoader::document_starts(int64_t begin, int64_t end) const {
  std::vector<int64_t> out;
  auto it = std::lower_bound(doc_starts_.begin(), doc_starts_.end(), begin);
  for (; it != doc_starts_.end() && *it < end; ++it) out.push_back(*it - begin);
  return out;
}

void DataLoader::check_ids(int64_t vocab, MPI_Comm comm) const {
  int me = 0, world = 1;
  if (comm) {
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &world);
  }
  const int64_t per = (n_ + world - 1) / world, lo = std::min(n_, me * per), hi = std::min(n_, lo + per);
  constexpr int64_t kChunk = 1 << 22;
  std::vector<uint32_t> buf;
  int64_t bad = INT64_MAX;
  Progress progress("checking token ids of " + path_, std::max<int64_t>(hi - lo, 1), "tokens");
  for (int64_t at = lo; at < hi && bad == INT64_MAX; at += kChunk) {
    const int64_t n = std::min(kChunk, hi - at);
    buf.resize((size_t)n);
    file_->read_u32("tokens", at, n, buf.data());
    for (int64_t i = 0; i < n; ++i)
      if ((int64_t)buf[(size_t)i] >= vocab) {
        bad = at + i;
        break;
      }
    progress.update(at + n - lo);
  }
  progress.finish();
  if (comm) MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT64_T, MPI_MIN, comm);
  if (bad == INT64_MAX) return;
  uint32_t id = 0;
  file_->read_u32("tokens", bad, 1, &id);
  fail("data: token id ", id, " at offset ", bad, " of '", path_, "' is outside the model's vocabulary (",
       "model.vocab_size = ", vocab, "); the file was tokenized for another vocabulary (tokenizer ", tokenizer_, ")");
}

int64_t DataLoader::steps_left() const { return (n_ - 1 - pos_) / (world_ * B_ * S_); }

Batch DataLoader::next() {
  if (pos_ + world_ * B_ * S_ + 1 > n_) {
    pos_ = 0;
    ++epoch_;
  }
  const int64_t T = B_ * S_;
  std::vector<uint32_t> buf(T + 1);
  file_->read_u32("tokens", pos_ + rank_ * T, T + 1, buf.data());
  Batch b{empty({B_, S_}, DType::I64, Device::CPU), empty({B_, S_}, DType::I64, Device::CPU),
          zeros({B_, S_}, DType::I64, Device::CPU)};
  int64_t* pi = b.inputs.data<int64_t>();
  int64_t* pt = b.targets.data<int64_t>();
  for (int64_t i = 0; i < T; ++i) {
    pi[i] = buf[i];
    pt[i] = buf[i + 1];
  }
  int64_t* pd = b.doc_ids.data<int64_t>();
  for (int64_t r = 0; r < B_; ++r) {  // +1 at each document start inside the row, then a running sum
    const int64_t begin = pos_ + rank_ * T + r * S_;
    int64_t* row = pd + r * S_;
    for (int64_t s : document_starts(begin, begin + S_))
      if (s > 0) ++row[s];
    for (int64_t i = 1; i < S_; ++i) row[i] += row[i - 1];
  }
  pos_ += world_ * T;
  return b;
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, const std::string& tokenizer,
                      int64_t vocab_size, const std::vector<int64_t>& doc_starts, int64_t separator_id,
                      const std::string& tokenizer_sha256) {
  h5::File f(path, h5::File::Create);
  f.write_u32("tokens", tokens);
  f.write_i64("doc_starts", doc_starts);
  f.set_attr("separator_id", separator_id);
  f.set_attr("tokenizer", tokenizer);
  if (!tokenizer_sha256.empty()) f.set_attr("tokenizer_sha256", tokenizer_sha256);
  f.set_attr("vocab_size", vocab_size);
  f.close();  // checked: a full disk is an error naming the file
}

}  // namespace titan
