// The CUDA driver as the controller uses it: libcuda.so.1 loaded at run
// time (the addon must load on hosts without a GPU), cuInit only. The
// controller never creates a context: the checkpoint API and VMM
// allocations for another process (peer_memory.h) need none.
#pragma once

#include <string>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

namespace gpuckpt {

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*device_count)(int*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_name)(char*, int, CUdevice);
  CUresult (*device_uuid)(CUuuid*, CUdevice);
  CUresult (*get_state)(int, CUprocessState*);
  CUresult (*lock)(int, CUcheckpointLockArgs*);
  CUresult (*checkpoint)(int, CUcheckpointCheckpointArgs*);
  CUresult (*restore)(int, CUcheckpointRestoreArgs*);
  CUresult (*unlock)(int, CUcheckpointUnlockArgs*);
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*mem_export)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
  CUresult (*mem_release)(CUmemGenericAllocationHandle);
  bool ok;  // loaded, and cuInit succeeded
};

// Loaded and initialised once, on first use.
const Driver& driver();
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string UuidString(const CUuuid& u);
// That form, with or without "GPU-" and dashes; false if malformed.
bool ParseUuid(const std::string& text, CUuuid* out);
// The device with that UUID; false if this process's driver has none.
bool DeviceByUuid(const std::string& text, CUdevice* out);

}  // namespace gpuckpt
