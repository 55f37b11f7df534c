// src/config/version.h — the version every titan executable prints with --version.
#pragma once
#include <string>

#ifndef TITAN_VERSION
#define TITAN_VERSION "dev"
#endif

namespace titan {
// "titan-train 0.7.0"
inline std::string version_string(const std::string& tool) { return tool + " " + TITAN_VERSION; }
}  // namespace titan
