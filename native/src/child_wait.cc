#include "child_wait.h"

#include <errno.h>
#include <string.h>
#include <sys/wait.h>

#include <thread>

#include "js_values.h"

namespace gpuckpt {

namespace {

struct ChildEnd {
  int err = 0;
  bool exited = false;
  int status = 0;
};

ChildEnd Reap(pid_t pid) {
  ChildEnd end;
  siginfo_t si;
  memset(&si, 0, sizeof si);
  while (waitid(P_PID, pid, &si, WEXITED) != 0) {
    if (errno != EINTR) {
      end.err = errno;
      return end;
    }
  }
  end.exited = si.si_code == CLD_EXITED;
  end.status = si.si_status;
  return end;
}

void Settle(Napi::Env env, Napi::Promise::Deferred* deferred, const ChildEnd& end) {
  if (end.err) {
    deferred->Reject(ErrnoError(env, "waitid", end.err).Value());
    return;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("code", end.exited ? Napi::Value(Napi::Number::New(env, end.status)) : env.Null());
  o.Set("signal", end.exited ? env.Null() : Napi::Value(Napi::Number::New(env, end.status)));
  deferred->Resolve(o);
}

}  // namespace

Napi::Value WaitChild(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber() || info[0].As<Napi::Number>().Int32Value() <= 0) {
    Napi::TypeError::New(env, "waitChild(pid)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  pid_t pid = info[0].As<Napi::Number>().Int32Value();
  auto* deferred = new Napi::Promise::Deferred(Napi::Promise::Deferred::New(env));
  Napi::Promise promise = deferred->Promise();
  // Keeps the event loop alive until the child has ended, as a wait should.
  auto tsfn = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}), "gpuckpt.waitChild", 0, 1);
  std::thread([tsfn, pid, deferred]() mutable {
    auto* end = new ChildEnd(Reap(pid));
    tsfn.BlockingCall(end, [deferred](Napi::Env env, Napi::Function, ChildEnd* e) {
      Settle(env, deferred, *e);
      delete e;
      delete deferred;
    });
    tsfn.Release();
  }).detach();
  return promise;
}

}  // namespace gpuckpt
