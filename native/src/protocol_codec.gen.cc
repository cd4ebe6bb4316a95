// Generated from protocol/messages.mjs by protocol/generate.mjs: do not edit.
#include "protocol_codec.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "gpuckpt_protocol.h"
#include "js_values.h"
#include "uuid_text.h"

namespace gpuckpt {

namespace {

template <typename T>
void Append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

bool Encode_hello_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_hello_req v{};
  v.client_version = GPCK_PROTOCOL_VERSION;
  Append(out, v);
  return true;
}

bool Encode_quiesce_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_quiesce_req v{};
  v.lease_ms = static_cast<uint32_t>(ToU64(args.Get("leaseMs")));
  v.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
  Append(out, v);
  return true;
}

bool Encode_list_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_list_req v{};
  v.start_addr = static_cast<uint64_t>(ToU64(args.Get("start")));
  v.max_entries = static_cast<uint32_t>(ToU64(args.Get("max")));
  Append(out, v);
  return true;
}

bool Encode_staging_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_staging_req v{};
  v.size = static_cast<uint64_t>(ToU64(args.Get("size")));
  v.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
  v.files = static_cast<uint32_t>(ToU64(args.Get("files")));
  v.file_bytes = static_cast<uint64_t>(ToU64(args.Get("fileBytes")));
  Append(out, v);
  return true;
}

bool Encode_copy_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  Napi::Value rangesV = args.Get("ranges");
  if (!rangesV.IsArray()) {
    err = "ranges must be an array";
    return false;
  }
  Napi::Array ranges = rangesV.As<Napi::Array>();
  if (ranges.Length() > GPCK_MAX_COPY_RANGES) {
    err = "too many ranges in one copy";
    return false;
  }
  gpck_copy_req v{};
  v.count = ranges.Length();
  v.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
  Append(out, v);
  for (uint32_t i = 0; i < ranges.Length(); i++) {
    Napi::Object e = ranges.Get(i).As<Napi::Object>();
    gpck_copy_range w{};
    w.device = static_cast<uint32_t>(ToU64(e.Get("device")));
    w.addr = static_cast<uint64_t>(ToU64(e.Get("addr")));
    w.length = static_cast<uint64_t>(ToU64(e.Get("length")));
    w.staging_offset = static_cast<uint64_t>(ToU64(e.Get("stagingOffset")));
    Append(out, w);
  }
  return true;
}

bool Encode_suspend_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_suspend_req v{};
  v.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
  {
    std::string s = args.Get("image").ToString().Utf8Value();
    if (s.size() >= sizeof(v.image)) {
      err = "image path too long";
      return false;
    }
    memcpy(v.image, s.c_str(), s.size() + 1);
  }
  Append(out, v);
  return true;
}

bool Encode_digest_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  Napi::Value rangesV = args.Get("ranges");
  if (!rangesV.IsArray()) {
    err = "ranges must be an array";
    return false;
  }
  Napi::Array ranges = rangesV.As<Napi::Array>();
  if (ranges.Length() > GPCK_MAX_DIGEST_RANGES) {
    err = "too many ranges in one digest request";
    return false;
  }
  gpck_digest_req v{};
  v.device = static_cast<uint32_t>(ToU64(args.Get("device")));
  v.count = ranges.Length();
  v.block_size = static_cast<uint64_t>(ToU64(args.Get("blockSize")));
  Append(out, v);
  for (uint32_t i = 0; i < ranges.Length(); i++) {
    Napi::Object e = ranges.Get(i).As<Napi::Object>();
    gpck_digest_range w{};
    w.addr = static_cast<uint64_t>(ToU64(e.Get("addr")));
    w.length = static_cast<uint64_t>(ToU64(e.Get("length")));
    Append(out, w);
  }
  return true;
}

bool Encode_live_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_live_req v{};
  v.open = args.Get("open").ToBoolean().Value() ? 1u : 0u;
  Append(out, v);
  return true;
}

bool Encode_peer_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  Napi::Value runsV = args.Get("runs");
  if (!runsV.IsArray()) {
    err = "runs must be an array";
    return false;
  }
  Napi::Array runs = runsV.As<Napi::Array>();
  if (runs.Length() > GPCK_MAX_STAGING_FILES) {
    err = "more runs than fds one request carries";
    return false;
  }
  gpck_peer_req v{};
  v.device = static_cast<uint32_t>(ToU64(args.Get("device")));
  v.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
  v.first = static_cast<uint64_t>(ToU64(args.Get("first")));
  v.count = runs.Length();
  Append(out, v);
  for (uint32_t i = 0; i < runs.Length(); i++) {
    Napi::Object e = runs.Get(i).As<Napi::Object>();
    gpck_chunk_run w{};
    w.addr = static_cast<uint64_t>(ToU64(e.Get("addr")));
    w.chunks = static_cast<uint64_t>(ToU64(e.Get("chunks")));
    Append(out, w);
  }
  return true;
}

bool Encode_nccl_hold_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  Napi::Value targetsV = args.Get("targets");
  if (!targetsV.IsArray()) {
    err = "targets must be an array";
    return false;
  }
  Napi::Array targets = targetsV.As<Napi::Array>();
  if (targets.Length() > GPCK_MAX_COMMS) {
    err = "too many targets";
    return false;
  }
  gpck_nccl_hold_req v{};
  v.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
  v.count = targets.Length();
  Append(out, v);
  for (uint32_t i = 0; i < targets.Length(); i++) {
    Napi::Object e = targets.Get(i).As<Napi::Object>();
    gpck_nccl_target w{};
    w.key = static_cast<uint64_t>(ToU64(e.Get("key")));
    w.target = static_cast<uint64_t>(ToU64(e.Get("target")));
    Append(out, w);
  }
  return true;
}

bool Encode_nccl_rebuild_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_nccl_rebuild_req v{};
  v.key = static_cast<uint64_t>(ToU64(args.Get("key")));
  {
    Napi::Value b = args.Get("id");
    if (!b.IsBuffer() || b.As<Napi::Buffer<uint8_t>>().Length() != sizeof(v.id)) {
      err = "id must be a Buffer of 128 bytes";
      return false;
    }
    memcpy(v.id, b.As<Napi::Buffer<uint8_t>>().Data(), sizeof(v.id));
  }
  Append(out, v);
  return true;
}

bool Encode_framework_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_framework_req v{};
  v.timeout_ms = static_cast<uint32_t>(ToU64(args.Get("timeoutMs")));
  Append(out, v);
  return true;
}

bool Encode_chunk_export_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_chunk_export_req v{};
  v.addr = static_cast<uint64_t>(ToU64(args.Get("addr")));
  v.length = static_cast<uint64_t>(ToU64(args.Get("length")));
  Append(out, v);
  return true;
}

bool Encode_hold_put_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_hold_put_req v{};
  v.id = static_cast<uint64_t>(ToU64(args.Get("id")));
  v.start_time = static_cast<uint64_t>(ToU64(args.Get("startTime")));
  v.bytes = static_cast<uint64_t>(ToU64(args.Get("bytes")));
  v.first = static_cast<uint64_t>(ToU64(args.Get("first")));
  v.pid = static_cast<int32_t>(ToU64(args.Get("pid")));
  v.part = static_cast<uint32_t>(ToU64(args.Get("part")));
  v.flags = static_cast<uint32_t>(ToU64(args.Get("flags")));
  if (!UuidBytes(args.Get("uuid").ToString().Utf8Value(), v.uuid)) {
    err = "uuid must be a GPU UUID";
    return false;
  }
  Append(out, v);
  return true;
}

bool Encode_hold_take_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_hold_take_req v{};
  v.id = static_cast<uint64_t>(ToU64(args.Get("id")));
  v.first = static_cast<uint64_t>(ToU64(args.Get("first")));
  v.part = static_cast<uint32_t>(ToU64(args.Get("part")));
  v.count = static_cast<uint32_t>(ToU64(args.Get("count")));
  Append(out, v);
  return true;
}

bool Encode_hold_drop_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_hold_drop_req v{};
  v.id = static_cast<uint64_t>(ToU64(args.Get("id")));
  v.pid = static_cast<int32_t>(ToU64(args.Get("pid")));
  Append(out, v);
  return true;
}

bool Encode_hold_reclaim_req(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  gpck_hold_reclaim_req v{};
  v.bytes = static_cast<uint64_t>(ToU64(args.Get("bytes")));
  if (!UuidBytes(args.Get("uuid").ToString().Utf8Value(), v.uuid)) {
    err = "uuid must be a GPU UUID";
    return false;
  }
  Append(out, v);
  return true;
}

void Decode_hello_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_hello_rep)) return;
  const auto* r = reinterpret_cast<const gpck_hello_rep*>(b.data());
  o.Set("version", Napi::Number::New(env, static_cast<double>(r->version)));
  o.Set("pid", Napi::Number::New(env, static_cast<double>(r->pid)));
  o.Set("uid", Napi::Number::New(env, static_cast<double>(r->uid)));
  o.Set("deviceCount", Napi::Number::New(env, static_cast<double>(r->device_count)));
  o.Set("poolState", Napi::Number::New(env, static_cast<double>(r->pool_state)));
  o.Set("driverVersion", Napi::Number::New(env, static_cast<double>(r->driver_version)));
  o.Set("poolBase", Napi::BigInt::New(env, static_cast<uint64_t>(r->pool_base)));
  o.Set("sliceSize", Napi::BigInt::New(env, static_cast<uint64_t>(r->slice_size)));
  o.Set("quantum", Napi::BigInt::New(env, static_cast<uint64_t>(r->quantum)));
  o.Set("chunkSize", Napi::BigInt::New(env, static_cast<uint64_t>(r->chunk_size)));
}

void Decode_status_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_status_rep)) return;
  const auto* r = reinterpret_cast<const gpck_status_rep*>(b.data());
  Napi::Object outsidePool = Napi::Object::New(env);
  o.Set("gateClosed", Napi::Boolean::New(env, (r->gate_state) != 0));
  o.Set("poolState", Napi::Number::New(env, static_cast<double>(r->pool_state)));
  outsidePool.Set("managed", Napi::BigInt::New(env, static_cast<uint64_t>(r->outside_managed)));
  outsidePool.Set("streamOrdered", Napi::BigInt::New(env, static_cast<uint64_t>(r->outside_stream_ordered)));
  outsidePool.Set("host", Napi::BigInt::New(env, static_cast<uint64_t>(r->outside_host)));
  outsidePool.Set("unrouted", Napi::BigInt::New(env, static_cast<uint64_t>(r->outside_unrouted)));
  o.Set("gatedCalls", Napi::BigInt::New(env, static_cast<uint64_t>(r->gated_calls)));
  {
    uint32_t n = std::min<uint32_t>(r->device_count, GPCK_MAX_DEVICES);
    Napi::Array a = Napi::Array::New(env, n);
    for (uint32_t i = 0; i < n; i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("bytesInUse", Napi::BigInt::New(env, static_cast<uint64_t>((&r->devices[i])->bytes_in_use)));
      e.Set("bytesMapped", Napi::BigInt::New(env, static_cast<uint64_t>((&r->devices[i])->bytes_mapped)));
      e.Set("allocations", Napi::Number::New(env, static_cast<double>((&r->devices[i])->allocations)));
      e.Set("chunksInUse", Napi::Number::New(env, static_cast<double>((&r->devices[i])->chunks_in_use)));
      a.Set(i, e);
    }
    o.Set("devices", a);
  }
  o.Set("heldImage", Napi::String::New(env, std::string(r->held_image, strnlen(r->held_image, sizeof(r->held_image)))));
  o.Set("outsidePool", outsidePool);
}

void Decode_devices_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_devices_rep)) return;
  const auto* r = reinterpret_cast<const gpck_devices_rep*>(b.data());
  {
    uint32_t n = std::min<uint32_t>(r->count, GPCK_MAX_DEVICES);
    Napi::Array a = Napi::Array::New(env, n);
    for (uint32_t i = 0; i < n; i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("ordinal", Napi::Number::New(env, static_cast<double>((&r->devices[i])->ordinal)));
      e.Set("ccMajor", Napi::Number::New(env, static_cast<double>((&r->devices[i])->cc_major)));
      e.Set("ccMinor", Napi::Number::New(env, static_cast<double>((&r->devices[i])->cc_minor)));
      e.Set("totalMemory", Napi::BigInt::New(env, static_cast<uint64_t>((&r->devices[i])->total_memory)));
      e.Set("uuid", Napi::String::New(env, UuidText((&r->devices[i])->uuid)));
      e.Set("name", Napi::String::New(env, std::string((&r->devices[i])->name, strnlen((&r->devices[i])->name, sizeof((&r->devices[i])->name)))));
      a.Set(i, e);
    }
    o.Set("devices", a);
  }
}

void Decode_quiesce_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_quiesce_rep)) return;
  const auto* r = reinterpret_cast<const gpck_quiesce_rep*>(b.data());
  o.Set("drainNs", Napi::Number::New(env, static_cast<double>(r->drain_ns)));
  o.Set("syncNs", Napi::Number::New(env, static_cast<double>(r->sync_ns)));
}

void Decode_resume_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_resume_rep)) return;
  const auto* r = reinterpret_cast<const gpck_resume_rep*>(b.data());
  o.Set("closedNs", Napi::Number::New(env, static_cast<double>(r->closed_ns)));
}

void Decode_list_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_list_rep)) return;
  const auto* r = reinterpret_cast<const gpck_list_rep*>(b.data());
  o.Set("more", Napi::Boolean::New(env, (r->more) != 0));
  o.Set("next", Napi::BigInt::New(env, static_cast<uint64_t>(r->next_addr)));
  {
    uint32_t n = (b.size() >= sizeof(*r) + r->count * sizeof(r->entries[0]) ? r->count : 0);
    Napi::Array a = Napi::Array::New(env, n);
    for (uint32_t i = 0; i < n; i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("device", Napi::Number::New(env, static_cast<double>((&r->entries[i])->device)));
      e.Set("addr", Napi::BigInt::New(env, static_cast<uint64_t>((&r->entries[i])->addr)));
      e.Set("size", Napi::BigInt::New(env, static_cast<uint64_t>((&r->entries[i])->size)));
      a.Set(i, e);
    }
    o.Set("entries", a);
  }
}

void Decode_staging_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_staging_rep)) return;
  const auto* r = reinterpret_cast<const gpck_staging_rep*>(b.data());
  o.Set("size", Napi::BigInt::New(env, static_cast<uint64_t>(r->size)));
  o.Set("registerNs", Napi::Number::New(env, static_cast<double>(r->register_ns)));
  o.Set("fileBytes", Napi::BigInt::New(env, static_cast<uint64_t>(r->file_bytes)));
  o.Set("files", Napi::Number::New(env, static_cast<double>(r->files)));
}

void Decode_copy_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_copy_rep)) return;
  const auto* r = reinterpret_cast<const gpck_copy_rep*>(b.data());
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(r->bytes)));
  o.Set("ns", Napi::Number::New(env, static_cast<double>(r->ns)));
}

void Decode_pool_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_pool_rep)) return;
  const auto* r = reinterpret_cast<const gpck_pool_rep*>(b.data());
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(r->bytes)));
  o.Set("ns", Napi::Number::New(env, static_cast<double>(r->ns)));
  o.Set("bytesCopied", Napi::Number::New(env, static_cast<double>(r->bytes_copied)));
}

void Decode_digest_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_digest_rep)) return;
  const auto* r = reinterpret_cast<const gpck_digest_rep*>(b.data());
  o.Set("ns", Napi::Number::New(env, static_cast<double>(r->ns)));
  if (r->blocks <= GPCK_MAX_DIGESTS && b.size() == sizeof(*r) + r->blocks * sizeof(r->digests[0]))
    o.Set("digests", Napi::Buffer<uint8_t>::Copy(env, reinterpret_cast<const uint8_t*>(r->digests), r->blocks * sizeof(r->digests[0])));
}

void Decode_peer_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_peer_rep)) return;
  const auto* r = reinterpret_cast<const gpck_peer_rep*>(b.data());
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(r->bytes)));
  o.Set("ns", Napi::Number::New(env, static_cast<double>(r->ns)));
  o.Set("chunksHeld", Napi::Number::New(env, static_cast<double>(r->chunks_held)));
}

void Decode_nccl_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_nccl_rep)) return;
  const auto* r = reinterpret_cast<const gpck_nccl_rep*>(b.data());
  o.Set("busy", Napi::Number::New(env, static_cast<double>(r->busy)));
  o.Set("waiting", Napi::Number::New(env, static_cast<double>(r->waiting)));
  o.Set("flags", Napi::Number::New(env, static_cast<double>(r->flags)));
  o.Set("memAllocations", Napi::Number::New(env, static_cast<double>(r->mem_allocations)));
  {
    uint32_t n = std::min<uint32_t>(r->count, GPCK_MAX_COMMS);
    Napi::Array a = Napi::Array::New(env, n);
    for (uint32_t i = 0; i < n; i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("key", Napi::BigInt::New(env, static_cast<uint64_t>((&r->comms[i])->key)));
      e.Set("ops", Napi::Number::New(env, static_cast<double>((&r->comms[i])->ops)));
      e.Set("target", Napi::Number::New(env, static_cast<double>((&r->comms[i])->target)));
      e.Set("nranks", Napi::Number::New(env, static_cast<double>((&r->comms[i])->nranks)));
      e.Set("rank", Napi::Number::New(env, static_cast<double>((&r->comms[i])->rank)));
      e.Set("device", Napi::Number::New(env, static_cast<double>((&r->comms[i])->device)));
      e.Set("inflight", Napi::Number::New(env, static_cast<double>((&r->comms[i])->inflight)));
      e.Set("registrations", Napi::Number::New(env, static_cast<double>((&r->comms[i])->registrations)));
      e.Set("windows", Napi::Number::New(env, static_cast<double>((&r->comms[i])->windows)));
      e.Set("customOps", Napi::Number::New(env, static_cast<double>((&r->comms[i])->custom_ops)));
      e.Set("flags", Napi::Number::New(env, static_cast<double>((&r->comms[i])->flags)));
      a.Set(i, e);
    }
    o.Set("comms", a);
  }
}

void Decode_nccl_id(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_nccl_id)) return;
  const auto* r = reinterpret_cast<const gpck_nccl_id*>(b.data());
  o.Set("id", Napi::Buffer<uint8_t>::Copy(env, r->id, sizeof(r->id)));
}

void Decode_framework_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_framework_rep)) return;
  const auto* r = reinterpret_cast<const gpck_framework_rep*>(b.data());
  o.Set("state", Napi::Number::New(env, static_cast<double>(r->state)));
  o.Set("framework", Napi::String::New(env, std::string(r->framework, strnlen(r->framework, sizeof(r->framework)))));
  o.Set("why", Napi::String::New(env, std::string(r->why, strnlen(r->why, sizeof(r->why)))));
  {
    uint32_t n = (b.size() >= sizeof(*r) + r->count * sizeof(r->ranges[0]) ? r->count : 0);
    Napi::Array a = Napi::Array::New(env, n);
    for (uint32_t i = 0; i < n; i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("addr", Napi::BigInt::New(env, static_cast<uint64_t>((&r->ranges[i])->addr)));
      e.Set("size", Napi::BigInt::New(env, static_cast<uint64_t>((&r->ranges[i])->size)));
      a.Set(i, e);
    }
    o.Set("ranges", a);
  }
}

void Decode_chunk_export_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_chunk_export_rep)) return;
  const auto* r = reinterpret_cast<const gpck_chunk_export_rep*>(b.data());
  o.Set("first", Napi::BigInt::New(env, static_cast<uint64_t>(r->first)));
  o.Set("device", Napi::Number::New(env, static_cast<double>(r->device)));
  o.Set("count", Napi::Number::New(env, static_cast<double>(r->count)));
}

void Decode_driver_zeros_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_driver_zeros_rep)) return;
  const auto* r = reinterpret_cast<const gpck_driver_zeros_rep*>(b.data());
  o.Set("mappings", Napi::Number::New(env, static_cast<double>(r->mappings)));
  o.Set("scannedBytes", Napi::Number::New(env, static_cast<double>(r->scanned_bytes)));
  o.Set("droppedBytes", Napi::Number::New(env, static_cast<double>(r->dropped_bytes)));
  o.Set("ns", Napi::Number::New(env, static_cast<double>(r->ns)));
}

void Decode_hold_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_hold_rep)) return;
  const auto* r = reinterpret_cast<const gpck_hold_rep*>(b.data());
  o.Set("id", Napi::BigInt::New(env, static_cast<uint64_t>(r->id)));
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(r->bytes)));
  o.Set("count", Napi::Number::New(env, static_cast<double>(r->count)));
}

void Decode_hold_list_rep(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {
  if (b.size() < sizeof(gpck_hold_list_rep)) return;
  const auto* r = reinterpret_cast<const gpck_hold_list_rep*>(b.data());
  o.Set("holderPid", Napi::Number::New(env, static_cast<double>(r->holder_pid)));
  {
    uint32_t n = (b.size() >= sizeof(*r) + r->count * sizeof(r->entries[0]) ? r->count : 0);
    Napi::Array a = Napi::Array::New(env, n);
    for (uint32_t i = 0; i < n; i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("id", Napi::BigInt::New(env, static_cast<uint64_t>((&r->entries[i])->id)));
      e.Set("bytes", Napi::Number::New(env, static_cast<double>((&r->entries[i])->bytes)));
      e.Set("createdMs", Napi::Number::New(env, static_cast<double>((&r->entries[i])->created_ms)));
      e.Set("pid", Napi::Number::New(env, static_cast<double>((&r->entries[i])->pid)));
      e.Set("part", Napi::Number::New(env, static_cast<double>((&r->entries[i])->part)));
      e.Set("fds", Napi::Number::New(env, static_cast<double>((&r->entries[i])->fds)));
      e.Set("flags", Napi::Number::New(env, static_cast<double>((&r->entries[i])->flags)));
      e.Set("uuid", Napi::String::New(env, UuidText((&r->entries[i])->uuid)));
      a.Set(i, e);
    }
    o.Set("entries", a);
  }
}

}  // namespace

bool EncodeRequest(uint16_t type, const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {
  switch (type) {
    case GPCK_HELLO:
      return Encode_hello_req(args, out, err);
    case GPCK_STATUS:
      return true;
    case GPCK_DEVICES:
      return true;
    case GPCK_QUIESCE:
      return Encode_quiesce_req(args, out, err);
    case GPCK_RESUME:
      return true;
    case GPCK_LIST_ALLOCS:
      return Encode_list_req(args, out, err);
    case GPCK_STAGING_MAP:
      return Encode_staging_req(args, out, err);
    case GPCK_STAGING_UNMAP:
      return true;
    case GPCK_COPY_OUT:
      return Encode_copy_req(args, out, err);
    case GPCK_COPY_IN:
      return Encode_copy_req(args, out, err);
    case GPCK_SUSPEND_POOL:
      return Encode_suspend_req(args, out, err);
    case GPCK_REMAP_POOL:
      return true;
    case GPCK_DROP_HELD:
      return Encode_suspend_req(args, out, err);
    case GPCK_BLOCK_DIGEST:
      return Encode_digest_req(args, out, err);
    case GPCK_LIVE_WINDOW:
      return Encode_live_req(args, out, err);
    case GPCK_PEER_HOLD:
      return Encode_peer_req(args, out, err);
    case GPCK_NCCL_STATUS:
      return true;
    case GPCK_NCCL_HOLD:
      return Encode_nccl_hold_req(args, out, err);
    case GPCK_NCCL_TEARDOWN:
      return true;
    case GPCK_NCCL_NEW_ID:
      return true;
    case GPCK_NCCL_REBUILD:
      return Encode_nccl_rebuild_req(args, out, err);
    case GPCK_FRAMEWORK_FREE:
      return Encode_framework_req(args, out, err);
    case GPCK_CHUNK_EXPORT:
      return Encode_chunk_export_req(args, out, err);
    case GPCK_DRIVER_ZEROS:
      return true;
    case GPCK_HOLD_PUT:
      return Encode_hold_put_req(args, out, err);
    case GPCK_HOLD_LIST:
      return true;
    case GPCK_HOLD_TAKE:
      return Encode_hold_take_req(args, out, err);
    case GPCK_HOLD_DROP:
      return Encode_hold_drop_req(args, out, err);
    case GPCK_HOLD_RECLAIM:
      return Encode_hold_reclaim_req(args, out, err);
    default:
      err = "unknown request type " + std::to_string(type);
      return false;
  }
}

Napi::Value DecodeReply(Napi::Env env, uint16_t type, const std::vector<uint8_t>& b) {
  Napi::Object o = Napi::Object::New(env);
  switch (type) {
    case GPCK_HELLO:
      Decode_hello_rep(env, b, o);
      break;
    case GPCK_STATUS:
      Decode_status_rep(env, b, o);
      break;
    case GPCK_DEVICES:
      Decode_devices_rep(env, b, o);
      break;
    case GPCK_QUIESCE:
      Decode_quiesce_rep(env, b, o);
      break;
    case GPCK_RESUME:
      Decode_resume_rep(env, b, o);
      break;
    case GPCK_LIST_ALLOCS:
      Decode_list_rep(env, b, o);
      break;
    case GPCK_STAGING_MAP:
      Decode_staging_rep(env, b, o);
      break;
    case GPCK_COPY_OUT:
      Decode_copy_rep(env, b, o);
      break;
    case GPCK_COPY_IN:
      Decode_copy_rep(env, b, o);
      break;
    case GPCK_SUSPEND_POOL:
      Decode_pool_rep(env, b, o);
      break;
    case GPCK_REMAP_POOL:
      Decode_pool_rep(env, b, o);
      break;
    case GPCK_BLOCK_DIGEST:
      Decode_digest_rep(env, b, o);
      break;
    case GPCK_PEER_HOLD:
      Decode_peer_rep(env, b, o);
      break;
    case GPCK_NCCL_STATUS:
      Decode_nccl_rep(env, b, o);
      break;
    case GPCK_NCCL_HOLD:
      Decode_nccl_rep(env, b, o);
      break;
    case GPCK_NCCL_NEW_ID:
      Decode_nccl_id(env, b, o);
      break;
    case GPCK_FRAMEWORK_FREE:
      Decode_framework_rep(env, b, o);
      break;
    case GPCK_CHUNK_EXPORT:
      Decode_chunk_export_rep(env, b, o);
      break;
    case GPCK_DRIVER_ZEROS:
      Decode_driver_zeros_rep(env, b, o);
      break;
    case GPCK_HOLD_PUT:
      Decode_hold_rep(env, b, o);
      break;
    case GPCK_HOLD_LIST:
      Decode_hold_list_rep(env, b, o);
      break;
    case GPCK_HOLD_TAKE:
      Decode_hold_rep(env, b, o);
      break;
    case GPCK_HOLD_DROP:
      Decode_hold_rep(env, b, o);
      break;
    case GPCK_HOLD_RECLAIM:
      Decode_hold_rep(env, b, o);
      break;
    default:
      break;
  }
  return o;
}

}  // namespace gpuckpt
