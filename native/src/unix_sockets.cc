#include "unix_sockets.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "js_values.h"

namespace gpuckpt {

namespace {

struct UnixSocket {
  uint32_t inode, peer;
  uint8_t type, state;
  std::string name;
};

// One UNIX_DIAG message into out.
void Parse(const nlmsghdr* h, std::vector<UnixSocket>& out) {
  auto* m = static_cast<const unix_diag_msg*>(NLMSG_DATA(h));
  UnixSocket s{m->udiag_ino, 0, m->udiag_type, m->udiag_state, ""};
  int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
  for (auto* a = reinterpret_cast<const rtattr*>(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(uint32_t)) {
      s.peer = *static_cast<const uint32_t*>(RTA_DATA(a));
    } else if (a->rta_type == UNIX_DIAG_NAME && RTA_PAYLOAD(a) > 0) {
      const char* n = static_cast<const char*>(RTA_DATA(a));
      size_t nlen = RTA_PAYLOAD(a);
      s.name = n[0] ? std::string(n, strnlen(n, nlen)) : "@" + std::string(n + 1, nlen - 1);
    }
  }
  out.push_back(std::move(s));
}

// All of the host's Unix sockets, or -errno.
int Dump(std::vector<UnixSocket>& out) {
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return -errno;
  struct {
    nlmsghdr h;
    unix_diag_req r;
  } req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.r.sdiag_family = AF_UNIX;
  req.r.udiag_states = ~0u;
  req.r.udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER;
  if (send(fd, &req, sizeof(req), 0) < 0) {
    int err = -errno;
    close(fd);
    return err;
  }
  std::vector<char> buf(64 * 1024);
  for (;;) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = -errno;
      close(fd);
      return err;
    }
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        close(fd);
        return 0;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        close(fd);
        return e->error ? e->error : -EPROTO;
      }
      if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) Parse(h, out);
    }
  }
}

}  // namespace

Napi::Value UnixSockets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<UnixSocket> all;
  int err = Dump(all);
  if (err) {
    ErrnoError(env, "sock_diag", -err, false).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array out = Napi::Array::New(env, all.size());
  for (size_t i = 0; i < all.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("inode", Napi::Number::New(env, all[i].inode));
    o.Set("peer", Napi::Number::New(env, all[i].peer));
    o.Set("name", Napi::String::New(env, all[i].name));
    o.Set("type", Napi::Number::New(env, all[i].type));
    o.Set("state", Napi::Number::New(env, all[i].state));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

}  // namespace gpuckpt
