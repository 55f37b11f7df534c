// titan-tokenize --input corpus.txt --output train.h5 [--val-output val.h5 --val-fraction 0.05] [--tokenizer tokenizer.json]
// Tokenizes a text file (line by line, newlines kept) into HDF5 token files
// (/tokens uint32), with a progress bar. The last val-fraction of the tokens
// (cut at a line boundary) goes to the validation file.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/train/metrics.h"

using namespace titan;

int main(int argc, char** argv) {
  CLI::App app{"titan-tokenize: text -> HDF5 token files"};
  std::string input, output, val_output, tokenizer;
  double val_fraction = 0.0;
  app.add_option("--input", input, "UTF-8 text file")->required()->check(CLI::ExistingFile);
  app.add_option("--output", output, "HDF5 token file for the training split")->required();
  app.add_option("--val-output", val_output, "HDF5 token file for the validation split");
  app.add_option("--val-fraction", val_fraction, "share of the text (from the end) for validation")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--tokenizer", tokenizer, "HF tokenizer.json (default: byte-level)");
  CLI11_PARSE(app, argc, argv);
  try {
    TITAN_CHECK(val_fraction == 0.0 || !val_output.empty(), "titan-tokenize: --val-fraction needs --val-output");
    auto tok = make_tokenizer(tokenizer);
    std::ifstream in(input, std::ios::binary);
    in.seekg(0, std::ios::end);
    const int64_t size = in.tellg();
    in.seekg(0);
    const int64_t val_start = (int64_t)((1.0 - val_fraction) * (double)size);
    std::vector<uint32_t> train, val;
    ProgressBar bar("tokenizing " + input, size);
    std::string line;
    int64_t done = 0;
    while (std::getline(in, line)) {
      if (!in.eof()) line.push_back('\n');
      auto ids = tok->encode(line);
      auto& dst = done >= val_start && val_fraction > 0 ? val : train;
      dst.insert(dst.end(), ids.begin(), ids.end());
      done += (int64_t)line.size();
      bar.update(done);
    }
    bar.finish();
    write_token_file(output, train, tok->name(), tok->vocab_size());
    log_info("wrote " + output + ": " + with_commas((double)train.size()) + " tokens (" + tok->name() + ")");
    if (!val_output.empty()) {
      write_token_file(val_output, val, tok->name(), tok->vocab_size());
      log_info("wrote " + val_output + ": " + with_commas((double)val.size()) + " tokens");
    }
  } catch (const std::exception& e) {
    std::cerr << "[titan-tokenize] error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
