#include "src/data/tokenizer.h"

#include "src/config/untrusted_json.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <omp.h>
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <fstream>
#include <functional>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
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

std::string sha256_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  TITAN_CHECK(EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr) == 1, "sha256: OpenSSL failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += {hex[md[i] >> 4], hex[md[i] & 15]};
  return out;
}

std::string Tokenizer::content_sha256() const { return sha256_hex(tokenizer_json()); }

std::unique_ptr<Tokenizer> tokenizer_of_token_file(const std::string& token_file, const std::string& name,
                                                   const std::string& sha256) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  TITAN_CHECK(name.rfind("bpe:", 0) == 0, "tokenizer: ", token_file, " names tokenizer '", name,
              "', which titan cannot find (a file written before titan recorded tokenizers?)");
  const std::string path = name.substr(4);
  std::error_code ec;
  TITAN_CHECK(std::filesystem::is_regular_file(path, ec), "tokenizer: ", token_file, " was tokenized with ", path,
              ", which no longer exists", ec ? " (" + ec.message() + ")" : std::string());
  std::ifstream in(path, std::ios::binary);
  std::ostringstream all;
  all << in.rdbuf();
  TITAN_CHECK(in.good() || in.eof(), "tokenizer: cannot read ", path);
  const std::string now = sha256_hex(all.str());  // before parsing: an edited file is "changed", not "malformed"
  TITAN_CHECK(sha256.empty() || now == sha256, "tokenizer: ", token_file, " was tokenized with ", path, " (sha256 ",
              sha256.substr(0, 12), "...), which has changed since (sha256 ", now.substr(0, 12),
              "...): the tokenizer.json it was made with is needed");
  try {
    return std::make_unique<BpeTokenizer>(path);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a JSON of the wrong shape (nlohmann's type errors): one error type
    fail("tokenizer: ", path, " (recorded by ", token_file, ") is not a tokenizer.json titan reads: ", e.what());
  }
}

int64_t ByteTokenizer::token_id(const std::string& token) const {
  return token.size() == 1 ? (int64_t)(uint8_t)token[0] : -1;
}

namespace {
bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// Unicode normalization of UTF-8 text (ICU); invalid UTF-8 is an error. ASCII is its own NFC/NFKC form.
std::string normalize(const std::string& text, const std::string& form) {
  if (form.empty() || text.empty() || is_ascii(text)) return text;
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

// Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points past U+10FFFF
// included), or npos. Checked once per document so the regex can skip PCRE2's per-call check.
size_t invalid_utf8_at(const std::string& s) {
  const auto* p = (const unsigned char*)s.data();
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string::npos;
}

std::atomic<uint64_t> g_serial{0};
constexpr uint32_t kNoId = 0xFFFFFFFFu;
constexpr size_t kCacheMax = 1 << 20;         // merged pieces kept per thread before the cache is reset
constexpr size_t kParallelBytes = 256 << 10;  // plain runs at least this long are pre-tokenized in parallel chunks
}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

// Per thread: PCRE2 match data and the cache of merged pieces (raw bytes -> ids).
struct BpeTokenizer::Workspace {
  uint64_t serial = 0;
  pcre2_match_data* md = nullptr;
  std::unordered_map<std::string, std::vector<uint32_t>> cache;
  std::vector<uint32_t> sym;
  std::vector<int> rank;
  ~Workspace() {
    if (md) pcre2_match_data_free(md);
  }
};

namespace {
BpeTokenizer::Workspace& workspace(uint64_t serial, const pcre2_code* code) {
  thread_local BpeTokenizer::Workspace ws;
  if (ws.serial != serial) {  // another tokenizer used this thread last: start clean
    if (ws.md) pcre2_match_data_free(ws.md);
    ws.md = pcre2_match_data_create_from_pattern(code, nullptr);
    ws.cache.clear();
    ws.serial = serial;
  }
  return ws;
}
}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path)
    : path_(std::filesystem::absolute(path).lexically_normal().string()), serial_(++g_serial),
      regex_(std::make_unique<Regex>()) {
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "tokenizer: cannot open '", path, "'");
  {
    std::ostringstream all;
    all << in.rdbuf();
    json_text_ = all.str();
  }
  const nlohmann::json j = config::parse_untrusted_json(json_text_, "tokenizer: '" + path + "'");
  try {
    parse(j, path);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a JSON of the wrong shape (nlohmann's type errors): one error type
    fail("tokenizer: '", path, "' is not a tokenizer.json titan reads: ", e.what());
  }
}

void BpeTokenizer::parse(const nlohmann::json& j, const std::string& path) {
  TITAN_CHECK(j.is_object() && j.contains("model") && j["model"].is_object() &&
                  j["model"].value("type", "") == "BPE",
              "tokenizer: '", path, "' is not a BPE tokenizer.json (model.type must be \"BPE\")");
  const auto& model = j["model"];
  TITAN_CHECK(model.contains("vocab") && model["vocab"].is_object(), "tokenizer: '", path,
              "' has no model.vocab object");
  TITAN_CHECK(!model.contains("merges") || model["merges"].is_array(), "tokenizer: '", path,
              "': model.merges is not a list");
  // a token id: an integer below 2^24 (the largest vocabularies published hold ~262k); checked before the id
  // sizes the id -> token table
  auto id_of = [&](const nlohmann::json& v, const std::string& token) -> uint32_t {
    TITAN_CHECK(v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0) &&
                    v.get<uint64_t>() < (1u << 24),
                "tokenizer: '", path, "' gives token '", token.substr(0, 80), "' the id ", v.dump().substr(0, 40),
                ", not an integer in [0, 16777215]");
    return v.get<uint32_t>();
  };
  TITAN_CHECK(!model.value("byte_fallback", false), "tokenizer: '", path,
              "' uses byte_fallback (SentencePiece-style BPE); titan reads byte-level BPE tokenizers");
  ignore_merges_ = model.value("ignore_merges", false);
  // GPT-2 byte <-> unicode alphabet
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_to_unicode_[b] = utf8(printable ? b : 256 + n++);
    unicode_to_byte_[byte_to_unicode_[b]] = (uint8_t)b;
  }
  uint32_t max_id = 0;
  for (auto& [tok, id] : model["vocab"].items()) {
    vocab_[tok] = id_of(id, tok);
    max_id = std::max(max_id, vocab_[tok]);
  }
  for (int b = 0; b < 256; ++b) {  // a full byte-level vocabulary holds all 256; a missing one fails on use
    auto it = vocab_.find(byte_to_unicode_[b]);
    byte_id_[b] = it != vocab_.end() ? it->second : kNoId;
  }
  int rank = 0;
  static const nlohmann::json kNone = nlohmann::json::array();
  const nlohmann::json& merges = model.contains("merges") ? model["merges"] : kNone;  // a reference, not a copy
  for (auto& m : merges) {
    std::string a, b;
    if (m.is_array()) {
      TITAN_CHECK(m.size() == 2 && m[0].is_string() && m[1].is_string(), "tokenizer: merge ", m.dump().substr(0, 80),
                  " (rank ", rank, ") in '", path, "' is not [\"left\", \"right\"]");
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      TITAN_CHECK(m.is_string(), "tokenizer: merge ", m.dump().substr(0, 80), " (rank ", rank, ") in '", path,
                  "' is neither \"left right\" nor [\"left\", \"right\"]");
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      TITAN_CHECK(sp != std::string::npos, "tokenizer: merge '", s, "' in '", path, "' is not \"left right\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    TITAN_CHECK(ia != vocab_.end() && ib != vocab_.end() && iab != vocab_.end(), "tokenizer: merge '", a, " ", b,
                "' (rank ", rank, ") in '", path, "' names a token missing from the vocabulary");
    merges_.emplace(((uint64_t)ia->second << 32) | ib->second, Merge{rank, iab->second});  // first rank wins
    ++rank;
  }
  TITAN_CHECK(!j.contains("added_tokens") || j["added_tokens"].is_null() || j["added_tokens"].is_array(),
              "tokenizer: '", path, "': added_tokens is not a list");
  if (j.contains("added_tokens") && !j["added_tokens"].is_null())
    for (auto& t : j["added_tokens"]) {
      TITAN_CHECK(t.is_object() && t.contains("content") && t["content"].is_string() && t.contains("id"),
                  "tokenizer: '", path, "': added_tokens holds ", t.dump().substr(0, 80),
                  ", not {\"id\": ..., \"content\": \"...\"}");
      const std::string content = t["content"].get<std::string>();
      TITAN_CHECK(!t.value("lstrip", false) && !t.value("rstrip", false) && !t.value("single_word", false),
                  "tokenizer: added token '", content, "' in '", path,
                  "' uses lstrip/rstrip/single_word, which titan does not implement");
      added_.push_back({content, id_of(t["id"], content), t.value("normalized", false)});
      max_id = std::max(max_id, added_.back().id);
      if (!content.empty()) added_first_byte_[(uint8_t)content[0]] = true;
    }
  std::stable_sort(added_.begin(), added_.end(),
                   [](auto& a, auto& b) { return a.content.size() > b.content.size(); });
  // ids dense enough that the id -> token table is the vocabulary's size, not what one stray id asks for
  const int64_t entries = (int64_t)vocab_.size() + (int64_t)added_.size();
  TITAN_CHECK((int64_t)max_id < 2 * entries + 1024, "tokenizer: '", path, "' has ", entries,
              " tokens but an id of ", max_id, ": ids leave most of [0, ", max_id, "] unused (damaged file?)");
  vocab_size_ = (int64_t)max_id + 1;
  id_to_token_.resize(vocab_size_);
  is_added_.assign(vocab_size_, false);
  for (auto& [t, id] : vocab_) id_to_token_[id] = t;
  for (auto& a : added_) {
    id_to_token_[a.id] = a.content;
    is_added_[a.id] = true;
  }
  // the pre-tokenizer: Split's pattern, or ByteLevel's own GPT-2 pattern when it splits (use_regex)
  const std::string gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  std::string pattern;
  int splits = 0;
  // Sequences nest (the parse bounds the depth: parse_untrusted_json)
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& p) {
    if (p.is_null()) return;
    TITAN_CHECK(p.is_object(), "tokenizer: '", path, "': a pre_tokenizer is not an object: ", p.dump().substr(0, 80));
    const std::string t = p.value("type", "");
    if (t == "Sequence") {
      TITAN_CHECK(p.contains("pretokenizers") && p["pretokenizers"].is_array(), "tokenizer: '", path,
                  "': a Sequence pre_tokenizer has no pretokenizers list");
      for (auto& q : p["pretokenizers"]) walk(q);
    } else if (t == "Split") {
      TITAN_CHECK(p.contains("pattern") && p["pattern"].contains("Regex") && p.value("behavior", "") == "Isolated" &&
                      !p.value("invert", false),
                  "tokenizer: '", path, "': only Split pre-tokenizers with a Regex pattern, behavior Isolated and "
                  "invert false are supported");
      pattern = p["pattern"]["Regex"].get<std::string>();
      ++splits;
    } else if (t == "ByteLevel") {
      add_prefix_space_ = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) {
        pattern = gpt2;
        ++splits;
      }
    } else {
      fail("tokenizer: pre-tokenizer '", t, "' in '", path, "' is not supported (Sequence, Split, ByteLevel)");
    }
  };
  if (j.contains("pre_tokenizer")) walk(j["pre_tokenizer"]);
  if (pattern.empty()) pattern = gpt2;
  TITAN_CHECK(splits <= 1, "tokenizer: '", path, "' chains ", splits, " splitting pre-tokenizers; titan runs one");
  std::function<void(const nlohmann::json&)> find_norm = [&](const nlohmann::json& nn) {
    if (nn.is_null()) return;
    TITAN_CHECK(nn.is_object(), "tokenizer: '", path, "': a normalizer is not an object: ", nn.dump().substr(0, 80));
    const std::string t = nn.value("type", "");
    if (t == "NFC" || t == "NFKC") normalizer_ = t;
    else if (t == "Sequence") {
      TITAN_CHECK(nn.contains("normalizers") && nn["normalizers"].is_array(), "tokenizer: '", path,
                  "': a Sequence normalizer has no normalizers list");
      for (auto& m : nn["normalizers"]) find_norm(m);
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
  pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is unavailable
}

BpeTokenizer::~BpeTokenizer() = default;

int64_t BpeTokenizer::token_id(const std::string& token) const {
  for (auto& a : added_)
    if (a.content == token) return a.id;
  auto it = vocab_.find(token);
  if (it != vocab_.end()) return it->second;
  // a plain token is spelled in the byte alphabet: map the text's bytes
  std::string mapped;
  for (unsigned char c : token) mapped += byte_to_unicode_[c];
  it = vocab_.find(mapped);
  return it != vocab_.end() ? (int64_t)it->second : -1;
}

std::string BpeTokenizer::end_of_text() const {
  for (const char* t : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|end|>"})
    for (auto& a : added_)
      if (a.content == t) return t;
  return "";
}

void BpeTokenizer::bpe(const char* word, size_t n, Workspace& ws, std::vector<uint32_t>& out) const {
  std::string key(word, n);
  auto hit = ws.cache.find(key);
  if (hit != ws.cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<uint32_t>& sym = ws.sym;
  sym.clear();
  bool whole = false;
  if (ignore_merges_) {
    std::string mapped;
    for (size_t i = 0; i < n; ++i) mapped += byte_to_unicode_[(uint8_t)word[i]];
    auto it = vocab_.find(mapped);
    if (it != vocab_.end()) {
      sym.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t id = byte_id_[(uint8_t)word[i]];
      TITAN_CHECK(id != kNoId, "tokenizer: byte 0x", "0123456789abcdef"[(uint8_t)word[i] >> 4],
                  "0123456789abcdef"[(uint8_t)word[i] & 15], " of the piece '", std::string(word, n),
                  "' has no token in the vocabulary of '", path_, "'");
      sym.push_back(id);
    }
    // rank[i]: rank of the merge of (sym[i], sym[i+1]), INT_MAX when none
    std::vector<int>& rank = ws.rank;
    auto pair_rank = [&](size_t i) {
      auto m = merges_.find(((uint64_t)sym[i] << 32) | sym[i + 1]);
      return m == merges_.end() ? INT_MAX : m->second.rank;
    };
    rank.resize(sym.size());
    for (size_t i = 0; i + 1 < sym.size(); ++i) rank[i] = pair_rank(i);
    while (sym.size() > 1) {
      size_t at = 0;
      int best = INT_MAX;
      for (size_t i = 0; i + 1 < sym.size(); ++i)
        if (rank[i] < best) {
          best = rank[i];
          at = i;
        }
      if (best == INT_MAX) break;
      sym[at] = merges_.find(((uint64_t)sym[at] << 32) | sym[at + 1])->second.id;
      sym.erase(sym.begin() + (std::ptrdiff_t)at + 1);
      rank.erase(rank.begin() + (std::ptrdiff_t)at + 1);
      if (at + 1 < sym.size()) rank[at] = pair_rank(at);
      if (at > 0) rank[at - 1] = pair_rank(at - 1);
    }
  }
  out.insert(out.end(), sym.begin(), sym.end());
  if (ws.cache.size() >= kCacheMax) ws.cache.clear();
  ws.cache.emplace(std::move(key), sym);
}

void BpeTokenizer::pieces(const std::string& s, size_t from, size_t stop, Workspace& ws,
                          std::vector<Piece>& out) const {
  size_t start = from, search = from;
  while (start < s.size() && start < stop) {
    const int rc =
        pcre2_match(regex_->code, (PCRE2_SPTR)s.data(), s.size(), search, PCRE2_NO_UTF_CHECK, ws.md, nullptr);
    if (rc < 0) {  // no further match: the rest is one piece
      out.push_back({start, s.size()});
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ws.md);
    if (ov[1] == ov[0]) {  // empty match: look again one character on (its text joins the next gap piece)
      search = ov[0] + 1;
      while (search < s.size() && ((uint8_t)s[search] & 0xC0) == 0x80) ++search;
      if (search >= s.size()) {
        out.push_back({start, s.size()});
        return;
      }
      continue;
    }
    if (ov[0] > start) {  // text the pattern skipped is a piece of its own (HF's Isolated split)
      out.push_back({start, ov[0]});
      if (ov[0] >= stop) return;
    }
    out.push_back({ov[0], ov[1]});
    start = search = ov[1];
  }
}

void BpeTokenizer::encode_plain(const std::string& s, std::vector<uint32_t>& out) const {
  if (s.empty()) return;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || s.size() < kParallelBytes) {
    Workspace& ws = workspace(serial_, regex_->code);
    std::vector<Piece> ps;
    pieces(s, 0, s.size(), ws, ps);
    for (const Piece& p : ps) bpe(s.data() + p.begin, p.end - p.begin, ws, out);
    return;
  }
  // Parallel: chunk c pre-tokenizes from cut[c] (a UTF-8 character start) until a piece would start at
  // cut[c+1], and merges its pieces. Matching from a piece boundary is deterministic, so once the true
  // segmentation (carried over from chunk c-1) reaches a boundary chunk c also found, the rest of chunk c
  // is right; before that point the pieces are redone sequentially. The ids equal the sequential run's.
  const int chunks = threads * 4;
  std::vector<size_t> cut(chunks + 1);
  for (int c = 0; c <= chunks; ++c) {
    size_t p = c == chunks ? s.size() : s.size() * (size_t)c / (size_t)chunks;
    while (p < s.size() && ((uint8_t)s[p] & 0xC0) == 0x80) ++p;
    cut[c] = p;
  }
  std::vector<std::vector<Piece>> cp(chunks);
  std::vector<std::vector<uint32_t>> cid(chunks);
  std::vector<std::vector<size_t>> cend(chunks);  // ids of pieces [0, k) are cid[c][0, cend[c][k])
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int c = 0; c < chunks; ++c) {
    Workspace& ws = workspace(serial_, regex_->code);
    pieces(s, cut[c], cut[c + 1], ws, cp[c]);
    cend[c].push_back(0);
    for (const Piece& p : cp[c]) {
      bpe(s.data() + p.begin, p.end - p.begin, ws, cid[c]);
      cend[c].push_back(cid[c].size());
    }
  }
  Workspace& ws = workspace(serial_, regex_->code);
  size_t pos = 0;  // the true segmentation has reached here
  for (int c = 0; c < chunks; ++c) {
    const auto& P = cp[c];
    // the first piece of chunk c that starts at a true boundary at or after pos
    size_t k = 0;
    while (true) {
      while (k < P.size() && P[k].begin < pos) ++k;
      if (k == P.size() || P[k].begin == pos) break;
      // out of sync: one sequential piece from pos, then look again
      std::vector<Piece> one;
      pieces(s, pos, pos + 1, ws, one);
      for (const Piece& p : one) {
        bpe(s.data() + p.begin, p.end - p.begin, ws, out);
        pos = p.end;
      }
    }
    if (k < P.size()) {
      out.insert(out.end(), cid[c].begin() + (std::ptrdiff_t)cend[c][k], cid[c].end());
      pos = P.back().end;
    }
  }
  if (pos < s.size()) {  // only when the last chunk never synchronized
    std::vector<Piece> rest;
    pieces(s, pos, s.size(), ws, rest);
    for (const Piece& p : rest) bpe(s.data() + p.begin, p.end - p.begin, ws, out);
  }
}

template <class F>
void BpeTokenizer::split_added(const std::string& text, bool normalized, std::vector<uint32_t>& out,
                               F&& plain) const {
  size_t pos = 0, from = 0;
  while (pos < text.size()) {
    if (!added_first_byte_[(uint8_t)text[pos]]) {
      ++pos;
      continue;
    }
    const AddedToken* hit = nullptr;
    for (auto& a : added_)
      if (a.normalized == normalized && !a.content.empty() && text.compare(pos, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++pos;
      continue;
    }
    if (pos > from) plain(text.substr(from, pos - from));
    out.push_back(hit->id);
    pos += hit->content.size();
    from = pos;
  }
  if (from < text.size()) plain(from == 0 ? text : text.substr(from));
}

void BpeTokenizer::encode_normalized_segment(const std::string& raw, std::vector<uint32_t>& out) const {
  std::string text = normalize(raw, normalizer_);
  split_added(text, /*normalized=*/true, out, [&](const std::string& seg) {
    if (add_prefix_space_ && seg[0] != ' ') encode_plain(" " + seg, out);
    else encode_plain(seg, out);
  });
}

std::vector<uint32_t> BpeTokenizer::encode(const std::string& text) const {
  const size_t bad = invalid_utf8_at(text);
  TITAN_CHECK(bad == std::string::npos, "tokenizer: the text is not valid UTF-8 at byte ", bad, " (of ", text.size(),
              "); HF tokenizers take Unicode text only");
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 16);
  split_added(text, /*normalized=*/false, out, [&](const std::string& seg) { encode_normalized_segment(seg, out); });
  return out;
}

std::string BpeTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string s;
  for (auto id : ids) {
    TITAN_CHECK(id < id_to_token_.size(), "tokenizer: id ", id, " outside the vocabulary (", id_to_token_.size(), ")");
    const std::string& t = id_to_token_[id];
    if (is_added_[id]) {
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

std::string ByteTokenizer::tokenizer_json() const {
  // byte-level BPE without merges: byte b is token b (its GPT-2 character), so HF's tokenizers and titan's
  // BpeTokenizer encode any text to its bytes, and decode ids back to them
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    vocab[utf8(printable ? b : 256 + n++)] = b;
  }
  nlohmann::ordered_json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", nlohmann::ordered_json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", nlohmann::ordered_json::array()}}}};
  return j.dump(2) + "\n";
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path) {
  if (path.empty()) return std::make_unique<ByteTokenizer>();
  return std::make_unique<BpeTokenizer>(path);
}

}  // namespace titan
