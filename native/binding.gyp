{
  "targets": [
    {
      "target_name": "gpuckpt_native",
      "sources": ["src/addon.cc", "src/session.cc", "src/shared_memory.cc", "src/driver_probe.cc", "src/js_values.cc", "src/driver_api.cc", "src/driver_checkpoint.cc", "src/peer_memory.cc", "src/gpu_memory.cc", "src/host_digest.cc", "src/byte_planes.cc", "src/stored_frame.cc", "src/file_writeback.cc", "src/child_wait.cc", "src/unix_sockets.cc", "src/scratch_mount.cc", "src/uuid_text.cc", "src/bar_map.cc", "src/protocol_codec.gen.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "../protocol", "common", "<!(echo ${CUDA_HOME:-/usr/local/cuda})/include"],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=hidden"],
      "libraries": ["-ldl"]
    }
  ]
}
