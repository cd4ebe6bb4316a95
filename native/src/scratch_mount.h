// A private tmpfs for a restore's scratch pages, mounted with huge pages:
// filling a tmpfs file page by page inserts 4 KiB at a time under the
// file's locks, about 4 GB/s on 31 threads, and 2 MiB pages lift that
// tenfold (test/gpu/probes/tmpfs_pages.c). Needs CAP_SYS_ADMIN; the caller
// falls back to a plain directory where the mount is refused.
#pragma once

#include <napi.h>

namespace gpuckpt {

// mountHugeTmpfs(path, bytes): a tmpfs of at most bytes (rounded up to
// 2 MiB) on the directory path, mode 0700, huge=always, nosuid, nodev,
// noexec. Throws with the errno (EPERM where the caller may not mount).
Napi::Value MountHugeTmpfs(const Napi::CallbackInfo& info);

// unmountLazy(path): detaches the mount on path (MNT_DETACH: a reader still
// holding a file keeps it until it closes). Throws with the errno (EINVAL
// where path is no mount point).
Napi::Value UnmountLazy(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
