// src/config/untrusted_json.h — JSON from a file titan did not write (safetensors headers and indexes,
// tokenizer.json, config.json), parsed with two guarantees nlohmann's plain parse lacks:
//   - every object's keys appear once: a name given twice is refused (nlohmann keeps the last, silently);
//   - nesting is at most max_depth: nlohmann parses iteratively, but dump(), copies and titan's own walks recurse,
//     and a few hundred thousand brackets would overflow the stack there.
// Errors are titan::Error naming `what` (the file and its part).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace titan::config {

nlohmann::json parse_untrusted_json(const std::string& text, const std::string& what, int max_depth = 64);

}  // namespace titan::config
