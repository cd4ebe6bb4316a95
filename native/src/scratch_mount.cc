#include "scratch_mount.h"

#include <errno.h>
#include <sys/mount.h>

#include <string>

#include "js_values.h"

namespace gpuckpt {

namespace {
constexpr unsigned long long kHugePage = 2ull << 20;
}

Napi::Value MountHugeTmpfs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsString() || !info[1].IsNumber()) {
    Napi::TypeError::New(env, "mountHugeTmpfs(path, bytes)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string path = info[0].As<Napi::String>().Utf8Value();
  double bytes = info[1].As<Napi::Number>().DoubleValue();
  unsigned long long size = bytes > 0 ? (static_cast<unsigned long long>(bytes) + kHugePage - 1) / kHugePage * kHugePage : kHugePage;
  std::string options = "size=" + std::to_string(size) + ",mode=0700,huge=always";
  if (mount("gpuckpt-scratch", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) < 0)
    ErrnoError(env, "mount tmpfs on " + path, errno).ThrowAsJavaScriptException();
  return env.Undefined();
}

Napi::Value UnmountLazy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsString()) {
    Napi::TypeError::New(env, "unmountLazy(path)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string path = info[0].As<Napi::String>().Utf8Value();
  if (umount2(path.c_str(), MNT_DETACH) < 0) ErrnoError(env, "umount " + path, errno).ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace gpuckpt
