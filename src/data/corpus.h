// src/data/corpus.h — documents in, token ids out (what titan-tokenize runs).
//
// Inputs, each a path:
//   - a text file: one document, encoded whole;
//   - JSONL, or JSONL.gz (the Hugging Face datasets export format): one
//     document per line, its `text_field` string (empty lines skipped);
//   - a folder: every regular file below it in path order, *.jsonl[.gz] as
//     JSONL, anything else as one text document.
// Documents are encoded in parallel (groups of documents across threads,
// long documents in parallel chunks: the tokenizer re-synchronizes them), and
// concatenated in input order with `separator` (the tokenizer's end-of-text id,
// or none) between consecutive documents; empty documents are skipped (and counted). doc_starts[i] is the offset of
// document i's first token.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/data/tokenizer.h"

namespace titan {

struct TokenizedCorpus {
  std::vector<uint32_t> tokens;
  std::vector<int64_t> doc_starts;  // one per document, increasing
  int64_t text_bytes = 0;           // UTF-8 bytes encoded
  int64_t empty_documents = 0;      // skipped (no text)
};

struct CorpusOptions {
  std::string text_field = "text";  // JSONL field holding the document
  int64_t separator = -1;           // id between documents; -1: none
  int64_t batch_bytes = 64 << 20;   // text read (and encoded in parallel) at a time
};

// The files an input list expands to (folders walked in path order); errors name a missing path.
std::vector<std::string> corpus_files(const std::vector<std::string>& inputs);
// Bytes the files occupy on disk (compressed for .gz): the unit of progress.
int64_t corpus_file_bytes(const std::vector<std::string>& files);

// `progress(bytes of input files consumed)` is called as reading advances.
TokenizedCorpus tokenize_corpus(const Tokenizer& tok, const std::vector<std::string>& files, const CorpusOptions& opt,
                                const std::function<void(int64_t)>& progress = nullptr);

}  // namespace titan
