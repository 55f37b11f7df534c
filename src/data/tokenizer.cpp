#include "src/data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/tensor/error.h"

namespace titan {

std::vector<uint32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<uint32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = (uint8_t)text[i];
  return out;
}

std::string ByteTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string s;
  for (auto id : ids) s.push_back(id < 256 ? (char)id : '?');
  return s;
}

namespace {
// Unicode normalization of UTF-8 text (ICU); invalid UTF-8 is an error.
std::string normalize(const std::string& text, const std::string& form) {
  if (form.empty() || text.empty()) return text;
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = form == "NFKC" ? unorm2_getNFKCInstance(&err) : unorm2_getNFCInstance(&err);
  std::vector<UChar> in(text.size() + 1), out;
  int32_t len = 0;
  u_strFromUTF8(in.data(), (int32_t)in.size(), &len, text.data(), (int32_t)text.size(), &err);
  TITAN_CHECK(U_SUCCESS(err), "tokenizer: input is not valid UTF-8 (", u_errorName(err), ")");
  out.resize((size_t)len * 3 + 16);
  const int32_t olen = unorm2_normalize(n, in.data(), len, out.data(), (int32_t)out.size(), &err);
  TITAN_CHECK(U_SUCCESS(err), "tokenizer: ", form, " normalization failed (", u_errorName(err), ")");
  std::string res((size_t)olen * 4 + 4, '\0');
  int32_t blen = 0;
  u_strToUTF8(res.data(), (int32_t)res.size(), &blen, out.data(), olen, &err);
  TITAN_CHECK(U_SUCCESS(err), "tokenizer: UTF-8 conversion failed (", u_errorName(err), ")");
  res.resize(blen);
  return res;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s.push_back((char)cp);
  else if (cp < 0x800) {
    s.push_back((char)(0xC0 | (cp >> 6)));
    s.push_back((char)(0x80 | (cp & 0x3F)));
  } else {
    s.push_back((char)(0xE0 | (cp >> 12)));
    s.push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back((char)(0x80 | (cp & 0x3F)));
  }
  return s;
}
// splits a UTF-8 string into code-point strings
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}
}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

BpeTokenizer::BpeTokenizer(const std::string& path) : path_(path), regex_(std::make_unique<Regex>()) {
  std::ifstream in(path);
  TITAN_CHECK(in.good(), "tokenizer: cannot open '", path, "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    fail("tokenizer: '", path, "' is not valid JSON: ", e.what());
  }
  TITAN_CHECK(j.contains("model") && j["model"].value("type", "") == "BPE", "tokenizer: '", path,
              "' is not a BPE tokenizer.json (model.type must be \"BPE\")");
  // GPT-2 byte <-> unicode alphabet
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_to_unicode_[b] = utf8(printable ? b : 256 + n++);
    unicode_to_byte_[byte_to_unicode_[b]] = (uint8_t)b;
  }
  uint32_t max_id = 0;
  for (auto& [tok, id] : j["model"]["vocab"].items()) {
    vocab_[tok] = id.get<uint32_t>();
    max_id = std::max(max_id, id.get<uint32_t>());
  }
  int rank = 0;
  for (auto& m : j["model"]["merges"]) {
    std::string key = m.is_array() ? m[0].get<std::string>() + " " + m[1].get<std::string>() : m.get<std::string>();
    merge_rank_[key] = rank++;
  }
  if (j.contains("added_tokens"))
    for (auto& t : j["added_tokens"]) {
      added_.emplace_back(t["content"].get<std::string>(), t["id"].get<uint32_t>());
      max_id = std::max(max_id, t["id"].get<uint32_t>());
    }
  std::sort(added_.begin(), added_.end(), [](auto& a, auto& b) { return a.first.size() > b.first.size(); });
  vocab_size_ = (int64_t)max_id + 1;
  id_to_token_.resize(vocab_size_);
  for (auto& [t, id] : vocab_) id_to_token_[id] = t;
  for (auto& [t, id] : added_) id_to_token_[id] = t;
  // the pre-tokenizer's Split pattern (ByteLevel alone uses GPT-2's pattern)
  std::string pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  std::function<void(const nlohmann::json&)> find_split = [&](const nlohmann::json& p) {
    if (p.is_null()) return;
    if (p.value("type", "") == "Split" && p.contains("pattern") && p["pattern"].contains("Regex"))
      pattern = p["pattern"]["Regex"].get<std::string>();
    if (p.contains("pretokenizers"))
      for (auto& q : p["pretokenizers"]) find_split(q);
  };
  if (j.contains("pre_tokenizer")) find_split(j["pre_tokenizer"]);
  std::function<void(const nlohmann::json&)> find_norm = [&](const nlohmann::json& n) {
    if (n.is_null()) return;
    const std::string t = n.value("type", "");
    if (t == "NFC" || t == "NFKC") normalizer_ = t;
    else if (t == "Sequence") {
      for (auto& m : n["normalizers"]) find_norm(m);
    } else if (!t.empty()) {
      fail("tokenizer: normalizer '", t, "' in '", path, "' is not supported (NFC, NFKC)");
    }
  };
  if (j.contains("normalizer")) find_norm(j["normalizer"]);
  int err = 0;
  PCRE2_SIZE off = 0;
  regex_->code = pcre2_compile((PCRE2_SPTR)pattern.c_str(), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  TITAN_CHECK(regex_->code != nullptr, "tokenizer: cannot compile the pre-tokenizer regex of '", path,
              "' at offset ", off);
}

BpeTokenizer::~BpeTokenizer() = default;

void BpeTokenizer::bpe(const std::string& word, std::vector<uint32_t>& out) const {
  std::string mapped;
  for (unsigned char c : word) mapped += byte_to_unicode_[c];
  auto it = vocab_.find(mapped);
  if (it != vocab_.end()) {
    out.push_back(it->second);
    return;
  }
  std::vector<std::string> parts = utf8_chars(mapped);
  while (parts.size() > 1) {
    int best = INT_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto r = merge_rank_.find(parts[i] + " " + parts[i + 1]);
      if (r != merge_rank_.end() && r->second < best) {
        best = r->second;
        at = i;
      }
    }
    if (best == INT_MAX) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + at + 1);
  }
  for (auto& p : parts) {
    auto v = vocab_.find(p);
    TITAN_CHECK(v != vocab_.end(), "tokenizer: piece '", p, "' of word '", word, "' is not in the vocabulary of '",
                path_, "'");
    out.push_back(v->second);
  }
}

std::vector<uint32_t> BpeTokenizer::encode(const std::string& raw) const {
  const std::string text = normalize(raw, normalizer_);
  std::vector<uint32_t> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  auto encode_plain = [&](const std::string& s) {
    PCRE2_SIZE start = 0;
    while (start < s.size()) {
      int rc = pcre2_match(regex_->code, (PCRE2_SPTR)s.c_str(), s.size(), start, 0, md, nullptr);
      if (rc < 0) {  // no further match: the rest as one piece
        bpe(s.substr(start), out);
        break;
      }
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[0] > start) bpe(s.substr(start, ov[0] - start), out);
      if (ov[1] == ov[0]) {  // empty match: advance one byte
        start = ov[1] + 1;
        continue;
      }
      bpe(s.substr(ov[0], ov[1] - ov[0]), out);
      start = ov[1];
    }
  };
  size_t pos = 0, plain = 0;
  while (pos < text.size()) {
    bool hit = false;
    for (auto& [tok, id] : added_)
      if (!tok.empty() && text.compare(pos, tok.size(), tok) == 0) {
        if (pos > plain) encode_plain(text.substr(plain, pos - plain));
        out.push_back(id);
        pos += tok.size();
        plain = pos;
        hit = true;
        break;
      }
    if (!hit) ++pos;
  }
  if (plain < text.size()) encode_plain(text.substr(plain));
  pcre2_match_data_free(md);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string s;
  for (auto id : ids) {
    TITAN_CHECK(id < id_to_token_.size(), "tokenizer: id ", id, " outside the vocabulary (", id_to_token_.size(), ")");
    const std::string& t = id_to_token_[id];
    bool special = std::any_of(added_.begin(), added_.end(), [&](auto& a) { return a.second == id; });
    if (special) {
      s += t;
      continue;
    }
    for (auto& ch : utf8_chars(t)) {
      auto b = unicode_to_byte_.find(ch);
      s += b != unicode_to_byte_.end() ? std::string(1, (char)b->second) : ch;
    }
  }
  return s;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path) {
  if (path.empty()) return std::make_unique<ByteTokenizer>();
  return std::make_unique<BpeTokenizer>(path);
}

}  // namespace titan
