#include "session.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "gpuckpt_protocol.h"
#include "js_values.h"
#include "protocol_codec.h"

namespace gpuckpt {

namespace {

class RequestWorker : public Napi::AsyncWorker {
 public:
  RequestWorker(Napi::Env env, int fd, uint16_t type, uint32_t seq, std::vector<uint8_t> payload, uint32_t timeout_ms,
                std::vector<int> send_fds)
      : Napi::AsyncWorker(env, "gpuckpt.request"),
        deferred_(Napi::Promise::Deferred::New(env)),
        fd_(fd), type_(type), seq_(seq), timeout_ms_(timeout_ms), payload_(std::move(payload)), send_fds_(std::move(send_fds)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    timeval tv{static_cast<time_t>(timeout_ms_ / 1000), static_cast<suseconds_t>((timeout_ms_ % 1000) * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    gpck_header h{GPCK_MAGIC, GPCK_PROTOCOL_VERSION, type_, seq_, 0, static_cast<uint32_t>(payload_.size()), 0};
    iovec out[2] = {{&h, sizeof(h)}, {payload_.data(), payload_.size()}};
    msghdr m{};
    m.msg_iov = out;
    m.msg_iovlen = payload_.empty() ? 1 : 2;
    // The fds stay this process's: the kernel passes copies.
    std::vector<char> ctl(send_fds_.empty() ? 0 : CMSG_SPACE(sizeof(int) * send_fds_.size()));
    if (!send_fds_.empty()) {
      m.msg_control = ctl.data();
      m.msg_controllen = ctl.size();
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * send_fds_.size());
      memcpy(CMSG_DATA(c), send_fds_.data(), sizeof(int) * send_fds_.size());
    }
    if (sendmsg(fd_, &m, MSG_NOSIGNAL) < 0) {
      sys_errno_ = errno;
      return;
    }
    // Skip stale replies (a request that timed out earlier may answer late).
    for (;;) {
      reply_.resize(GPCK_MAX_MESSAGE);
      iovec in{reply_.data(), reply_.size()};
      union {
        char buf[CMSG_SPACE(sizeof(int) * GPCK_MAX_STAGING_FILES)];
        cmsghdr align;
      } ctl;
      msghdr r{};
      r.msg_iov = &in;
      r.msg_iovlen = 1;
      r.msg_control = ctl.buf;
      r.msg_controllen = sizeof(ctl.buf);
      ssize_t n = recvmsg(fd_, &r, MSG_CMSG_CLOEXEC);
      if (n < 0) {
        sys_errno_ = errno == EAGAIN ? ETIMEDOUT : errno;
        return;
      }
      if (n == 0) {
        sys_errno_ = ECONNRESET;
        return;
      }
      for (cmsghdr* c = CMSG_FIRSTHDR(&r); c; c = CMSG_NXTHDR(&r, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char* data = CMSG_DATA(c);
        for (size_t i = 0; i < count; i++) {
          int received;
          memcpy(&received, data + i * sizeof(int), sizeof(int));
          fds_received_.push_back(received);
        }
      }
      if (r.msg_flags & MSG_CTRUNC) {  // fds the kernel dropped (this process is out of fds): an unusable reply
        CloseReceived();
        sys_errno_ = EMFILE;
        return;
      }
      if (static_cast<size_t>(n) < sizeof(gpck_header)) {
        sys_errno_ = EPROTO;
        return;
      }
      gpck_header rh;
      memcpy(&rh, reply_.data(), sizeof(rh));
      if (rh.magic != GPCK_MAGIC || rh.payload_len != static_cast<size_t>(n) - sizeof(rh)) {
        sys_errno_ = EPROTO;
        return;
      }
      // seq 0 with an error: the shim refused the connection itself.
      if (rh.seq == 0 && rh.status < 0) {
        status_ = rh.status;
        return;
      }
      if (rh.seq != seq_ || rh.type != (type_ | GPCK_REPLY)) {
        CloseReceived();
        continue;
      }
      status_ = rh.status;
      error_text_ = rh.flags & GPCK_REPLY_ERROR_TEXT;
      reply_.erase(reply_.begin(), reply_.begin() + sizeof(rh));
      reply_.resize(rh.payload_len);
      return;
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (sys_errno_) {
      CloseReceived();
      deferred_.Reject(ErrnoError(env, "control socket", sys_errno_, true).Value());
      return;
    }
    if (status_ < 0) {
      CloseReceived();
      Napi::Error e = ErrnoError(env, "shim", -status_, false);
      // The driver call that failed, as the shim names it (GPCK_ERROR_TEXT_LEN).
      if (error_text_ && !reply_.empty() && reply_.size() <= GPCK_ERROR_TEXT_LEN && reply_.back() == 0)
        e.Set("detail", Napi::String::New(env, reinterpret_cast<const char*>(reply_.data())));
      deferred_.Reject(e.Value());
      return;
    }
    Napi::Value v = DecodeReply(env, type_, reply_);
    if (!fds_received_.empty()) {
      Napi::Array fds = Napi::Array::New(env, fds_received_.size());
      for (size_t i = 0; i < fds_received_.size(); i++) fds.Set(static_cast<uint32_t>(i), Napi::Number::New(env, fds_received_[i]));
      v.As<Napi::Object>().Set("fds", fds);
    }
    deferred_.Resolve(v);
  }

  void OnError(const Napi::Error& e) override {
    CloseReceived();
    deferred_.Reject(e.Value());
  }

 private:
  void CloseReceived() {
    for (int f : fds_received_) close(f);
    fds_received_.clear();
  }

  Napi::Promise::Deferred deferred_;
  int fd_;
  uint16_t type_;
  uint32_t seq_;
  uint32_t timeout_ms_;
  std::vector<uint8_t> payload_;
  std::vector<int> send_fds_;
  std::vector<uint8_t> reply_;
  int sys_errno_ = 0;
  int32_t status_ = 0;
  bool error_text_ = false;  // the reply's payload names the driver call that failed
  std::vector<int> fds_received_;
};

}  // namespace

Napi::Function Session::Init(Napi::Env env) {
  return DefineClass(env, "Session",
                     {InstanceMethod("request", &Session::Request), InstanceMethod("close", &Session::Close),
                      InstanceMethod("peerPid", &Session::PeerPid)});
}

// new Session(socketPath): connects; throws with errno on failure.
Session::Session(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Session>(info) {
  Napi::Env env = info.Env();
  std::string path = info[0].As<Napi::String>().Utf8Value();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    ErrnoError(env, "connect " + path, ENAMETOOLONG, true).ThrowAsJavaScriptException();
    return;
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    int err = errno;
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    ErrnoError(env, "connect " + path, err, true).ThrowAsJavaScriptException();
  }
}

Session::~Session() {
  if (fd_ >= 0) close(fd_);
}

// request(type, args, timeoutMs, fds?): Promise<object>. One at a time per
// session; fds (at most GPCK_MAX_STAGING_FILES) go along with SCM_RIGHTS.
Napi::Value Session::Request(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (fd_ < 0) {
    Napi::Error::New(env, "session is closed").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  uint16_t type = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  Napi::Object args = info[1].IsObject() ? info[1].As<Napi::Object>() : Napi::Object::New(env);
  uint32_t timeout = info[2].IsNumber() ? info[2].As<Napi::Number>().Uint32Value() : 0;
  std::vector<uint8_t> payload;
  std::string err;
  std::vector<int> fds;
  if (info[3].IsArray()) {
    Napi::Array a = info[3].As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length() && err.empty(); i++) {
      if (a.Get(i).IsNumber()) fds.push_back(a.Get(i).As<Napi::Number>().Int32Value());
      else err = "fds must be numbers";
    }
    if (fds.size() > GPCK_MAX_STAGING_FILES) err = "too many fds in one request";
  }
  if (!err.empty() || !EncodeRequest(type, args, payload, err)) {
    Napi::TypeError::New(env, err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* w = new RequestWorker(env, fd_, type, ++seq_, std::move(payload), timeout, std::move(fds));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// peerPid(): the PID, in this process's PID namespace, of the process that
// listens on the socket (SO_PEERCRED); 0 where the kernel cannot say (a
// peer in a PID namespace above ours).
Napi::Value Session::PeerPid(const Napi::CallbackInfo& info) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (fd_ < 0 || getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) return Napi::Number::New(info.Env(), 0);
  return Napi::Number::New(info.Env(), cred.pid);
}

Napi::Value Session::Close(const Napi::CallbackInfo& info) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  return info.Env().Undefined();
}

}  // namespace gpuckpt
