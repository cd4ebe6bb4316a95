#include "shared_memory.h"

#include "js_values.h"
#include "address_reserve.h"
#include "page_drop.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace gpuckpt {

namespace {

struct Mapping {
  void* base;  // null once unmapFiles unmapped it
  size_t size;
};

// Mappings by address, for unmapFiles; workers map and unmap on their own threads.
std::mutex mappings_lock;
std::unordered_map<void*, Mapping*> mappings;

// Type tag: an ArrayBuffer is only unmapped by the finalizer that made it.
const napi_type_tag kMappingTag = {0x6770636b70743031ULL, 0x6d617070696e6721ULL};

}  // namespace

// V8 (Node 20) cannot hold an external ArrayBuffer above 4 GiB; callers map
// larger memory in windows.
constexpr uint64_t kMaxView = 1ULL << 32;

namespace {

// Maps [offset, offset+span) of the files laid end to end at a fresh
// address (*base); 0 or an errno value, nothing left mapped on failure.
int MapFileRange(const Napi::Array& fds, uint64_t file_bytes, uint64_t offset, uint64_t span, uint8_t** base) {
  auto* at_base = static_cast<uint8_t*>(gp_reserve_aligned(span, offset));
  if (at_base == MAP_FAILED) return errno;
  for (uint64_t at = offset; at < offset + span;) {
    uint64_t file = at / file_bytes, in_file = at % file_bytes;
    uint64_t n = std::min(file_bytes - in_file, offset + span - at);
    int fd = fds.Get(static_cast<uint32_t>(file)).As<Napi::Number>().Int32Value();
    if (mmap(at_base + (at - offset), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(in_file)) == MAP_FAILED) {
      int err = errno;
      munmap(at_base, span);
      return err;
    }
    at += n;
  }
  *base = at_base;
  return 0;
}

// Whole staging mapped once for every thread (mapShared): base -> bytes.
std::mutex shared_lock;
std::map<uintptr_t, uint64_t> shared_maps;

bool ValidFds(const Napi::Array& fds) {
  for (uint32_t i = 0; i < fds.Length(); i++)
    if (!fds.Get(i).IsNumber()) return false;
  return true;
}

}  // namespace

// mapFiles(fds, fileBytes, size, offset, length): ArrayBuffer over
// [offset, offset+length) of files laid end to end (fileBytes each, the last
// one up to size): the shim's staging memfds, seen as one range as the shim
// sees them. offset page-aligned, length <= 4 GiB.
Napi::Value MapFiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array fds = info[0].As<Napi::Array>();
  uint64_t file_bytes = ToU64(info[1]);
  uint64_t size = ToU64(info[2]);
  uint64_t offset = ToU64(info[3]);
  uint64_t length = ToU64(info[4]);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (!ValidFds(fds) || length == 0 || length > kMaxView || offset % page || file_bytes == 0 || file_bytes % page ||
      offset + length > size || (size + file_bytes - 1) / file_bytes > fds.Length()) {
    ErrnoError(env, "mapFiles", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uint64_t span = (length + page - 1) / page * page;
  uint8_t* base = nullptr;
  if (int err = MapFileRange(fds, file_bytes, offset, span, &base)) {
    ErrnoError(env, "mapFiles", err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* m = new Mapping{base, span};
  {
    std::lock_guard<std::mutex> g(mappings_lock);
    mappings[base] = m;
  }
  auto buf = Napi::ArrayBuffer::New(env, base, length, [](Napi::Env, void* data, Mapping* m) {
    {
      std::lock_guard<std::mutex> g(mappings_lock);
      if (m->base) mappings.erase(data);
    }
    if (m->base) munmap(m->base, m->size);
    delete m;
  }, m);
  buf.TypeTag(&kMappingTag);
  return buf;
}

// unmapFiles(buffer): unmaps what mapFiles mapped now, not at a garbage
// collection that may never come (a mapping keeps unlinked files' memory),
// and detaches the buffer so that nothing reads through it again.
Napi::Value UnmapFiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArrayBuffer() || !info[0].As<Napi::ArrayBuffer>().CheckTypeTag(&kMappingTag)) {
    ErrnoError(env, "unmapFiles", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::ArrayBuffer buf = info[0].As<Napi::ArrayBuffer>();
  void* data = buf.Data();
  Mapping* m = nullptr;
  {
    std::lock_guard<std::mutex> g(mappings_lock);
    auto it = mappings.find(data);
    if (it != mappings.end()) {
      m = it->second;
      mappings.erase(it);
    }
  }
  if (m) {
    munmap(m->base, m->size);
    m->base = nullptr;  // the finalizer, at detach or later, only frees m
  }
  buf.Detach();
  return env.Undefined();
}

// mapShared(fds, fileBytes, size): the address (a BigInt) of one mapping
// of the whole of files laid end to end, for every thread of the process:
// codec workers take views of it (viewAt) instead of mapping windows of
// their own, and it goes at once (unmapShared).
Napi::Value MapShared(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array fds = info[0].As<Napi::Array>();
  uint64_t file_bytes = ToU64(info[1]);
  uint64_t size = ToU64(info[2]);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (!ValidFds(fds) || size == 0 || file_bytes == 0 || file_bytes % page || (size + file_bytes - 1) / file_bytes > fds.Length()) {
    ErrnoError(env, "mapShared", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uint64_t span = (size + page - 1) / page * page;
  uint8_t* base = nullptr;
  if (int err = MapFileRange(fds, file_bytes, 0, span, &base)) {
    ErrnoError(env, "mapShared", err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  {
    std::lock_guard<std::mutex> g(shared_lock);
    shared_maps[reinterpret_cast<uintptr_t>(base)] = span;
  }
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(base)));
}

// The pages dropped (on several threads) and the mapping gone, on a
// thread of libuv's pool: 0.2-0.3 s for 5 GB of staging on the H200 hosts,
// which held every other pool's close behind it on the main thread.
class UnmapWorker : public Napi::AsyncWorker {
 public:
  UnmapWorker(Napi::Env env, void* base, uint64_t span)
      : Napi::AsyncWorker(env, "gpuckpt.unmapShared"), deferred_(Napi::Promise::Deferred::New(env)), base_(base), span_(span) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    gp_drop_pages_parallel(base_, span_);
    munmap(base_, span_);
  }

  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  void* base_;
  uint64_t span_;
};

// unmapShared(address): a promise that what mapShared mapped is unmapped;
// the caller has made sure no thread still uses a view of it. No view of
// it can be taken once this returns. An address it did not map throws.
Napi::Value UnmapShared(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool lossless = false;
  uint64_t address = info[0].IsBigInt() ? info[0].As<Napi::BigInt>().Uint64Value(&lossless) : 0;
  uint64_t span = 0;
  {
    std::lock_guard<std::mutex> g(shared_lock);
    auto it = shared_maps.find(static_cast<uintptr_t>(address));
    if (lossless && it != shared_maps.end()) {
      span = it->second;
      shared_maps.erase(it);
    }
  }
  if (!span) {
    ErrnoError(env, "unmapShared", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* w = new UnmapWorker(env, reinterpret_cast<void*>(address), span);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// viewAt(address, length): an ArrayBuffer over [address, address+length),
// which must lie inside a live mapShared mapping; nothing is unmapped when
// it is collected.
Napi::Value ViewAt(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool lossless = false;
  uint64_t address = info[0].IsBigInt() ? info[0].As<Napi::BigInt>().Uint64Value(&lossless) : 0;
  uint64_t length = ToU64(info[1]);
  bool inside = false;
  if (lossless && length <= kMaxView) {
    std::lock_guard<std::mutex> g(shared_lock);
    auto it = shared_maps.upper_bound(static_cast<uintptr_t>(address));
    if (it != shared_maps.begin()) {
      --it;
      inside = address >= it->first && address + length <= it->first + it->second;
    }
  }
  if (!inside) {
    ErrnoError(env, "viewAt", EINVAL).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::ArrayBuffer::New(env, reinterpret_cast<void*>(address), length);
}

Napi::Value CloseFd(const Napi::CallbackInfo& info) {
  close(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

// setBlocking(fd, blocking): O_NONBLOCK cleared or set; whether fd was
// blocking before. A thread that writes a pipe node made non-blocking
// (standard output) waits in write(2) for its reader instead of spinning.
Napi::Value SetBlocking(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = info[0].As<Napi::Number>().Int32Value();
  bool blocking = info[1].ToBoolean();
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK) < 0) {
    ErrnoError(env, "setBlocking", errno).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Boolean::New(env, !(flags & O_NONBLOCK));
}

// endOutput(fd): fd pointed at /dev/null, so that the pipe or socket it was
// reaches end-of-file at its reader now: a stream's receiver waits for that
// end, which the process would otherwise give only at its exit. Nothing
// written to fd after goes anywhere, and no later open() can take its number.
Napi::Value EndOutput(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = info[0].As<Napi::Number>().Int32Value();
  int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd < 0 || dup2(null_fd, fd) < 0) {
    int err = errno;
    if (null_fd >= 0) close(null_fd);
    ErrnoError(env, "endOutput", err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  close(null_fd);
  return env.Undefined();
}

// growPipe(fd): the pipe's buffer raised to the most a user may give one
// (/proc/sys/fs/pipe-max-size, 1 MiB by default): an image streamed through
// 64 KiB moved at 0.6 GB/s, a wakeup of each end per 64 KiB. Returns the
// size it has after, 0 where fd is no pipe.
Napi::Value GrowPipe(const Napi::CallbackInfo& info) {
  int fd = info[0].As<Napi::Number>().Int32Value();
  int now = fcntl(fd, F_GETPIPE_SZ);
  if (now < 0) return Napi::Number::New(info.Env(), 0);
  int most = 1 << 20;
  if (FILE* f = fopen("/proc/sys/fs/pipe-max-size", "r")) {
    if (fscanf(f, "%d", &most) != 1) most = 1 << 20;
    fclose(f);
  }
  // Over the user's pipe quota the kernel refuses (EPERM): smaller then.
  for (int size = most; size > now; size /= 2)
    if (fcntl(fd, F_SETPIPE_SZ, size) >= 0) break;
  return Napi::Number::New(info.Env(), fcntl(fd, F_GETPIPE_SZ));
}

// createMemfd(size): a fresh memfd of size bytes, sealed against resizing:
// staging this process makes for the shim, which maps only files that
// cannot shrink under it (gpuckpt_protocol.h, GPCK_STAGING_GIVEN).
Napi::Value CreateMemfd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t size = ToU64(info[0]);
  int fd = memfd_create("gpuckpt-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) < 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    ErrnoError(env, "createMemfd", err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Number::New(env, fd);
}

// makeFifo(path): a named pipe only this user may open (mkfifo(3)).
Napi::Value MakeFifo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = info[0].As<Napi::String>().Utf8Value();
  if (mkfifo(path.c_str(), 0600) < 0) ErrnoError(env, "mkfifo " + path, errno).ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace gpuckpt
