// GPU memory the controller allocates for another process: where a migrate
// puts the pool on the GPU the process moves to (shim/control/peer_hold.h).
// Each chunk is made with the POSIX fd handle type, exported, and released
// at once: the fd alone keeps the memory, and later its contents, alive, so
// the process that receives it holds it whatever becomes of the controller.
// Needs no context (measured on H200, driver 580: test/gpu/probes/
// peer_fd_lifetime.c). Runs on the libuv pool: 512 chunks take 0.09 s.
#pragma once

#include <napi.h>

namespace gpuckpt {

// createPeerChunks(uuid, chunkSize, count): Promise<number[]>, one fd per
// chunk, the caller's to close. Rejects with an Error carrying cuResult
// (2: the GPU is out of memory; -1: no driver or no such GPU).
Napi::Value CreatePeerChunks(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
