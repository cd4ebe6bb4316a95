#include "driver_checkpoint.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

namespace gpuckpt {

namespace {

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
  bool ok;
};

// Loaded once; the controller never creates a context, cuInit only.
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
    d.ok = d.init && d.init(0) == CUDA_SUCCESS;
  });
  return d;
}

std::string UuidString(const CUuuid& u) {
  char s[48];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

bool ParseUuid(const std::string& text, CUuuid* out) {
  std::string hex;
  for (char c : text.rfind("GPU-", 0) == 0 ? text.substr(4) : text)
    if (c != '-') hex += c;
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; i++) {
    unsigned v;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    out->bytes[i] = static_cast<char>(v);
  }
  return true;
}

class CheckpointWorker : public Napi::AsyncWorker {
 public:
  CheckpointWorker(Napi::Env env, std::string op, int pid, std::vector<CUcheckpointGpuPair> pairs)
      : Napi::AsyncWorker(env, "gpuckpt.driverCheckpoint"),
        deferred_(Napi::Promise::Deferred::New(env)), op_(std::move(op)), pid_(pid), pairs_(std::move(pairs)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    const Driver& d = driver();
    if (!d.ok || !d.lock || !d.checkpoint || !d.restore || !d.unlock || !d.get_state) {
      result_ = -1;
      return;
    }
    if (op_ == "state") {
      CUprocessState st{};
      result_ = d.get_state(pid_, &st);
      state_ = static_cast<int>(st);
    } else if (op_ == "lock") {
      CUcheckpointLockArgs a{};
      a.timeoutMs = 60000;
      result_ = d.lock(pid_, &a);
    } else if (op_ == "checkpoint") {
      CUcheckpointCheckpointArgs a{};
      result_ = d.checkpoint(pid_, &a);
    } else if (op_ == "restore") {
      CUcheckpointRestoreArgs a{};
      a.gpuPairs = pairs_.empty() ? nullptr : pairs_.data();
      a.gpuPairsCount = static_cast<unsigned>(pairs_.size());
      result_ = d.restore(pid_, &a);
    } else if (op_ == "unlock") {
      CUcheckpointUnlockArgs a{};
      result_ = d.unlock(pid_, &a);
    } else {
      SetError("unknown driver checkpoint operation " + op_);
    }
  }

  void OnOK() override {
    Napi::Object o = Napi::Object::New(Env());
    o.Set("result", Napi::Number::New(Env(), result_));
    if (op_ == "state") o.Set("state", Napi::Number::New(Env(), state_));
    deferred_.Resolve(o);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string op_;
  int pid_;
  std::vector<CUcheckpointGpuPair> pairs_;
  int result_ = 0;
  int state_ = 0;
};

}  // namespace

Napi::Value DriverCheckpoint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string op = info[0].As<Napi::String>().Utf8Value();
  int pid = info[1].As<Napi::Number>().Int32Value();
  std::vector<CUcheckpointGpuPair> pairs;
  if (info.Length() > 2 && info[2].IsArray()) {
    Napi::Array arr = info[2].As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length(); i++) {
      Napi::Object p = arr.Get(i).As<Napi::Object>();
      CUcheckpointGpuPair pair{};
      if (!ParseUuid(p.Get("from").ToString().Utf8Value(), &pair.oldUuid) ||
          !ParseUuid(p.Get("to").ToString().Utf8Value(), &pair.newUuid)) {
        Napi::TypeError::New(env, "gpu pair with a malformed UUID").ThrowAsJavaScriptException();
        return env.Undefined();
      }
      pairs.push_back(pair);
    }
  }
  auto* w = new CheckpointWorker(env, op, pid, std::move(pairs));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value ListGpus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array out = Napi::Array::New(env);
  const Driver& d = driver();
  int n = 0;
  if (!d.ok || !d.device_count || d.device_count(&n) != CUDA_SUCCESS) return out;
  for (int i = 0; i < n; i++) {
    CUdevice dev;
    char name[256] = {0};
    CUuuid uuid{};
    if (d.device_get(&dev, i) != CUDA_SUCCESS) continue;
    d.device_name(name, sizeof(name) - 1, dev);
    d.device_uuid(&uuid, dev);
    Napi::Object g = Napi::Object::New(env);
    g.Set("ordinal", Napi::Number::New(env, i));
    g.Set("name", Napi::String::New(env, name));
    g.Set("uuid", Napi::String::New(env, UuidString(uuid)));
    out.Set(static_cast<uint32_t>(i), g);
  }
  return out;
}

}  // namespace gpuckpt
