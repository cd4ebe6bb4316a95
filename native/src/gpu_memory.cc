#include "gpu_memory.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

namespace gpuckpt {

namespace {

// The few NVML types used, as in nvml.h (its ABI is stable; the toolkit
// here ships no nvml.h).
using nvmlReturn = int;
using nvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn kNvmlSuccess = 0;
constexpr nvmlReturn kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;
constexpr unsigned kUuidLen = 96;

struct Nvml {
  nvmlReturn (*init)();
  nvmlReturn (*count)(unsigned*);
  nvmlReturn (*by_index)(unsigned, nvmlDevice*);
  nvmlReturn (*uuid)(nvmlDevice, char*, unsigned);
  nvmlReturn (*memory)(nvmlDevice, NvmlMemory*);
  nvmlReturn (*processes)(nvmlDevice, unsigned*, NvmlProcessInfo*);
  bool ok;
};

const Nvml& nvml() {
  static Nvml n{};
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    auto sym = [h](const char* s) { return dlsym(h, s); };
    n.init = reinterpret_cast<decltype(n.init)>(sym("nvmlInit_v2"));
    n.count = reinterpret_cast<decltype(n.count)>(sym("nvmlDeviceGetCount_v2"));
    n.by_index = reinterpret_cast<decltype(n.by_index)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    n.uuid = reinterpret_cast<decltype(n.uuid)>(sym("nvmlDeviceGetUUID"));
    n.memory = reinterpret_cast<decltype(n.memory)>(sym("nvmlDeviceGetMemoryInfo"));
    n.processes = reinterpret_cast<decltype(n.processes)>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
    n.ok = n.init && n.count && n.by_index && n.uuid && n.memory && n.processes && n.init() == kNvmlSuccess;
  });
  return n;
}

struct Gpu {
  nvmlDevice handle;
  std::string uuid;
};

std::vector<Gpu> gpus(const Nvml& n) {
  std::vector<Gpu> out;
  unsigned count = 0;
  if (n.count(&count) != kNvmlSuccess) return out;
  for (unsigned i = 0; i < count; i++) {
    Gpu g{};
    char uuid[kUuidLen] = {0};
    if (n.by_index(i, &g.handle) != kNvmlSuccess || n.uuid(g.handle, uuid, kUuidLen) != kNvmlSuccess) continue;
    g.uuid = uuid;
    out.push_back(g);
  }
  return out;
}

}  // namespace

Napi::Value GpuMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Nvml& n = nvml();
  if (!n.ok) return env.Null();
  Napi::Array out = Napi::Array::New(env);
  for (const Gpu& g : gpus(n)) {
    NvmlMemory m{};
    if (n.memory(g.handle, &m) != kNvmlSuccess) continue;
    Napi::Object o = Napi::Object::New(env);
    o.Set("uuid", Napi::String::New(env, g.uuid));
    o.Set("free", Napi::BigInt::New(env, static_cast<uint64_t>(m.free)));
    o.Set("total", Napi::BigInt::New(env, static_cast<uint64_t>(m.total)));
    out.Set(out.Length(), o);
  }
  return out;
}

Napi::Value ProcessGpuMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const unsigned pid = info[0].As<Napi::Number>().Uint32Value();
  const Nvml& n = nvml();
  if (!n.ok) return env.Null();
  Napi::Array out = Napi::Array::New(env);
  bool seen = false;
  for (const Gpu& g : gpus(n)) {
    std::vector<NvmlProcessInfo> procs(64);
    unsigned count = static_cast<unsigned>(procs.size());
    nvmlReturn r = n.processes(g.handle, &count, procs.data());
    if (r == kNvmlInsufficientSize) {
      procs.resize(count + 16);
      count = static_cast<unsigned>(procs.size());
      r = n.processes(g.handle, &count, procs.data());
    }
    if (r != kNvmlSuccess) return env.Null();
    for (unsigned i = 0; i < count; i++) {
      if (procs[i].pid != pid) continue;
      // Without the right to see it (or under MIG), NVML gives no figure.
      if (procs[i].usedGpuMemory == kNvmlValueNotAvailable) return env.Null();
      Napi::Object o = Napi::Object::New(env);
      o.Set("uuid", Napi::String::New(env, g.uuid));
      o.Set("bytes", Napi::BigInt::New(env, static_cast<uint64_t>(procs[i].usedGpuMemory)));
      out.Set(out.Length(), o);
      seen = true;
    }
  }
  return seen ? static_cast<Napi::Value>(out) : env.Null();
}

}  // namespace gpuckpt
