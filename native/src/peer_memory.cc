#include "peer_memory.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "driver_api.h"

namespace gpuckpt {

namespace {

class PeerChunksWorker : public Napi::AsyncWorker {
 public:
  PeerChunksWorker(Napi::Env env, std::string uuid, uint64_t chunk, uint32_t count)
      : Napi::AsyncWorker(env, "gpuckpt.createPeerChunks"),
        deferred_(Napi::Promise::Deferred::New(env)), uuid_(std::move(uuid)), chunk_(chunk), count_(count) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    const Driver& d = driver();
    CUdevice dev;
    if (!d.ok || !d.mem_create || !d.mem_export || !d.mem_release || !DeviceByUuid(uuid_, &dev)) {
      result_ = -1;
      return;
    }
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    fds_.reserve(count_);
    for (uint32_t i = 0; i < count_ && result_ == CUDA_SUCCESS; i++) {
      CUmemGenericAllocationHandle h;
      int fd = -1;
      result_ = d.mem_create(&h, chunk_, &prop, 0);
      if (result_ != CUDA_SUCCESS) break;
      result_ = d.mem_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      d.mem_release(h);  // the fd holds the memory from here on
      if (result_ == CUDA_SUCCESS) fds_.push_back(fd);
    }
    if (result_ != CUDA_SUCCESS) {
      for (int fd : fds_) close(fd);
      fds_.clear();
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (result_ != CUDA_SUCCESS) {
      Napi::Error e = Napi::Error::New(env, result_ < 0 ? "no CUDA driver, or no GPU " + uuid_
                                                        : "cannot allocate on GPU " + uuid_ + " (CUresult " +
                                                              std::to_string(result_) + ")");
      e.Set("cuResult", Napi::Number::New(env, result_));
      deferred_.Reject(e.Value());
      return;
    }
    Napi::Array out = Napi::Array::New(env, fds_.size());
    for (uint32_t i = 0; i < fds_.size(); i++) out.Set(i, Napi::Number::New(env, fds_[i]));
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string uuid_;
  uint64_t chunk_;
  uint32_t count_;
  int result_ = CUDA_SUCCESS;
  std::vector<int> fds_;
};

}  // namespace

Napi::Value CreatePeerChunks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber()) {
    Napi::TypeError::New(env, "createPeerChunks(uuid, chunkSize, count)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* w = new PeerChunksWorker(env, info[0].As<Napi::String>().Utf8Value(),
                                 static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value()),
                                 info[2].As<Napi::Number>().Uint32Value());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace gpuckpt
