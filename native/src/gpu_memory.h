// GPU memory as NVML sees it (libnvidia-ml, loaded at run time): free memory
// per GPU, and what one process holds on each. The controller asks before a
// driver restore, because a restore the driver refuses for lack of memory
// leaves the process unable to restore anywhere else (CUresult 304 on H200,
// driver 580). No context is created: NVML does not need one.
#pragma once

#include <napi.h>

namespace gpuckpt {

// gpuMemory(): [{ uuid, free, total }] (bigint bytes), or null without NVML.
Napi::Value GpuMemory(const Napi::CallbackInfo& info);
// processGpuMemory(pid): [{ uuid, bytes }] for the GPUs where the process
// holds memory, or null when NVML cannot say (no NVML, or the process is
// not visible to it, as in another PID namespace).
Napi::Value ProcessGpuMemory(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
