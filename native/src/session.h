// A connection to one shim's control socket. Requests run on the libuv
// thread pool (AsyncWorker) so the event loop never waits on the shim; the
// TypeScript layer sends one request at a time per session.
#pragma once

#include <napi.h>

namespace gpuckpt {

class Session : public Napi::ObjectWrap<Session> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit Session(const Napi::CallbackInfo& info);
  ~Session() override;

  int fd() const { return fd_; }

 private:
  Napi::Value Request(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value PeerPid(const Napi::CallbackInfo& info);

  int fd_ = -1;
  uint32_t seq_ = 0;
};

}  // namespace gpuckpt
