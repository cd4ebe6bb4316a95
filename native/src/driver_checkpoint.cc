#include "driver_checkpoint.h"

#include <string>
#include <vector>

#include "driver_api.h"

namespace gpuckpt {

namespace {

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

// driver() on the libuv pool; resolves once it is done (a second caller
// waits there for the first), whether the driver loaded or not.
class WarmWorker : public Napi::AsyncWorker {
 public:
  explicit WarmWorker(Napi::Env env) : Napi::AsyncWorker(env, "gpuckpt.warmDriver"), deferred_(Napi::Promise::Deferred::New(env)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override { driver(); }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }

 private:
  Napi::Promise::Deferred deferred_;
};

}  // namespace

Napi::Value WarmDriver(const Napi::CallbackInfo& info) {
  auto* w = new WarmWorker(info.Env());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

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
