// GPU memory mapped into this process's address space, so that a tool
// reads and writes a running application's pool without entering its CUDA
// context (gpuckpt peek and poke). The shim exports the pool's chunks as
// POSIX fds (CHUNK_EXPORT); routes are tried in order and the first that
// maps them serves:
//   mmap    the fds themselves, where they are memory the kernel maps (a
//           memfd: the fake driver's; a dma-buf that allows it);
//   vulkan  imported into Vulkan (VK_KHR_external_memory_fd) as a
//           host-visible memory type of that GPU, device-local first: the
//           GPU's BAR, with no kernel module (libvulkan.so.1 opened here).
// Reads through the BAR use streaming loads; writes are write-combined and
// fenced. Measured routes: test/gpu/probes/bar_routes.c.
#pragma once

#include <napi.h>

namespace gpuckpt {

// barMap(fds, chunkBytes, uuid, routes = ['mmap', 'vulkan']): { id, route }
// or { tried: [why, ...] }. The fds stay the caller's.
Napi::Value BarMap(const Napi::CallbackInfo& info);
// barRead(id, offset, length): Buffer of the chunks laid end to end.
Napi::Value BarRead(const Napi::CallbackInfo& info);
// barWrite(id, offset, data): written, and fenced.
Napi::Value BarWrite(const Napi::CallbackInfo& info);
Napi::Value BarUnmap(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
