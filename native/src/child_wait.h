// The end of a child this process did not spawn through libuv: the root of a
// tree `criu restore --restore-sibling` brought back, whose parent is then
// gpuckpt. libuv reaps only the children it started, so this one is waited
// for here, and its exit status is the job's.
#pragma once

#include <napi.h>

namespace gpuckpt {

// waitChild(pid): Promise<{ code: number | null, signal: number | null }>,
// reaping pid with waitid on a thread of its own: the job may run for days,
// and a thread of libuv's pool held that long would be missed by the
// restore's own requests. Rejects with code 'ECHILD' when pid is not a
// child of this process.
Napi::Value WaitChild(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
