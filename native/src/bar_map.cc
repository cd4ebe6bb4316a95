// GPU memory mapped into this process's address space (see bar_map.h).
#include "bar_map.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "uuid_text.h"
#include "vulkan_min.h"

namespace gpuckpt {
namespace {

// A Vulkan device of the GPU the chunks are on, and the chunks imported into it.
struct VulkanMapping {
  vk::Instance instance = nullptr;
  vk::Device device = nullptr;
  vk::DestroyInstance destroyInstance = nullptr;
  vk::DestroyDevice destroyDevice = nullptr;
  vk::FreeMemory freeMemory = nullptr;
  vk::UnmapMemory unmapMemory = nullptr;
  std::vector<vk::DeviceMemory> memories;

  ~VulkanMapping() {
    for (vk::DeviceMemory m : memories) {
      if (unmapMemory) unmapMemory(device, m);
      if (freeMemory) freeMemory(device, m, nullptr);
    }
    if (device && destroyDevice) destroyDevice(device, nullptr);
    if (instance && destroyInstance) destroyInstance(instance, nullptr);
  }
};

struct Mapping {
  std::string route;
  size_t chunkBytes = 0;
  std::vector<uint8_t*> chunks;
  std::unique_ptr<VulkanMapping> vulkan;  // else mmap'ed

  ~Mapping() {
    if (!vulkan)
      for (uint8_t* p : chunks) munmap(p, chunkBytes);
  }
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

std::map<uint32_t, std::unique_ptr<Mapping>> mappings;
uint32_t nextId = 1;

// The fds themselves, as shared memory: what a dma-buf that allows mmap, or
// the fake driver's memfds, give.
bool MapFds(const std::vector<int>& fds, size_t bytes, Mapping& m, std::string& why) {
  for (int fd : fds) {
    // Only what is memory to the kernel: the driver's own fds may map something else.
    char link[128] = {0};
    std::string self = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = readlink(self.c_str(), link, sizeof(link) - 1);
    std::string what = n > 0 ? std::string(link, static_cast<size_t>(n)) : "unknown";
    if (what.rfind("/memfd:", 0) != 0 && what.rfind("anon_inode:dmabuf", 0) != 0) {
      why = "mmap: the exported memory is " + what + ", not a memfd or a dma-buf";
      return false;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      why = std::string("mmap of the exported memory: ") + strerror(errno);
      return false;
    }
    m.chunks.push_back(static_cast<uint8_t*>(p));
  }
  return true;
}

// The fds imported into Vulkan (VK_KHR_external_memory_fd) as a host-visible
// memory type of the GPU whose UUID is given, device-local first (the BAR),
// and mapped.
bool MapVulkan(const std::vector<int>& fds, size_t bytes, const std::string& uuid, Mapping& m, std::string& why) {
  static void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = "Vulkan: no loader (libvulkan.so.1)";
    return false;
  }
  auto gipa = reinterpret_cast<vk::GetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  uint8_t want[16];
  if (!gipa || !UuidBytes(uuid, want)) {
    why = "Vulkan: no vkGetInstanceProcAddr";
    return false;
  }
  auto v = std::make_unique<VulkanMapping>();
  vk::ApplicationInfo app{vk::APPLICATION_INFO, nullptr, "gpuckpt", 1, nullptr, 0, vk::API_VERSION_1_1};
  vk::InstanceCreateInfo ici{vk::INSTANCE_CREATE_INFO, nullptr, 0, &app, 0, nullptr, 0, nullptr};
  auto createInstance = reinterpret_cast<vk::CreateInstance>(gipa(nullptr, "vkCreateInstance"));
  vk::Result r = createInstance ? createInstance(&ici, nullptr, &v->instance) : -1;
  if (r != vk::SUCCESS) {
    why = "Vulkan: no driver (vkCreateInstance " + std::to_string(r) + ")";
    v->instance = nullptr;
    return false;
  }
  auto proc = [&](const char* name) { return gipa(v->instance, name); };
  v->destroyInstance = reinterpret_cast<vk::DestroyInstance>(proc("vkDestroyInstance"));
  auto enumerate = reinterpret_cast<vk::EnumeratePhysicalDevices>(proc("vkEnumeratePhysicalDevices"));
  auto properties2 = reinterpret_cast<vk::GetPhysicalDeviceProperties2>(proc("vkGetPhysicalDeviceProperties2"));
  auto memoryProperties = reinterpret_cast<vk::GetPhysicalDeviceMemoryProperties>(proc("vkGetPhysicalDeviceMemoryProperties"));
  auto createDevice = reinterpret_cast<vk::CreateDevice>(proc("vkCreateDevice"));
  auto gdpa = reinterpret_cast<vk::GetDeviceProcAddr>(proc("vkGetDeviceProcAddr"));
  if (!enumerate || !properties2 || !memoryProperties || !createDevice || !gdpa) {
    why = "Vulkan: a 1.1 entry point is missing";
    return false;
  }
  uint32_t count = 16;
  vk::PhysicalDevice devices[16];
  enumerate(v->instance, &count, devices);
  vk::PhysicalDevice pd = nullptr;
  for (uint32_t i = 0; i < count && !pd; i++) {
    vk::PhysicalDeviceIDProperties id{vk::PHYSICAL_DEVICE_ID_PROPERTIES, nullptr, {}, {}, {}, 0, 0};
    vk::PhysicalDeviceProperties2 p2{vk::PHYSICAL_DEVICE_PROPERTIES_2, &id, {}};
    properties2(devices[i], &p2);
    if (!memcmp(id.deviceUUID, want, 16)) pd = devices[i];
  }
  if (!pd) {
    why = "Vulkan: none of its " + std::to_string(count) + " devices is " + uuid;
    return false;
  }
  float priority = 1;
  vk::DeviceQueueCreateInfo queue{vk::DEVICE_QUEUE_CREATE_INFO, nullptr, 0, 0, 1, &priority};
  const char* ext[] = {"VK_KHR_external_memory_fd"};
  vk::DeviceCreateInfo dci{vk::DEVICE_CREATE_INFO, nullptr, 0, 1, &queue, 0, nullptr, 1, ext, nullptr};
  if ((r = createDevice(pd, &dci, nullptr, &v->device)) != vk::SUCCESS) {
    why = "Vulkan: no device with VK_KHR_external_memory_fd (" + std::to_string(r) + ")";
    v->device = nullptr;
    return false;
  }
  v->destroyDevice = reinterpret_cast<vk::DestroyDevice>(gdpa(v->device, "vkDestroyDevice"));
  v->freeMemory = reinterpret_cast<vk::FreeMemory>(gdpa(v->device, "vkFreeMemory"));
  v->unmapMemory = reinterpret_cast<vk::UnmapMemory>(gdpa(v->device, "vkUnmapMemory"));
  auto allocate = reinterpret_cast<vk::AllocateMemory>(gdpa(v->device, "vkAllocateMemory"));
  auto mapMemory = reinterpret_cast<vk::MapMemory>(gdpa(v->device, "vkMapMemory"));
  if (!v->destroyDevice || !v->freeMemory || !v->unmapMemory || !allocate || !mapMemory) {
    why = "Vulkan: a device entry point is missing";
    return false;
  }
  vk::PhysicalDeviceMemoryProperties mp{};
  memoryProperties(pd, &mp);
  // Device-local and host-visible first, then any host-visible type the import takes.
  std::vector<uint32_t> types;
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t t = 0; t < mp.memoryTypeCount && t < 32; t++) {
      vk::Flags f = mp.memoryTypes[t].propertyFlags;
      bool local = f & vk::MEMORY_PROPERTY_DEVICE_LOCAL;
      // Coherent only: nothing here flushes or invalidates mapped ranges.
      vk::Flags wanted = vk::MEMORY_PROPERTY_HOST_VISIBLE | vk::MEMORY_PROPERTY_HOST_COHERENT;
      if ((f & wanted) == wanted && local == (pass == 0)) types.push_back(t);
    }
  int chosen = -1;
  std::vector<uint8_t*> mapped;  // into m only once all are: until then v unmaps them
  for (int fd : fds) {
    void* p = nullptr;
    for (size_t k = 0; k < types.size() && !p; k++) {
      uint32_t t = chosen >= 0 ? static_cast<uint32_t>(chosen) : types[k];
      int dup_fd = dup(fd);  // a successful import owns it
      vk::ImportMemoryFdInfoKHR import{vk::IMPORT_MEMORY_FD_INFO_KHR, nullptr, vk::EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD, dup_fd};
      vk::MemoryAllocateInfo mai{vk::MEMORY_ALLOCATE_INFO, &import, bytes, t};
      vk::DeviceMemory mem = 0;
      if ((r = allocate(v->device, &mai, nullptr, &mem)) != vk::SUCCESS) {
        close(dup_fd);
        if (chosen >= 0) break;
        continue;
      }
      if ((r = mapMemory(v->device, mem, 0, bytes, 0, &p)) != vk::SUCCESS) {
        v->freeMemory(v->device, mem, nullptr);
        p = nullptr;
        if (chosen >= 0) break;
        continue;
      }
      v->memories.push_back(mem);
      chosen = static_cast<int>(t);
    }
    if (!p) {
      why = "Vulkan: the exported memory would not import and map as any host-visible type (" + std::to_string(r) + ")";
      return false;
    }
    mapped.push_back(static_cast<uint8_t*>(p));
  }
  m.chunks = std::move(mapped);
  m.vulkan = std::move(v);
  return true;
}

// A read through a write-combining mapping: streaming loads, the four of a
// 64-byte line issued before any store (ordinary loads are one PCIe round
// trip each: 0.06 GB/s against 0.58 GB/s on the H200 hosts,
// test/gpu/probes/bar_routes.c; storing each load before the next read
// 4 KiB in 32 us, the four in flight in 14 us).
__attribute__((target("sse4.1"))) void StreamRead(uint8_t* dst, const uint8_t* src, size_t n) {
#define load(at) _mm_stream_load_si128(reinterpret_cast<__m128i*>(const_cast<uint8_t*>(src + (at))))
#define store(at, v) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (at)), (v))
  size_t head = (16 - reinterpret_cast<uintptr_t>(src) % 16) % 16;
  if (head > n) head = n;
  for (size_t i = 0; i < head; i++) dst[i] = static_cast<const volatile uint8_t*>(src)[i];
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = load(i), b = load(i + 16), c = load(i + 32), d = load(i + 48);
    store(i, a);
    store(i + 16, b);
    store(i + 32, c);
    store(i + 48, d);
  }
  for (; i + 16 <= n; i += 16) store(i, load(i));
  for (; i < n; i++) dst[i] = static_cast<const volatile uint8_t*>(src)[i];
#undef load
#undef store
}

Mapping* Find(const Napi::CallbackInfo& info, uint32_t at) {
  auto it = mappings.find(info[at].As<Napi::Number>().Uint32Value());
  if (it == mappings.end()) {
    Napi::Error::New(info.Env(), "no such mapping").ThrowAsJavaScriptException();
    return nullptr;
  }
  return it->second.get();
}

// Whether [offset, offset + length) lies within the chunks laid end to end;
// thrown as a RangeError where not.
bool Within(const Napi::Env& env, const Mapping& m, uint64_t offset, uint64_t length) {
  if (offset + length >= offset && offset + length <= m.chunks.size() * m.chunkBytes) return true;
  Napi::RangeError::New(env, "beyond the mapped chunks").ThrowAsJavaScriptException();
  return false;
}

// Calls fn(chunk pointer, bytes, position in the caller's buffer) for each
// piece of [offset, offset + length) of the chunks laid end to end (Within).
template <typename Fn>
void EachPiece(Mapping& m, uint64_t offset, uint64_t length, Fn fn) {
  for (uint64_t done = 0; done < length;) {
    uint64_t at = offset + done;
    uint64_t in = at % m.chunkBytes;
    uint64_t n = std::min<uint64_t>(length - done, m.chunkBytes - in);
    fn(m.chunks[at / m.chunkBytes] + in, n, done);
    done += n;
  }
}

}  // namespace

Napi::Value BarMap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray() || !info[1].IsNumber() || !info[2].IsString()) {
    Napi::TypeError::New(env, "barMap(fds, chunkBytes, uuid, routes?)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array list = info[0].As<Napi::Array>();
  std::vector<int> fds;
  for (uint32_t i = 0; i < list.Length(); i++) fds.push_back(list.Get(i).As<Napi::Number>().Int32Value());
  size_t bytes = static_cast<size_t>(info[1].As<Napi::Number>().Int64Value());
  std::string uuid = info[2].As<Napi::String>().Utf8Value();
  std::vector<std::string> routes = {"mmap", "vulkan"};
  if (info[3].IsArray()) {
    routes.clear();
    Napi::Array r = info[3].As<Napi::Array>();
    for (uint32_t i = 0; i < r.Length(); i++) routes.push_back(r.Get(i).As<Napi::String>().Utf8Value());
  }
  std::vector<std::string> tried;
  std::unique_ptr<Mapping> m;
  for (const std::string& route : routes) {
    auto attempt = std::make_unique<Mapping>();
    attempt->chunkBytes = bytes;
    std::string why;
    bool ok = route == "mmap" ? MapFds(fds, bytes, *attempt, why) : route == "vulkan" ? MapVulkan(fds, bytes, uuid, *attempt, why) : false;
    if (ok) {
      attempt->route = route;
      m = std::move(attempt);
      break;
    }
    tried.push_back(why.empty() ? route + ": no such route" : why);
  }
  if (!m) {
    tried.push_back(access("/dev/gdrdrv", F_OK) == 0 ? "gdrcopy: /dev/gdrdrv is loaded, but gpuckpt does not drive it yet"
                                                      : "gdrcopy: no /dev/gdrdrv (its module is not loaded)");
    Napi::Object out = Napi::Object::New(env);
    Napi::Array t = Napi::Array::New(env, tried.size());
    for (uint32_t i = 0; i < tried.size(); i++) t.Set(i, tried[i]);
    out.Set("tried", t);
    return out;
  }
  uint32_t id = nextId++;
  Napi::Object out = Napi::Object::New(env);
  out.Set("id", id);
  out.Set("route", m->route);
  mappings[id] = std::move(m);
  return out;
}

Napi::Value BarRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Mapping* m = Find(info, 0);
  if (!m) return env.Undefined();
  uint64_t offset = static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value());
  uint64_t length = static_cast<uint64_t>(info[2].As<Napi::Number>().Int64Value());
  if (!Within(env, *m, offset, length)) return env.Undefined();
  Napi::Buffer<uint8_t> out = Napi::Buffer<uint8_t>::New(env, length);
  EachPiece(*m, offset, length, [&](uint8_t* p, uint64_t n, uint64_t at) {
    if (m->vulkan)
      StreamRead(out.Data() + at, p, n);
    else
      memcpy(out.Data() + at, p, n);
  });
  return out;
}

Napi::Value BarWrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Mapping* m = Find(info, 0);
  if (!m) return env.Undefined();
  uint64_t offset = static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value());
  Napi::Uint8Array data = info[2].As<Napi::Uint8Array>();
  if (!Within(env, *m, offset, data.ByteLength())) return env.Undefined();
  EachPiece(*m, offset, data.ByteLength(), [&](uint8_t* p, uint64_t n, uint64_t at) { memcpy(p, data.Data() + at, n); });
  _mm_sfence();  // write-combined stores leave the CPU before the application runs again
  return env.Undefined();
}

Napi::Value BarUnmap(const Napi::CallbackInfo& info) {
  mappings.erase(info[0].As<Napi::Number>().Uint32Value());
  return info.Env().Undefined();
}

}  // namespace gpuckpt
