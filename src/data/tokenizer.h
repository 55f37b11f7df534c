// src/data/tokenizer.h — text -> token ids.
//
// ByteTokenizer: one token per byte (vocab 256), the default.
// BpeTokenizer: Hugging Face `tokenizer.json` byte-level BPE (GPT-2 / Qwen /
// Llama-3 family), encoding a document as HF's `tokenizers` does:
//   1. added (special) tokens are split off first (non-normalized ones on the
//      raw text, normalized ones after the normalizer);
//   2. the normalizer (NFC / NFKC, as Qwen's) is applied with ICU;
//   3. the pre-tokenizer's Split regex runs with PCRE2 (JIT; the pattern from
//      the file as written, Unicode properties and lookahead);
//   4. each piece is mapped to GPT-2's byte alphabet and merged by rank (the
//      lowest-ranked adjacent pair first, leftmost on ties), with a per-thread
//      cache of pieces already merged.
// A document is always encoded whole (never split at lines): HF merges runs of
// newlines ("\n\n" is one token). Long documents are pre-tokenized in
// parallel chunks whose piece boundaries are re-synchronized at the cuts, so
// the ids are those of the sequential run.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace titan {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // One document, whole (no special tokens added around it).
  virtual std::vector<uint32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<uint32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string name() const = 0;
  // The id of `token` when it is one token of the vocabulary (added tokens included), else -1.
  virtual int64_t token_id(const std::string& token) const = 0;
  // The end-of-text token that separates documents ("" when the vocabulary has none).
  virtual std::string end_of_text() const = 0;
  // Its tokenizer.json, as HF's `tokenizers` loads it (byte-level: one generated, ids = bytes; BPE: the file).
  virtual std::string tokenizer_json() const = 0;
  // SHA-256 of tokenizer_json() (hex): what token files record, and what an export checks the file against.
  std::string content_sha256() const;
};

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<uint32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "byte"; }
  int64_t token_id(const std::string& token) const override;
  std::string end_of_text() const override { return ""; }  // every id is a byte: no room for a separator
  std::string tokenizer_json() const override;
};

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(const std::string& tokenizer_json_path);
  ~BpeTokenizer() override;
  std::vector<uint32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string name() const override { return "bpe:" + path_; }
  int64_t token_id(const std::string& token) const override;
  std::string end_of_text() const override;
  std::string tokenizer_json() const override { return json_text_; }

  struct Workspace;  // per-thread regex match data and merge cache

 private:
  void parse(const nlohmann::json& j, const std::string& path);  // the constructor's reading of the file
  struct AddedToken {
    std::string content;
    uint32_t id;
    bool normalized;
  };
  struct Piece {  // [begin, end) of a pre-tokenized piece
    size_t begin, end;
  };
  // Splits `text` on added tokens (normalized or raw ones), appending plain runs through `plain`.
  template <class F>
  void split_added(const std::string& text, bool normalized, std::vector<uint32_t>& out, F&& plain) const;
  void encode_normalized_segment(const std::string& seg, std::vector<uint32_t>& out) const;
  void encode_plain(const std::string& s, std::vector<uint32_t>& out) const;
  // Pieces of s starting at `from`, stopping before the first piece that starts at or after `stop`.
  void pieces(const std::string& s, size_t from, size_t stop, Workspace& ws, std::vector<Piece>& out) const;
  void bpe(const char* word, size_t n, Workspace& ws, std::vector<uint32_t>& out) const;

  std::string path_;  // absolute
  std::string json_text_;  // the file as read
  uint64_t serial_;  // identifies this tokenizer's entries in the per-thread caches
  std::unordered_map<std::string, uint32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> is_added_;
  struct Merge {
    int rank;
    uint32_t id;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  uint32_t byte_id_[256];                       // the vocabulary id of each byte's GPT-2 character
  bool ignore_merges_ = false;                  // HF: a piece found whole in the vocabulary skips merging
  bool add_prefix_space_ = false;
  std::vector<AddedToken> added_;  // longest first
  bool added_first_byte_[256] = {};
  std::string byte_to_unicode_[256];
  std::unordered_map<std::string, uint8_t> unicode_to_byte_;
  struct Regex;
  std::unique_ptr<Regex> regex_;
  int64_t vocab_size_ = 0;
  std::string normalizer_;  // "", "NFC" or "NFKC"
};

// "" -> ByteTokenizer, else BpeTokenizer(path).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path);

// SHA-256 of `bytes`, hex (OpenSSL).
std::string sha256_hex(const std::string& bytes);

// The tokenizer a token file names (its `tokenizer` and `tokenizer_sha256` attributes): byte-level, or the BPE
// tokenizer.json at the path it records when the file there still has that content. Throws naming the token
// file, the path and what differs (moved, or edited since): titan::Error only.
std::unique_ptr<Tokenizer> tokenizer_of_token_file(const std::string& token_file, const std::string& name,
                                                   const std::string& sha256);

}  // namespace titan
