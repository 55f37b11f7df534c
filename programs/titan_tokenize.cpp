// titan-tokenize --input PATH [--input PATH ...] --output train.h5 [--val-output val.h5 --val-fraction 0.05]
//                [--tokenizer tokenizer.json] [--text-field text] [--separator TOKEN|none]
// Turns documents (text files, folders, JSONL / JSONL.gz with a `text` field)
// into an HDF5 token file: /tokens (uint32), /doc_starts (int64, the first
// token of each document), attributes tokenizer, vocab_size, separator_id.
// Each document is encoded whole, as Hugging Face's tokenizers do; the
// tokenizer's end-of-text token goes between documents. The validation split
// takes the last --val-fraction of the tokens, cut at a document boundary
// when there are several documents.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>

#include "src/config/version.h"
#include "src/data/corpus.h"
#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/log/log.h"
#include "src/tensor/error.h"

using namespace titan;

int main(int argc, char** argv) {
  CLI::App app{"titan-tokenize: documents (text, folders, JSONL/JSONL.gz) -> HDF5 token files", "titan-tokenize"};
  app.set_version_flag("--version", version_string("titan-tokenize"));
  std::vector<std::string> inputs;
  std::string output, val_output, tokenizer, text_field = "text", separator = "default";
  double val_fraction = 0.0;
  app.add_option("--input", inputs,
                 "a text file (one document), a folder of files, or JSONL / JSONL.gz (one document per line); "
                 "repeatable")
      ->required();
  app.add_option("--output", output, "HDF5 token file for the training split")->required();
  app.add_option("--val-output", val_output, "HDF5 token file for the validation split");
  app.add_option("--val-fraction", val_fraction, "share of the tokens (from the end) for validation")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--tokenizer", tokenizer, "HF tokenizer.json (default: byte-level)");
  app.add_option("--text-field", text_field, "the JSONL field holding each document's text");
  app.add_option("--separator", separator,
                 "token between documents: 'default' (the tokenizer's end-of-text, e.g. <|endoftext|>; none for "
                 "byte-level), 'none', or a token of the vocabulary");
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit makes writes fail (EFBIG, reported), not kill the job
  try {
    TITAN_CHECK(val_fraction == 0.0 || !val_output.empty(), "titan-tokenize: --val-fraction needs --val-output");
    TITAN_CHECK(val_output.empty() || val_fraction > 0.0, "titan-tokenize: --val-output needs --val-fraction > 0");
    auto tok = make_tokenizer(tokenizer);
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
      write_token_file(path, t, tok->name(), tok->vocab_size(), starts, sep);
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
