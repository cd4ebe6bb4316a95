// gpuckpt's native addon: the control-protocol client (with SCM_RIGHTS),
// shared staging memory, and the driver probe. Kept thin: protocol structs
// in, plain JS objects out; all policy lives in TypeScript.
#include <napi.h>

#include "child_wait.h"
#include "driver_checkpoint.h"
#include "driver_probe.h"
#include "file_writeback.h"
#include "gpu_memory.h"
#include "gpuckpt_protocol.h"
#include "host_digest.h"
#include "bar_map.h"
#include "byte_planes.h"
#include "stored_frame.h"
#include "peer_memory.h"
#include "scratch_mount.h"
#include "session.h"
#include "shared_memory.h"
#include "unix_sockets.h"

namespace gpuckpt {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Session", Session::Init(env));
  exports.Set("mapFiles", Napi::Function::New(env, MapFiles, "mapFiles"));
  exports.Set("unmapFiles", Napi::Function::New(env, UnmapFiles, "unmapFiles"));
  exports.Set("mapShared", Napi::Function::New(env, MapShared, "mapShared"));
  exports.Set("unmapShared", Napi::Function::New(env, UnmapShared, "unmapShared"));
  exports.Set("viewAt", Napi::Function::New(env, ViewAt, "viewAt"));
  exports.Set("closeFd", Napi::Function::New(env, CloseFd, "closeFd"));
  exports.Set("setBlocking", Napi::Function::New(env, SetBlocking, "setBlocking"));
  exports.Set("growPipe", Napi::Function::New(env, GrowPipe, "growPipe"));
  exports.Set("endOutput", Napi::Function::New(env, EndOutput, "endOutput"));
  exports.Set("makeFifo", Napi::Function::New(env, MakeFifo, "makeFifo"));
  exports.Set("createMemfd", Napi::Function::New(env, CreateMemfd, "createMemfd"));
  exports.Set("probeDriver", Napi::Function::New(env, ProbeDriver, "probeDriver"));
  exports.Set("driverCheckpoint", Napi::Function::New(env, DriverCheckpoint, "driverCheckpoint"));
  exports.Set("listGpus", Napi::Function::New(env, ListGpus, "listGpus"));
  exports.Set("warmDriver", Napi::Function::New(env, WarmDriver, "warmDriver"));
  exports.Set("gpuMemory", Napi::Function::New(env, GpuMemory, "gpuMemory"));
  exports.Set("processGpuMemory", Napi::Function::New(env, ProcessGpuMemory, "processGpuMemory"));
  exports.Set("createPeerChunks", Napi::Function::New(env, CreatePeerChunks, "createPeerChunks"));
  exports.Set("barMap", Napi::Function::New(env, BarMap, "barMap"));
  exports.Set("barRead", Napi::Function::New(env, BarRead, "barRead"));
  exports.Set("barWrite", Napi::Function::New(env, BarWrite, "barWrite"));
  exports.Set("barUnmap", Napi::Function::New(env, BarUnmap, "barUnmap"));
  exports.Set("waitChild", Napi::Function::New(env, WaitChild, "waitChild"));
  exports.Set("startWriteback", Napi::Function::New(env, StartWriteback, "startWriteback"));
  exports.Set("hostBlockDigests", Napi::Function::New(env, HostBlockDigests, "hostBlockDigests"));
  exports.Set("byteplanes", Napi::Function::New(env, BytePlanes, "byteplanes"));
  exports.Set("storedZstdFrame", Napi::Function::New(env, StoredZstdFrame, "storedZstdFrame"));
  exports.Set("mountHugeTmpfs", Napi::Function::New(env, MountHugeTmpfs, "mountHugeTmpfs"));
  exports.Set("unmountLazy", Napi::Function::New(env, UnmountLazy, "unmountLazy"));
  exports.Set("unixSockets", Napi::Function::New(env, UnixSockets, "unixSockets"));
  exports.Set("protocolVersion", Napi::Number::New(env, GPCK_PROTOCOL_VERSION));
  return exports;
}

}  // namespace gpuckpt

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return gpuckpt::Init(env, exports); }

NODE_API_MODULE(gpuckpt_native, InitModule)
