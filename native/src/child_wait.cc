#include "child_wait.h"

#include <errno.h>
#include <string.h>
#include <sys/wait.h>

namespace gpuckpt {

namespace {

class ChildWaitWorker : public Napi::AsyncWorker {
 public:
  ChildWaitWorker(Napi::Env env, pid_t pid)
      : Napi::AsyncWorker(env, "gpuckpt.waitChild"), deferred_(Napi::Promise::Deferred::New(env)), pid_(pid) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, pid_, &si, WEXITED) != 0) {
      if (errno != EINTR) {
        errno_ = errno;
        return;
      }
    }
    exited_ = si.si_code == CLD_EXITED;
    status_ = si.si_status;
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (errno_) {
      const char* name = strerrorname_np(errno_);
      Napi::Error e = Napi::Error::New(env, std::string(name ? name : "EIO") + ": " + strerror(errno_) + ", waitid");
      e.Set("code", Napi::String::New(env, name ? name : "EIO"));
      deferred_.Reject(e.Value());
      return;
    }
    Napi::Object end = Napi::Object::New(env);
    end.Set("code", exited_ ? Napi::Value(Napi::Number::New(env, status_)) : env.Null());
    end.Set("signal", exited_ ? env.Null() : Napi::Value(Napi::Number::New(env, status_)));
    deferred_.Resolve(end);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  pid_t pid_;
  int errno_ = 0;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace

Napi::Value WaitChild(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber() || info[0].As<Napi::Number>().Int32Value() <= 0) {
    Napi::TypeError::New(env, "waitChild(pid)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* w = new ChildWaitWorker(env, info[0].As<Napi::Number>().Int32Value());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace gpuckpt
