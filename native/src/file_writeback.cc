#include "file_writeback.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

namespace gpuckpt {

namespace {

class WritebackWorker : public Napi::AsyncWorker {
 public:
  WritebackWorker(Napi::Env env, int fd)
      : Napi::AsyncWorker(env, "gpuckpt.startWriteback"), deferred_(Napi::Promise::Deferred::New(env)), fd_(fd) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    // The whole file (nbytes 0: to its end): pages already under writeback
    // or clean are skipped, so the ranges written since the last call are
    // what is queued, whatever order their writes completed in.
    if (sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE) != 0) errno_ = errno;
  }

  void OnOK() override {
    if (!errno_) {
      deferred_.Resolve(Env().Undefined());
      return;
    }
    const char* name = strerrorname_np(errno_);
    Napi::Error e = Napi::Error::New(Env(), std::string(name ? name : "EIO") + ": " + strerror(errno_) + ", sync_file_range");
    e.Set("code", Napi::String::New(Env(), name ? name : "EIO"));
    e.Set("errno", Napi::Number::New(Env(), -errno_));
    e.Set("syscall", Napi::String::New(Env(), "sync_file_range"));
    deferred_.Reject(e.Value());
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  int fd_;
  int errno_ = 0;
};

}  // namespace

Napi::Value StartWriteback(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "startWriteback(fd)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* w = new WritebackWorker(env, info[0].As<Napi::Number>().Int32Value());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace gpuckpt
