#include "shared_memory.h"

#include "js_values.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gpuckpt {

namespace {

struct Mapping {
  void* base;
  size_t size;
};

// Type tag: an ArrayBuffer is only unmapped by the finalizer that made it.
const napi_type_tag kMappingTag = {0x6770636b70743031ULL, 0x6d617070696e6721ULL};

}  // namespace

// V8 (Node 20) cannot hold an external ArrayBuffer above 4 GiB; callers map
// larger memory in windows.
constexpr uint64_t kMaxView = 1ULL << 32;

// mapFd(fd, size, offset = 0): ArrayBuffer over a MAP_SHARED mapping of
// [offset, offset + size) of fd; offset page-aligned, size <= 4 GiB.
Napi::Value MapFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = info[0].As<Napi::Number>().Int32Value();
  uint64_t size = ToU64(info[1]);
  uint64_t offset = info.Length() > 2 ? ToU64(info[2]) : 0;
  if (size == 0 || size > kMaxView || offset % static_cast<uint64_t>(sysconf(_SC_PAGESIZE))) {
    ErrnoError(env, "mapFd", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    ErrnoError(env, "mapFd", errno).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* m = new Mapping{p, size};
  auto buf = Napi::ArrayBuffer::New(env, p, size, [](Napi::Env, void*, Mapping* m) {
    munmap(m->base, m->size);
    delete m;
  }, m);
  buf.TypeTag(&kMappingTag);
  return buf;
}

Napi::Value CloseFd(const Napi::CallbackInfo& info) {
  close(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

// createMemfd(size): a fresh memfd (tests and the restore path use it).
Napi::Value CreateMemfd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t size = ToU64(info[0]);
  int fd = memfd_create("gpuckpt", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) < 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    ErrnoError(env, "createMemfd", err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Number::New(env, fd);
}

}  // namespace gpuckpt
