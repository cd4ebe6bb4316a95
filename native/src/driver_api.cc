#include "driver_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "uuid_text.h"

namespace gpuckpt {

const Driver& driver() {
  static Driver d{};
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    auto sym = [h](const char* n) { return dlsym(h, n); };
    d.init = reinterpret_cast<decltype(d.init)>(sym("cuInit"));
    d.device_count = reinterpret_cast<decltype(d.device_count)>(sym("cuDeviceGetCount"));
    d.device_get = reinterpret_cast<decltype(d.device_get)>(sym("cuDeviceGet"));
    d.device_name = reinterpret_cast<decltype(d.device_name)>(sym("cuDeviceGetName"));
    d.device_uuid = reinterpret_cast<decltype(d.device_uuid)>(sym("cuDeviceGetUuid_v2"));
    if (!d.device_uuid) d.device_uuid = reinterpret_cast<decltype(d.device_uuid)>(sym("cuDeviceGetUuid"));
    d.get_state = reinterpret_cast<decltype(d.get_state)>(sym("cuCheckpointProcessGetState"));
    d.lock = reinterpret_cast<decltype(d.lock)>(sym("cuCheckpointProcessLock"));
    d.checkpoint = reinterpret_cast<decltype(d.checkpoint)>(sym("cuCheckpointProcessCheckpoint"));
    d.restore = reinterpret_cast<decltype(d.restore)>(sym("cuCheckpointProcessRestore"));
    d.unlock = reinterpret_cast<decltype(d.unlock)>(sym("cuCheckpointProcessUnlock"));
    d.mem_create = reinterpret_cast<decltype(d.mem_create)>(sym("cuMemCreate"));
    d.mem_export = reinterpret_cast<decltype(d.mem_export)>(sym("cuMemExportToShareableHandle"));
    d.mem_release = reinterpret_cast<decltype(d.mem_release)>(sym("cuMemRelease"));
    d.ok = d.init && d.init(0) == CUDA_SUCCESS;
  });
  return d;
}

std::string UuidString(const CUuuid& u) { return UuidText(reinterpret_cast<const uint8_t*>(u.bytes)); }

bool ParseUuid(const std::string& text, CUuuid* out) { return UuidBytes(text, reinterpret_cast<uint8_t*>(out->bytes)); }

bool DeviceByUuid(const std::string& text, CUdevice* out) {
  const Driver& d = driver();
  CUuuid want{};
  int n = 0;
  if (!d.ok || !ParseUuid(text, &want) || d.device_count(&n) != CUDA_SUCCESS) return false;
  for (int i = 0; i < n; i++) {
    CUuuid u{};
    if (d.device_get(out, i) == CUDA_SUCCESS && d.device_uuid(&u, *out) == CUDA_SUCCESS &&
        memcmp(u.bytes, want.bytes, sizeof(u.bytes)) == 0)
      return true;
  }
  return false;
}

}  // namespace gpuckpt
