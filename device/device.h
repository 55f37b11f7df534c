// device/device.h — where a tensor lives.
//
// `cpu`  : real storage in host memory, kernels run on this machine.
// `meta` : shape and dtype only, no storage. Every op on meta inputs computes
//          its output shape/dtype and reports the FLOPs and bytes it would
//          move, without touching data. This is how a 32B job is planned on a
//          laptop. The simulator (simulator/: chips and systems as data)
//          prices these meta ops; the tensor engine itself only needs the tag.
#pragma once
#include <string>

namespace titan {

enum class Device { CPU, Meta };

inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "meta"; }

}  // namespace titan
