// The CUDA driver's process checkpoint API (cuCheckpointProcess*, driver
// >= 570), applied to another process: it moves that process's remaining
// CUDA state (contexts, modules, memory outside the pool) out of the GPU and
// back, possibly onto other GPUs. Calls run on the libuv pool: they take
// seconds.
#pragma once

#include <napi.h>

namespace gpuckpt {

// driverCheckpoint(op, pid, pairs?): Promise<{ result, state? }>
//   op: 'state' | 'lock' | 'checkpoint' | 'restore' | 'unlock'
//   pairs (restore): [{ from: 'GPU-uuid', to: 'GPU-uuid' }]
// result is the CUresult (0 = success); -1: no checkpoint API in the driver.
Napi::Value DriverCheckpoint(const Napi::CallbackInfo& info);
// warmDriver(): loads and initialises the driver on the libuv pool, so that
// the first call that needs it finds it ready (driver_api.h loads it once).
Napi::Value WarmDriver(const Napi::CallbackInfo& info);
// listGpus(): [{ ordinal, name, uuid }] as this process's driver sees them.
Napi::Value ListGpus(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
