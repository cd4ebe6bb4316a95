// The host's Unix sockets as the kernel's sock_diag reports them: each
// socket's inode with its peer's and its bound name, which /proc/net/unix
// does not give. A checkpoint needs the peers to tell a socket to a process
// outside the job (CRIU cannot restore that connection) from one inside.
#pragma once

#include <napi.h>

namespace gpuckpt {

// unixSockets(): { inode, peer, name, type, state }[] (peer 0: none;
// name '' when unbound; an abstract name starts with '@'). Throws an Error
// whose code is the errno name when the kernel has no sock_diag.
Napi::Value UnixSockets(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
