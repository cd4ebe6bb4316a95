#include "driver_probe.h"

#include <dlfcn.h>

namespace gpuckpt {

// probeDriver(): { driver: boolean, devices: number, error?: string }.
// Runs in a child process of the CLI (never in the controller itself), so
// initialising CUDA here costs the controller nothing.
Napi::Value ProbeDriver(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  out.Set("driver", Napi::Boolean::New(env, h != nullptr));
  out.Set("devices", Napi::Number::New(env, 0));
  if (!h) {
    out.Set("error", Napi::String::New(env, "no NVIDIA driver (libcuda.so.1 not found)"));
    return out;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(h, "cuDeviceGetCount"));
  int n = 0;
  int rc = init ? init(0) : -1;
  if (rc == 0 && count && count(&n) == 0) {
    out.Set("devices", Napi::Number::New(env, n));
  } else {
    out.Set("error", Napi::String::New(env, "the NVIDIA driver sees no usable GPU (cuInit returned " +
                                                std::to_string(rc) + ")"));
  }
  return out;
}

}  // namespace gpuckpt
