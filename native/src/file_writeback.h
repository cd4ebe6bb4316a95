// Starting the disk's writes of a file as it is written (an image's data),
// rather than when it is synced: sync_file_range(SYNC_FILE_RANGE_WRITE)
// queues the dirty pages for writeback and returns without waiting for them.
// Durability still comes from the fsync at commit.
#pragma once

#include <napi.h>

namespace gpuckpt {

// startWriteback(fd): Promise<void>, on the libuv pool (queueing writeback
// may block while the device's queue is full). Rejects with an Error whose
// code is the errno name ('EIO', 'ENOSYS', ...).
Napi::Value StartWriteback(const Napi::CallbackInfo& info);

}  // namespace gpuckpt
