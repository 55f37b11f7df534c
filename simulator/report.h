// simulator/report.h — the TorchTitan-style lines a simulated step prints.
#pragma once
#include <string>
#include <vector>

#include "simulator/result.h"

namespace titan {

std::vector<std::string> describe_simulation(const SimResult& r);

}  // namespace titan
