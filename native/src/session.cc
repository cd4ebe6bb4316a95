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

namespace gpuckpt {

namespace {

Napi::BigInt Big(Napi::Env env, uint64_t v) { return Napi::BigInt::New(env, v); }
Napi::Number Num(Napi::Env env, double v) { return Napi::Number::New(env, v); }

template <typename T>
void Append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

// args.ranges, an array of at most max entries; false with err set if not.
bool RangesArg(const Napi::Object& args, uint32_t max, const char* too_many, Napi::Array& out, std::string& err) {
  Napi::Value v = args.Get("ranges");
  if (!v.IsArray()) {
    err = "ranges must be an array";
    return false;
  }
  out = v.As<Napi::Array>();
  if (out.Length() > max) {
    err = too_many;
    return false;
  }
  return true;
}

// Builds the request payload from a JS object, per the protocol header.
bool EncodeRequest(uint16_t type, const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  switch (type) {
    case GPCK_HELLO:
      Append(out, gpck_hello_req{GPCK_PROTOCOL_VERSION, 0});
      return true;
    case GPCK_STATUS:
    case GPCK_DEVICES:
    case GPCK_RESUME:
    case GPCK_STAGING_UNMAP:
      return true;
    case GPCK_QUIESCE:
      Append(out, gpck_quiesce_req{static_cast<uint32_t>(ToU64(args.Get("leaseMs"))), static_cast<uint32_t>(ToU64(args.Get("flags")))});
      return true;
    case GPCK_LIST_ALLOCS:
      Append(out, gpck_list_req{ToU64(args.Get("start")), static_cast<uint32_t>(ToU64(args.Get("max"))), 0});
      return true;
    case GPCK_STAGING_MAP:
      Append(out, gpck_staging_req{ToU64(args.Get("size")), static_cast<uint32_t>(ToU64(args.Get("flags"))),
                                   static_cast<uint32_t>(ToU64(args.Get("files"))), ToU64(args.Get("fileBytes"))});
      return true;
    case GPCK_REMAP_POOL:
      return true;
    case GPCK_LIVE_WINDOW:
      Append(out, gpck_live_req{args.Get("open").ToBoolean().Value() ? 1u : 0u, 0});
      return true;
    case GPCK_SUSPEND_POOL:
    case GPCK_DROP_HELD: {
      gpck_suspend_req req{};
      req.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
      std::string image = args.Get("image").ToString().Utf8Value();
      if (image.size() >= sizeof(req.image)) {
        err = "image path too long";
        return false;
      }
      memcpy(req.image, image.c_str(), image.size() + 1);
      Append(out, req);
      return true;
    }
    case GPCK_COPY_OUT:
    case GPCK_COPY_IN: {
      Napi::Array ranges;
      if (!RangesArg(args, GPCK_MAX_COPY_RANGES, "too many ranges in one copy", ranges, err)) return false;
      Append(out, gpck_copy_req{ranges.Length(), static_cast<uint32_t>(ToU64(args.Get("flags")))});
      for (uint32_t i = 0; i < ranges.Length(); i++) {
        Napi::Object r = ranges.Get(i).As<Napi::Object>();
        Append(out, gpck_copy_range{static_cast<uint32_t>(ToU64(r.Get("device"))), 0, ToU64(r.Get("addr")),
                                    ToU64(r.Get("length")), ToU64(r.Get("stagingOffset"))});
      }
      return true;
    }
    case GPCK_BLOCK_DIGEST: {
      Napi::Array ranges;
      if (!RangesArg(args, GPCK_MAX_DIGEST_RANGES, "too many ranges in one digest request", ranges, err)) return false;
      Append(out, gpck_digest_req{static_cast<uint32_t>(ToU64(args.Get("device"))), ranges.Length(), ToU64(args.Get("blockSize"))});
      for (uint32_t i = 0; i < ranges.Length(); i++) {
        Napi::Object r = ranges.Get(i).As<Napi::Object>();
        Append(out, gpck_digest_range{ToU64(r.Get("addr")), ToU64(r.Get("length"))});
      }
      return true;
    }
    case GPCK_PEER_HOLD:
      Append(out, gpck_peer_req{static_cast<uint32_t>(ToU64(args.Get("device"))), static_cast<uint32_t>(ToU64(args.Get("flags"))),
                                ToU64(args.Get("first"))});
      return true;
    default:
      err = "unknown request type " + std::to_string(type);
      return false;
  }
}

template <typename T>
const T* As(const std::vector<uint8_t>& b) {
  return b.size() >= sizeof(T) ? reinterpret_cast<const T*>(b.data()) : nullptr;
}

Napi::Object DecodeDevice(Napi::Env env, const gpck_device_info& d) {
  Napi::Object o = Napi::Object::New(env);
  char uuid[40];
  const uint8_t* u = d.uuid;
  snprintf(uuid, sizeof(uuid), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
           u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  o.Set("ordinal", Num(env, d.ordinal));
  o.Set("name", Napi::String::New(env, std::string(d.name, strnlen(d.name, sizeof(d.name)))));
  o.Set("uuid", Napi::String::New(env, std::string("GPU-") + uuid));
  o.Set("totalMemory", Big(env, d.total_memory));
  o.Set("computeCapability", Napi::String::New(env, std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)));
  return o;
}

// Turns a reply payload into a plain JS object (64-bit addresses as BigInt).
Napi::Value DecodeReply(Napi::Env env, uint16_t type, const std::vector<uint8_t>& b) {
  Napi::Object o = Napi::Object::New(env);
  switch (type) {
    case GPCK_HELLO:
      if (auto* r = As<gpck_hello_rep>(b)) {
        o.Set("version", Num(env, r->version));
        o.Set("pid", Num(env, r->pid));
        o.Set("uid", Num(env, r->uid));
        o.Set("deviceCount", Num(env, r->device_count));
        o.Set("poolState", Num(env, r->pool_state));
        o.Set("driverVersion", Num(env, r->driver_version));
        o.Set("poolBase", Big(env, r->pool_base));
        o.Set("sliceSize", Big(env, r->slice_size));
        o.Set("quantum", Big(env, r->quantum));
        o.Set("chunkSize", Big(env, r->chunk_size));
      }
      break;
    case GPCK_STATUS:
      if (auto* r = As<gpck_status_rep>(b)) {
        o.Set("gateClosed", Napi::Boolean::New(env, r->gate_state == GPCK_GATE_CLOSED));
        o.Set("poolState", Num(env, r->pool_state));
        Napi::Object out = Napi::Object::New(env);
        out.Set("managed", Big(env, r->outside_managed));
        out.Set("streamOrdered", Big(env, r->outside_stream_ordered));
        out.Set("host", Big(env, r->outside_host));
        out.Set("unrouted", Big(env, r->outside_unrouted));
        o.Set("outsidePool", out);
        o.Set("gatedCalls", Big(env, r->gated_calls));
        Napi::Array devs = Napi::Array::New(env);
        for (uint32_t i = 0; i < r->device_count && i < GPCK_MAX_DEVICES; i++) {
          Napi::Object d = Napi::Object::New(env);
          d.Set("bytesInUse", Big(env, r->devices[i].bytes_in_use));
          d.Set("bytesMapped", Big(env, r->devices[i].bytes_mapped));
          d.Set("allocations", Num(env, static_cast<double>(r->devices[i].allocations)));
          d.Set("chunksInUse", Num(env, static_cast<double>(r->devices[i].chunks_in_use)));
          devs.Set(i, d);
        }
        o.Set("devices", devs);
        o.Set("heldImage", Napi::String::New(env, std::string(r->held_image, strnlen(r->held_image, sizeof(r->held_image)))));
      }
      break;
    case GPCK_DEVICES:
      if (auto* r = As<gpck_devices_rep>(b)) {
        Napi::Array devs = Napi::Array::New(env);
        for (uint32_t i = 0; i < r->count && i < GPCK_MAX_DEVICES; i++) devs.Set(i, DecodeDevice(env, r->devices[i]));
        o.Set("devices", devs);
      }
      break;
    case GPCK_QUIESCE:
      if (auto* r = As<gpck_quiesce_rep>(b)) {
        o.Set("drainNs", Num(env, static_cast<double>(r->drain_ns)));
        o.Set("syncNs", Num(env, static_cast<double>(r->sync_ns)));
      }
      break;
    case GPCK_RESUME:
      if (auto* r = As<gpck_resume_rep>(b)) o.Set("closedNs", Num(env, static_cast<double>(r->closed_ns)));
      break;
    case GPCK_LIST_ALLOCS:
      if (auto* r = As<gpck_list_rep>(b)) {
        uint32_t n = r->count;
        if (b.size() < sizeof(*r) + n * sizeof(gpck_alloc_entry)) n = 0;
        Napi::Array entries = Napi::Array::New(env, n);
        for (uint32_t i = 0; i < n; i++) {
          Napi::Object e = Napi::Object::New(env);
          e.Set("device", Num(env, r->entries[i].device));
          e.Set("addr", Big(env, r->entries[i].addr));
          e.Set("size", Big(env, r->entries[i].size));
          entries.Set(i, e);
        }
        o.Set("entries", entries);
        o.Set("more", Napi::Boolean::New(env, r->more != 0));
        o.Set("next", Big(env, r->next_addr));
      }
      break;
    case GPCK_STAGING_MAP:
      if (auto* r = As<gpck_staging_rep>(b)) {
        o.Set("size", Big(env, r->size));
        o.Set("registerNs", Num(env, static_cast<double>(r->register_ns)));
        o.Set("fileBytes", Big(env, r->file_bytes));
        o.Set("files", Num(env, r->files));
      }
      break;
    case GPCK_SUSPEND_POOL:
    case GPCK_REMAP_POOL:
      if (auto* r = As<gpck_pool_rep>(b)) {
        o.Set("bytes", Num(env, static_cast<double>(r->bytes)));
        o.Set("ns", Num(env, static_cast<double>(r->ns)));
        o.Set("bytesCopied", Num(env, static_cast<double>(r->bytes_copied)));
      }
      break;
    case GPCK_PEER_HOLD:
      if (auto* r = As<gpck_peer_rep>(b)) {
        o.Set("bytes", Num(env, static_cast<double>(r->bytes)));
        o.Set("ns", Num(env, static_cast<double>(r->ns)));
        o.Set("chunksHeld", Num(env, static_cast<double>(r->chunks_held)));
      }
      break;
    case GPCK_COPY_OUT:
    case GPCK_COPY_IN:
      if (auto* r = As<gpck_copy_rep>(b)) {
        o.Set("bytes", Num(env, static_cast<double>(r->bytes)));
        o.Set("ns", Num(env, static_cast<double>(r->ns)));
      }
      break;
    case GPCK_BLOCK_DIGEST:
      if (auto* r = As<gpck_digest_rep>(b)) {
        uint64_t n = r->blocks;
        if (n > GPCK_MAX_DIGESTS || b.size() != sizeof(*r) + n * sizeof(uint64_t)) break;
        // The digests as raw little-endian bytes: 8 per block.
        o.Set("digests", Napi::Buffer<uint8_t>::Copy(env, reinterpret_cast<const uint8_t*>(r->digests), n * 8));
        o.Set("ns", Num(env, static_cast<double>(r->ns)));
      }
      break;
    default:
      break;
  }
  return o;
}

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
                     {InstanceMethod("request", &Session::Request), InstanceMethod("close", &Session::Close)});
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

Napi::Value Session::Close(const Napi::CallbackInfo& info) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  return info.Env().Undefined();
}

}  // namespace gpuckpt
