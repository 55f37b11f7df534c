// titan-tokenize --input PATH [--input PATH ...] --output train.h5 [--val-output val.h5 --val-fraction 0.05]
//                [--tokenizer tokenizer.json|NAME] [--text-field text] [--separator TOKEN|none]
// titan-tokenize --decode tokens.h5 [--start N] [--count M] [--output text.txt] [--tokenizer ...]
// Turns documents (text files, folders, JSONL / JSONL.gz with a `text` field)
// into an HDF5 token file: /tokens (uint32), /doc_starts (int64, the first
// token of each document), attributes tokenizer (byte, or bpe:ABSOLUTE_PATH), tokenizer_sha256 (of its
// tokenizer.json), vocab_size, separator_id. --decode turns a token file's ids back into text with the
// tokenizer it records (checked against the hash) or --tokenizer. --tokenizer NAME is an installed one
// (share/titan/tokenizers/NAME/tokenizer.json: qwen3).
// Each document is encoded whole, as Hugging Face's tokenizers do; the
// tokenizer's end-of-text token goes between documents. The validation split
// takes the last --val-fraction of the tokens, cut at a document boundary
// when there are several documents.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>

#include <filesystem>
#include <fstream>

#include "src/checkpoint/h5.h"
#include "src/config/version.h"
#include "src/data/corpus.h"
#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/log/log.h"
#include "src/tensor/error.h"

using namespace titan;

namespace {
// --tokenizer: a tokenizer.json path, or the name of an installed one (this build's, then the install's).
std::string tokenizer_path(const std::string& arg) {
  namespace fs = std::filesystem;
  if (arg.empty() || fs::exists(arg) || arg.find('/') != std::string::npos || arg.ends_with(".json")) return arg;
  std::vector<std::string> roots{TITAN_BUILD_TOKENIZERS, TITAN_INSTALL_TOKENIZERS};
  for (const auto& r : roots)
    if (fs::exists(r + "/" + arg + "/tokenizer.json")) return r + "/" + arg + "/tokenizer.json";
  fail("titan-tokenize: --tokenizer ", arg, ": no such file, and no installed tokenizer of that name in ",
       roots[0], " or ", roots[1], " (installed: qwen3)");
}

// --decode: ids -> text, with the tokenizer the file records (verified) or the one given.
int decode(const std::string& file, const std::string& tokenizer, int64_t start, int64_t count, const std::string& out) {
  h5::File f(file, h5::File::Read);
  TITAN_CHECK(f.has("tokens"), "titan-tokenize --decode: ", file, " has no /tokens (not a titan token file)");
  const int64_t n = f.shape("tokens").empty() ? 0 : f.shape("tokens")[0];
  TITAN_CHECK(start >= 0 && start <= n, "titan-tokenize --decode: --start ", start, " is outside the ", n, " tokens of ",
              file);
  const int64_t m = count < 0 ? n - start : std::min(count, n - start);
  std::unique_ptr<Tokenizer> tok;
  if (!tokenizer.empty()) {
    tok = make_tokenizer(tokenizer_path(tokenizer));
  } else {
    try {
      tok = tokenizer_of_token_file(file, f.has_attr("tokenizer") ? f.attr_string("tokenizer") : "",
                                    f.has_attr("tokenizer_sha256") ? f.attr_string("tokenizer_sha256") : "");
    } catch (const Error& e) {
      fail(e.what(), "; pass --tokenizer PATH (the tokenizer.json the file was made with)");
    }
  }
  std::vector<uint32_t> ids((size_t)m);
  if (m > 0) f.read_u32("tokens", start, m, ids.data());
  const std::string text = tok->decode(ids);
  if (out.empty()) {
    std::cout << text << std::flush;
  } else {
    std::ofstream o(out, std::ios::binary);
    o << text;
    TITAN_CHECK(o.good(), "titan-tokenize --decode: writing ", out, " failed (disk full?)");
    log_info("decoded " + with_commas((double)m) + " tokens of " + file + " (" + tok->name() + ") to " + out);
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"titan-tokenize: documents (text, folders, JSONL/JSONL.gz) -> HDF5 token files", "titan-tokenize"};
  app.set_version_flag("--version", version_string("titan-tokenize"));
  std::vector<std::string> inputs;
  std::string output, val_output, tokenizer, text_field = "text", separator = "default", decode_file;
  double val_fraction = 0.0;
  int64_t start = 0, count = -1;
  app.add_option("--input", inputs,
                 "a text file (one document), a folder of files, or JSONL / JSONL.gz (one document per line); "
                 "repeatable");
  app.add_option("--output", output, "HDF5 token file for the training split (--decode: the text file; default stdout)");
  app.add_option("--decode", decode_file, "a token file to turn back into text (with the tokenizer it records)");
  app.add_option("--start", start, "--decode: the first token");
  app.add_option("--count", count, "--decode: how many tokens (default: to the end)");
  app.add_option("--val-output", val_output, "HDF5 token file for the validation split");
  app.add_option("--val-fraction", val_fraction, "share of the tokens (from the end) for validation")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--tokenizer", tokenizer,
                 "HF tokenizer.json, or an installed one by name (qwen3); default: byte-level (--decode: the one the "
                 "file records)");
  app.add_option("--text-field", text_field, "the JSONL field holding each document's text");
  app.add_option("--separator", separator,
                 "token between documents: 'default' (the tokenizer's end-of-text, e.g. <|endoftext|>; none for "
                 "byte-level), 'none', or a token of the vocabulary");
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit makes writes fail (EFBIG, reported), not kill the job
  try {
    if (!decode_file.empty()) {
      TITAN_CHECK(inputs.empty() && val_output.empty(), "titan-tokenize: --decode reads a token file; --input and "
                  "--val-output are for tokenizing (give one or the other)");
      return decode(decode_file, tokenizer, start, count, output);
    }
    TITAN_CHECK(!inputs.empty() && !output.empty(), "titan-tokenize: tokenizing needs --input and --output (or "
                "--decode FILE.h5 to turn a token file back into text)");
    TITAN_CHECK(val_fraction == 0.0 || !val_output.empty(), "titan-tokenize: --val-fraction needs --val-output");
    TITAN_CHECK(val_output.empty() || val_fraction > 0.0, "titan-tokenize: --val-output needs --val-fraction > 0");
    auto tok = make_tokenizer(tokenizer_path(tokenizer));
    const std::string sha = tok->content_sha256();
    int64_t sep = -1;
    std::string sep_name = separator == "default" ? tok->end_of_text() : separator == "none" ? "" : separator;
    if (!sep_name.empty()) {
      sep = tok->token_id(sep_name);
      TITAN_CHECK(sep >= 0, "titan-tokenize: --separator '", sep_name, "' is not one token of ", tok->name());
    }
    const auto files = corpus_files(inputs);
    const int64_t bytes = corpus_file_bytes(files);
    log_info("tokenizing " + std::to_string(files.size()) + " file(s), " + with_commas((double)bytes) +
             " bytes, with " + tok->name() + " on " + std::to_string(omp_get_max_threads()) + " threads; separator " +
             (sep >= 0 ? "'" + sep_name + "' (id " + std::to_string(sep) + ")" : std::string("none")));
    Progress bar("tokenizing", bytes, "B", /*quiet_s=*/1.0);
    CorpusOptions opt;
    opt.text_field = text_field;
    opt.separator = sep;
    const double t0 = wall_seconds();
    TokenizedCorpus c = tokenize_corpus(*tok, files, opt, [&](int64_t done) { bar.update(done); });
    bar.finish();
    const double dt = wall_seconds() - t0;
    TITAN_CHECK(!c.tokens.empty(), "titan-tokenize: the input holds no text (", files.size(),
                " file(s), no document with any content): nothing to write");
    if (c.empty_documents > 0) log_info("skipped " + with_commas((double)c.empty_documents) + " empty documents");
    log_info("encoded " + with_commas((double)c.doc_starts.size()) + " documents, " +
             with_commas((double)c.text_bytes) + " bytes of text -> " + with_commas((double)c.tokens.size()) +
             " tokens in " + std::to_string(dt).substr(0, 5) + " s (" +
             std::to_string((double)c.text_bytes / 1e6 / std::max(dt, 1e-9)).substr(0, 5) + " MB/s)");
    // the split: the last val_fraction of tokens, at the nearest document start when there are several
    int64_t cut = (int64_t)c.tokens.size();
    if (val_fraction > 0) {
      const int64_t want = (int64_t)((1.0 - val_fraction) * (double)c.tokens.size());
      cut = want;
      if (c.doc_starts.size() >= 2) {
        int64_t best = -1;
        for (size_t i = 1; i < c.doc_starts.size(); ++i)
          if (best < 0 || std::llabs(c.doc_starts[i] - want) < std::llabs(best - want)) best = c.doc_starts[i];
        cut = best;
      }
      TITAN_CHECK(cut > 0 && cut < (int64_t)c.tokens.size(), "titan-tokenize: ", c.tokens.size(),
                  " tokens are too few to split off a validation set");
    }
    auto part = [&](int64_t lo, int64_t hi, const std::string& path) {
      std::vector<uint32_t> t(c.tokens.begin() + lo, c.tokens.begin() + hi);
      std::vector<int64_t> starts;
      if (lo > 0) starts.push_back(0);  // a cut inside a document starts a (partial) one
      for (int64_t s : c.doc_starts)
        if (s >= lo && s < hi && !(lo > 0 && s == lo)) starts.push_back(s - lo);
      write_token_file(path, t, tok->name(), tok->vocab_size(), starts, sep, sha);
      log_info("wrote " + path + ": " + with_commas((double)t.size()) + " tokens, " +
               with_commas((double)starts.size()) + " documents (" + tok->name() + ")");
    };
    part(0, cut, output);
    if (!val_output.empty()) part(cut, (int64_t)c.tokens.size(), val_output);
  } catch (const std::exception& e) {
    std::cerr << "[titan-tokenize] error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
