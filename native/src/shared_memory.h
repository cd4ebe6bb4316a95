// Views of memory shared with the shim (the staging memfd received over the
// control socket): mapped once per JS realm (main thread or worker), exposed
// as an external ArrayBuffer whose finalizer unmaps it; or mapped once for
// every thread (mapShared), seen through views (viewAt).
#pragma once

#include <napi.h>

namespace gpuckpt {

Napi::Value MapFiles(const Napi::CallbackInfo& info);
Napi::Value UnmapFiles(const Napi::CallbackInfo& info);
Napi::Value MapShared(const Napi::CallbackInfo& info);
Napi::Value UnmapShared(const Napi::CallbackInfo& info);
Napi::Value ViewAt(const Napi::CallbackInfo& info);
Napi::Value CloseFd(const Napi::CallbackInfo& info);
Napi::Value SetBlocking(const Napi::CallbackInfo& info);
Napi::Value GrowPipe(const Napi::CallbackInfo& info);
Napi::Value EndOutput(const Napi::CallbackInfo& info);
Napi::Value CreateMemfd(const Napi::CallbackInfo& info);
Napi::Value MakeFifo(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
