#include "src/data/corpus.h"

#include <omp.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/tensor/error.h"

namespace fs = std::filesystem;

namespace titan {

namespace {
bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool is_jsonl(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz"); }

// Reads a file (gzip-compressed or not: zlib reads both) in blocks.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    f_ = gzopen(path.c_str(), "rb");
    TITAN_CHECK(f_ != nullptr, "titan-tokenize: cannot open '", path, "'");
    gzbuffer(f_, 1 << 20);
  }
  ~Reader() {
    if (f_) gzclose(f_);
  }
  // Appends up to n bytes; false at the end.
  bool read(std::string& dst, size_t n) {
    const size_t at = dst.size();
    dst.resize(at + n);
    const int got = gzread(f_, dst.data() + at, (unsigned)n);
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f_, &err);
      fail("titan-tokenize: reading '", path_, "' failed: ", msg);
    }
    dst.resize(at + (size_t)got);
    if (got == 0) {  // the end: a gzip stream cut short ends here too, with Z_BUF_ERROR (its text would be lost)
      int err = Z_OK;
      gzerror(f_, &err);
      TITAN_CHECK(err == Z_OK, "titan-tokenize: '", path_, "' ends inside its compressed data (truncated or "
                  "damaged gzip, zlib error ", err, "): its last documents would be lost");
    }
    return got > 0;
  }
  int64_t consumed() const { return (int64_t)gzoffset(f_); }  // bytes of the file itself

 private:
  std::string path_;
  gzFile f_ = nullptr;
};
}  // namespace

std::vector<std::string> corpus_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    TITAN_CHECK(fs::exists(in, ec), "titan-tokenize: input '", in, "' does not exist");
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec))
        if (it->is_regular_file() && it->path().filename().string()[0] != '.') found.push_back(it->path().string());
      TITAN_CHECK(!ec, "titan-tokenize: cannot list '", in, "': ", ec.message());
      std::sort(found.begin(), found.end());
      TITAN_CHECK(!found.empty(), "titan-tokenize: folder '", in, "' holds no files");
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(in);
    }
  }
  return files;
}

int64_t corpus_file_bytes(const std::vector<std::string>& files) {
  int64_t n = 0;
  for (const auto& f : files) n += (int64_t)fs::file_size(f);
  return n;
}

TokenizedCorpus tokenize_corpus(const Tokenizer& tok, const std::vector<std::string>& files, const CorpusOptions& opt,
                                const std::function<void(int64_t)>& progress) {
  TokenizedCorpus out;
  int64_t done_files_bytes = 0;
  std::vector<std::string> batch;  // documents read, not yet encoded
  int64_t batch_bytes = 0;
  auto flush = [&]() {
    if (batch.empty()) return;
    std::vector<std::vector<uint32_t>> ids(batch.size());
    // small documents: one per thread at a time; long ones use every thread inside the tokenizer
    std::vector<size_t> small, large;
    for (size_t i = 0; i < batch.size(); ++i) (batch[i].size() >= (256u << 10) ? large : small).push_back(i);
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t k = 0; k < small.size(); ++k) ids[small[k]] = tok.encode(batch[small[k]]);
    for (size_t i : large) ids[i] = tok.encode(batch[i]);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!out.doc_starts.empty() && opt.separator >= 0) out.tokens.push_back((uint32_t)opt.separator);
      out.doc_starts.push_back((int64_t)out.tokens.size());
      out.tokens.insert(out.tokens.end(), ids[i].begin(), ids[i].end());
      out.text_bytes += (int64_t)batch[i].size();
    }
    batch.clear();
    batch_bytes = 0;
  };
  auto add = [&](std::string&& doc) {
    if (doc.empty()) {  // nothing to learn from; a zero-length document would also repeat a start offset
      ++out.empty_documents;
      return;
    }
    batch_bytes += (int64_t)doc.size();
    batch.push_back(std::move(doc));
    if (batch_bytes >= opt.batch_bytes) flush();
  };
  for (const auto& path : files) {
    Reader r(path);
    if (!is_jsonl(path)) {  // one document: the whole file
      std::string doc;
      while (r.read(doc, 8 << 20))
        if (progress) progress(done_files_bytes + r.consumed());
      add(std::move(doc));
    } else {
      std::string buf;
      size_t line_no = 0;
      bool more = true;
      while (more || !buf.empty()) {
        if (more) more = r.read(buf, 4 << 20);
        size_t start = 0;
        while (true) {
          size_t nl = buf.find('\n', start);
          if (nl == std::string::npos) {
            if (more) break;  // a partial line: read on
            nl = buf.size();  // the last line without a newline
          }
          ++line_no;
          std::string_view line(buf.data() + start, nl - start);
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          start = std::min(nl + 1, buf.size());
          if (line.find_first_not_of(" \t") != std::string_view::npos) {
            nlohmann::json j;
            try {
              j = nlohmann::json::parse(line);
            } catch (const std::exception& e) {
              fail("titan-tokenize: ", path, ":", line_no, ": not valid JSON (", e.what(), ")");
            }
            TITAN_CHECK(j.is_object() && j.contains(opt.text_field) && j[opt.text_field].is_string(), "titan-tokenize: ",
                        path, ":", line_no, ": no string field '", opt.text_field,
                        "' (set --text-field; this line has: ", j.is_object() ? [&] {
                          std::string keys;
                          for (auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + k;
                          return keys;
                        }() : std::string("not an object"), ")");
            add(j[opt.text_field].get<std::string>());
          }
          if (nl >= buf.size()) {
            start = buf.size();
            break;
          }
        }
        buf.erase(0, start);
        if (progress) progress(done_files_bytes + r.consumed());
        if (!more && buf.empty()) break;
      }
    }
    done_files_bytes += (int64_t)fs::file_size(path);
    if (progress) progress(done_files_bytes);
  }
  flush();
  return out;
}

}  // namespace titan
