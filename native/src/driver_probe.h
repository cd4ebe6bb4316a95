// Asks the real CUDA driver, if one is installed, how many GPUs it sees:
// the CLI's "is there an NVIDIA GPU here" check, done in-process without a
// link-time dependency on libcuda.
#pragma once

#include <napi.h>

namespace gpuckpt {

Napi::Value ProbeDriver(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
