// src/data/tokenizer.h — text -> token ids.
//
// ByteTokenizer: one token per byte (vocab 256), the default.
// BpeTokenizer: Hugging Face `tokenizer.json` byte-level BPE (GPT-2 / Qwen
// family): the normalizer (NFC / NFKC, as Qwen's) is applied with ICU, the
// pre-tokenizer's Split regex is run with PCRE2 (Unicode properties,
// lookahead: the pattern from the file is used as written),
// bytes are mapped to GPT-2's printable unicode alphabet, then merges are
// applied by rank; added (special) tokens are matched first.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace titan {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<uint32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<uint32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string name() const = 0;
};

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<uint32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "byte"; }
};

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(const std::string& tokenizer_json_path);
  ~BpeTokenizer() override;
  std::vector<uint32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string name() const override { return "bpe:" + path_; }

 private:
  void bpe(const std::string& word, std::vector<uint32_t>& out) const;
  std::string path_;
  std::unordered_map<std::string, uint32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int> merge_rank_;  // "a b" -> rank
  std::vector<std::pair<std::string, uint32_t>> added_;  // special tokens, longest first
  std::string byte_to_unicode_[256];
  std::unordered_map<std::string, uint8_t> unicode_to_byte_;
  struct Regex;
  std::unique_ptr<Regex> regex_;
  int64_t vocab_size_ = 0;
  std::string normalizer_;  // "", "NFC" or "NFKC"
};

// "" -> ByteTokenizer, else BpeTokenizer(path).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path);

}  // namespace titan
