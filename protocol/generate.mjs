#!/usr/bin/env node
// Generates, from protocol/messages.mjs, the three faces of the protocol:
//   protocol/gpuckpt_protocol.h          the C header (shim and addon)
//   native/src/protocol_codec.gen.cc     the addon's encode and decode (JS <-> structs)
//   native/protocol.gen.ts               the TypeScript types and constants
//   shim/control/messages.gen.h          the messages the shim serves, for its dispatch
//   native/holder/messages.gen.h         the messages the snapshot holder serves
// Usage: node protocol/generate.mjs [--check]
//   --check  exit 1 if a committed file differs from what the table gives.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { INTRO, ITEMS, MESSAGES, VERSION } from './messages.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = {
  header: join(root, 'protocol', 'gpuckpt_protocol.h'),
  codec: join(root, 'native', 'src', 'protocol_codec.gen.cc'),
  ts: join(root, 'native', 'protocol.gen.ts'),
  dispatch: join(root, 'shim', 'control', 'messages.gen.h'),
  holder: join(root, 'native', 'holder', 'messages.gen.h'),
};

const structs = new Map(ITEMS.filter((i) => i.kind === 'struct').map((s) => [s.name, s]));
const camel = (s) => s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
const pascal = (s) => camel(s).replace(/^./, (c) => c.toUpperCase());
const tsName = (s) => s.ts ?? pascal(s.name.replace(/_req$/, '_request').replace(/_rep$/, '_reply'));
const C_TYPES = { u8: 'uint8_t', u16: 'uint16_t', u32: 'uint32_t', i32: 'int32_t', u64: 'uint64_t', char: 'char' };

/** A field of the table, with its defaults filled in. */
function field([type, name, o = {}]) {
  const nested = structs.get(type);
  const as = o.as ?? (name === 'reserved' ? 'skip' : type === 'char' ? 'string' : type === 'u64' ? 'bigint' : nested ? 'struct' : 'number');
  return { type, name, nested, as, js: o.js ?? camel(name), ...o };
}
const fieldsOf = (s) => s.fields.map(field);

/** Words of text in lines of at most width characters. */
function wrap(text, width) {
  const out = [''];
  for (const w of text.split(' ')) {
    if (out.at(-1) && out.at(-1).length + 1 + w.length > width) out.push(w);
    else out[out.length - 1] = out.at(-1) ? `${out.at(-1)} ${w}` : w;
  }
  return out.join('\n');
}

function comment(text, indent = '') {
  const lines = text.split('\n');
  if (lines.length === 1) return `${indent}/* ${lines[0]} */`;
  return lines.map((l, i) => `${indent}${i ? ' *' : '/*'} ${l}`.trimEnd()).join('\n') + ' */';
}

// ------------------------------------------------------------------ C header --

function cField(f) {
  const t = f.nested ? `struct gpck_${f.type}` : C_TYPES[f.type];
  const dims = f.flex ? '[]' : f.len ? `[${f.len}]` : '';
  const decl = `    ${t} ${f.name}${dims};`;
  return f.doc && !f.doc.includes('\n') ? `${decl.padEnd(30)} /* ${f.doc} */` : f.doc ? `${comment(f.doc, '    ')}\n${decl}` : decl;
}

function header() {
  const out = [comment(INTRO), '#ifndef GPUCKPT_PROTOCOL_H', '#define GPUCKPT_PROTOCOL_H', '', '#include <stdint.h>', ''];
  for (const it of ITEMS) {
    if (it.doc && it.kind !== 'define') out.push(comment(it.doc));
    switch (it.kind) {
      case 'define':
        if (it.doc) out.push(it.doc.includes('\n') ? comment(it.doc) : '');
        out.push(`#define ${it.name} ${it.value}${it.doc && !it.doc.includes('\n') ? ` /* ${it.doc} */` : ''}`);
        if (it.doc?.includes('\n')) out.push('');
        break;
      case 'messages':
        out.push('', 'enum gpck_type {');
        for (const [name, id, req, rep, note] of MESSAGES) {
          const shape = `${req ? `gpck_${req}` : '(none)'} -> ${rep ? `gpck_${rep}` : '(none)'}`;
          out.push(`    ${`GPCK_${name} = ${id},`.padEnd(24)} /* ${shape}${note ? `: ${note}` : ''} */`);
        }
        out.push('};', '');
        break;
      case 'enum':
        out.push(`enum gpck_${it.name} {`);
        for (const [n, v, d] of it.values) {
          if (d && d.length > 60) out.push(comment(wrap(d, 70), '    '));
          out.push(`    ${n} = ${v},${d && d.length <= 60 ? ` /* ${d} */` : ''}`);
        }
        out.push('};', '');
        break;
      case 'flags':
        for (const [n, v] of it.values) out.push(`#define ${n} ${v}u`);
        out.push('');
        break;
      case 'struct':
        out.push(`struct gpck_${it.name} {`, ...fieldsOf(it).map(cField), '};', '');
        break;
      case 'assert':
        out.push('#ifdef __cplusplus', '#define GPCK_FITS_A_MESSAGE static_assert', '#else', '#define GPCK_FITS_A_MESSAGE _Static_assert', '#endif');
        for (const [expr, msg] of it.checks) out.push(`GPCK_FITS_A_MESSAGE(${expr},`, `                    "${msg}");`);
        out.push('');
        break;
      default:
        throw new Error(`unknown item kind ${it.kind}`);
    }
  }
  out.push('#endif', '');
  return out.join('\n').replace(/\n{3,}/g, '\n\n');
}

// --------------------------------------------------------------- addon codec --

const GEN_NOTE = 'Generated from protocol/messages.mjs by protocol/generate.mjs: do not edit.';

/** C++ that appends struct s built from the JS object `obj` (flexible arrays after it). */
function encodeStruct(s, obj, indent) {
  const lines = [];
  const fs = fieldsOf(s);
  const flex = fs.find((f) => f.flex);
  if (flex) {
    lines.push(`Napi::Value ${flex.js}V = ${obj}.Get("${flex.js}");`);
    lines.push(`if (!${flex.js}V.IsArray()) {`, `  err = "${flex.js} must be an array";`, '  return false;', '}');
    lines.push(`Napi::Array ${flex.js} = ${flex.js}V.As<Napi::Array>();`);
    if (flex.max) lines.push(`if (${flex.js}.Length() > ${flex.max[0]}) {`, `  err = "${flex.max[1]}";`, '  return false;', '}');
  }
  lines.push(`gpck_${s.name} v{};`);
  for (const f of fs) {
    if (f.flex) continue;
    if (f.value) lines.push(`v.${f.name} = ${f.value};`);
    else if (flex && f.name === flex.count) lines.push(`v.${f.name} = ${flex.js}.Length();`);
    else if (f.as === 'skip') continue;
    else if (f.as === 'bool') lines.push(`v.${f.name} = ${obj}.Get("${f.js}").ToBoolean().Value() ? 1u : 0u;`);
    else if (f.as === 'uuid')
      lines.push(`if (!UuidBytes(${obj}.Get("${f.js}").ToString().Utf8Value(), v.${f.name})) {`, `  err = "${f.js} must be a GPU UUID";`, '  return false;', '}');
    else if (f.as === 'buffer') {
      // A fixed array of bytes: a Buffer of exactly its length.
      lines.push(`{`, `  Napi::Value b = ${obj}.Get("${f.js}");`);
      lines.push(`  if (!b.IsBuffer() || b.As<Napi::Buffer<uint8_t>>().Length() != sizeof(v.${f.name})) {`, `    err = "${f.js} must be a Buffer of ${f.len} bytes";`, '    return false;', '  }');
      lines.push(`  memcpy(v.${f.name}, b.As<Napi::Buffer<uint8_t>>().Data(), sizeof(v.${f.name}));`, '}');
    }
    else if (f.as === 'string') {
      lines.push(`{`, `  std::string s = ${obj}.Get("${f.js}").ToString().Utf8Value();`);
      lines.push(`  if (s.size() >= sizeof(v.${f.name})) {`, `    err = "${f.max?.[1] ?? `${f.js} too long`}";`, '    return false;', '  }');
      lines.push(`  memcpy(v.${f.name}, s.c_str(), s.size() + 1);`, '}');
    } else lines.push(`v.${f.name} = static_cast<${C_TYPES[f.type]}>(ToU64(${obj}.Get("${f.js}")));`);
  }
  lines.push('Append(out, v);');
  if (flex) {
    lines.push(`for (uint32_t i = 0; i < ${flex.js}.Length(); i++) {`);
    lines.push(`  Napi::Object e = ${flex.js}.Get(i).As<Napi::Object>();`);
    lines.push(...encodeStruct(flex.nested, 'e', '').map((l) => `  ${l.replace(/\bv\b/g, 'w')}`));
    lines.push('}');
  }
  return lines.map((l) => indent + l);
}

const DECODE_SCALAR = {
  number: (x) => `Napi::Number::New(env, static_cast<double>(${x}))`,
  bigint: (x) => `Napi::BigInt::New(env, static_cast<uint64_t>(${x}))`,
  bool: (x) => `Napi::Boolean::New(env, (${x}) != 0)`,
  string: (x) => `Napi::String::New(env, std::string(${x}, strnlen(${x}, sizeof(${x}))))`,
  uuid: (x) => `Napi::String::New(env, UuidText(${x}))`,
};

/** C++ setting the JS fields of `o` from the struct at `r` (a pointer), payload size `size`. */
function decodeStruct(s, r, o, size) {
  const lines = [];
  const fs = fieldsOf(s);
  const groups = [...new Set(fs.filter((f) => f.group).map((f) => f.group))];
  for (const g of groups) lines.push(`Napi::Object ${g} = Napi::Object::New(env);`);
  for (const f of fs) {
    const target = f.group ?? o;
    const x = `${r}->${f.name}`;
    if (f.as === 'skip') continue;
    if (f.flex && f.as === 'buffer') {
      // Exactly count elements, within the limit, or the field is left out.
      lines.push(`if (${r}->${f.count} <= ${f.max[0]} && ${size} == sizeof(*${r}) + ${r}->${f.count} * sizeof(${x}[0]))`);
      lines.push(`  ${target}.Set("${f.js}", Napi::Buffer<uint8_t>::Copy(env, reinterpret_cast<const uint8_t*>(${x}), ${r}->${f.count} * sizeof(${x}[0])));`);
    } else if (f.as === 'buffer') {
      lines.push(`${target}.Set("${f.js}", Napi::Buffer<uint8_t>::Copy(env, ${x}, sizeof(${x})));`);
    } else if (f.nested) {
      // A fixed array up to its count, or a flexible one: empty if the payload is short.
      const n = f.flex ? `(${size} >= sizeof(*${r}) + ${r}->${f.count} * sizeof(${x}[0]) ? ${r}->${f.count} : 0)` : `std::min<uint32_t>(${r}->${f.count}, ${f.len})`;
      lines.push(`{`, `  uint32_t n = ${n};`, `  Napi::Array a = Napi::Array::New(env, n);`, `  for (uint32_t i = 0; i < n; i++) {`);
      lines.push(`    Napi::Object e = Napi::Object::New(env);`);
      lines.push(...decodeStruct(f.nested, `(&${x}[i])`, 'e', '0').map((l) => `    ${l}`));
      lines.push(`    a.Set(i, e);`, '  }', `  ${target}.Set("${f.js}", a);`, '}');
    } else lines.push(`${target}.Set("${f.js}", ${DECODE_SCALAR[f.as](x)});`);
  }
  for (const g of groups) lines.push(`${o}.Set("${g}", ${g});`);
  return lines;
}

function codec() {
  const out = [
    `// ${GEN_NOTE}`,
    '#include "protocol_codec.h"',
    '',
    '#include <algorithm>',
    '#include <cstdio>',
    '#include <cstring>',
    '',
    '#include "gpuckpt_protocol.h"',
    '#include "js_values.h"',
    '#include "uuid_text.h"',
    '',
    'namespace gpuckpt {',
    '',
    'namespace {',
    '',
    'template <typename T>',
    'void Append(std::vector<uint8_t>& out, const T& v) {',
    '  const auto* p = reinterpret_cast<const uint8_t*>(&v);',
    '  out.insert(out.end(), p, p + sizeof(T));',
    '}',
    '',
  ];
  // One encoder per request struct and one decoder per reply struct, shared by the messages that use them.
  const requests = [...new Set(MESSAGES.map((m) => m[2]).filter(Boolean))];
  const replies = [...new Set(MESSAGES.map((m) => m[3]).filter(Boolean))];
  for (const name of requests) {
    out.push(`bool Encode_${name}(const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {`);
    out.push(...encodeStruct(structs.get(name), 'args', '  '), '  return true;', '}', '');
  }
  for (const name of replies) {
    out.push(`void Decode_${name}(Napi::Env env, const std::vector<uint8_t>& b, Napi::Object& o) {`, `  if (b.size() < sizeof(gpck_${name})) return;`);
    out.push(`  const auto* r = reinterpret_cast<const gpck_${name}*>(b.data());`);
    out.push(...decodeStruct(structs.get(name), 'r', 'o', 'b.size()').map((l) => `  ${l}`), '}', '');
  }
  out.push('}  // namespace', '', 'bool EncodeRequest(uint16_t type, const Napi::Object& args, std::vector<uint8_t>& out, std::string& err) {', '  switch (type) {');
  for (const [name, , req] of MESSAGES) out.push(`    case GPCK_${name}:`, `      return ${req ? `Encode_${req}(args, out, err)` : 'true'};`);
  out.push('    default:', '      err = "unknown request type " + std::to_string(type);', '      return false;', '  }', '}', '');
  out.push('Napi::Value DecodeReply(Napi::Env env, uint16_t type, const std::vector<uint8_t>& b) {', '  Napi::Object o = Napi::Object::New(env);', '  switch (type) {');
  for (const [name, , , rep] of MESSAGES) if (rep) out.push(`    case GPCK_${name}:`, `      Decode_${rep}(env, b, o);`, '      break;');
  out.push('    default:', '      break;', '  }', '  return o;', '}', '', '}  // namespace gpuckpt', '');
  return out.join('\n');
}

// ---------------------------------------------------------------- TypeScript --

const TS_SCALAR = { number: 'number', bigint: 'bigint', bool: 'boolean', string: 'string', uuid: 'string', buffer: 'Buffer' };

/** The TS types of struct s as a reply (decoded) or a request (encoded): its own, and one per group of its fields. */
function tsInterface(s, dir) {
  const fs = fieldsOf(s);
  const flexCount = fs.find((f) => f.flex)?.count;
  const bodies = new Map([[tsName(s), []]]);
  for (const f of fs) {
    if (f.as === 'skip' || f.value || (dir === 'request' && f.name === flexCount)) continue;
    const t = f.nested ? `${tsName(f.nested)}[]` : TS_SCALAR[f.as];
    const optional = dir === 'reply' && f.as === 'buffer' && f.flex ? '?' : '';
    const line = `${f.doc && !f.doc.includes('\n') ? `  /** ${f.doc} */\n` : ''}  ${f.js}${optional}: ${t};`;
    if (f.group && !bodies.has(pascal(f.group))) {
      bodies.set(pascal(f.group), []);
      bodies.get(tsName(s)).push(`  ${f.group}: ${pascal(f.group)};`);
    }
    bodies.get(f.group ? pascal(f.group) : tsName(s)).push(line);
  }
  return [...bodies].map(([name, lines]) => [`export interface ${name} {`, ...lines, '}'].join('\n')).join('\n\n');
}

function typescript() {
  const out = [`// ${GEN_NOTE}`, '/* eslint-disable */', '', `export const PROTOCOL_VERSION = ${VERSION};`, ''];
  out.push('/** Request types (enum gpck_type). */', 'export const MessageType = {', ...MESSAGES.map(([n, id]) => `  ${n}: ${id},`), '} as const;', '');
  for (const it of ITEMS) {
    if (it.kind === 'define' && it.js) out.push(`export const ${it.name.replace(/^GPCK_/, '')} = ${parseInt(it.value, 10)};`);
    if (it.kind === 'enum' && it.ts)
      out.push(`/** enum gpck_${it.name} */`, `export const ${it.ts} = { ${it.values.map(([n, v]) => `${n.replace(/^GPCK_[A-Z]+_/, '')}: ${v}`).join(', ')} } as const;`);
    if (it.kind === 'flags' && it.ts) {
      const prefix = it.values[0][0].match(/^GPCK_[A-Z]+_/)[0];
      out.push(`export const ${it.ts} = { ${it.values.map(([n, v]) => `${n.slice(prefix.length)}: ${v}`).join(', ')} } as const;`);
    }
  }
  out.push('');
  // Replies and their element structs decode; requests and theirs encode.
  const seen = new Map();
  const emit = (name, dir) => {
    const s = structs.get(name);
    if (seen.has(name)) {
      if (seen.get(name) !== dir) throw new Error(`struct ${name} is both encoded and decoded: give it two types`);
      return;
    }
    seen.set(name, dir);
    for (const f of fieldsOf(s)) if (f.nested) emit(f.nested.name, dir);
    out.push(tsInterface(s, dir), '');
  };
  for (const [, , req, rep] of MESSAGES) {
    if (rep) emit(rep, 'reply');
    if (req) emit(req, 'request');
  }
  out.push('/** Each message: what its request takes and its reply gives (undefined: no payload). */', 'export interface Messages {');
  for (const [n, , req, rep] of MESSAGES) out.push(`  ${n}: { request: ${req ? tsName(structs.get(req)) : 'undefined'}; reply: ${rep ? tsName(structs.get(rep)) : 'undefined'} };`);
  out.push('}', '');
  return out.join('\n');
}

// ------------------------------------------------------------ shim dispatch --

/** The dispatch list of one server: 'shim' (handlers.c) or 'holder' (native/holder/). */
function dispatch(server, where) {
  const out = [
    `/* ${GEN_NOTE}`,
    ` * Every message the ${server} serves, for its dispatch (${where}):`,
    ' * GP_MESSAGE(NAME, handler suffix, reply size preset, takes fds). */',
  ];
  for (const [name, , , rep, , o = {}] of MESSAGES)
    if ((o.server ?? 'shim') === server)
      out.push(`GP_MESSAGE(${name}, ${name.toLowerCase()}, ${rep ? `sizeof(struct gpck_${rep})` : '0'}, ${o.fds ? 1 : 0})`);
  return out.join('\n') + '\n';
}

// ---------------------------------------------------------------------- main --

const files = [
  [OUT.header, header()],
  [OUT.codec, codec()],
  [OUT.ts, typescript()],
  [OUT.dispatch, dispatch('shim', 'handlers.c')],
  [OUT.holder, dispatch('holder', 'snapshot_holder.c')],
];
if (process.argv.includes('--check')) {
  const stale = files.filter(([p, text]) => {
    try {
      return readFileSync(p, 'utf8') !== text;
    } catch {
      return true;
    }
  });
  if (stale.length) {
    console.error(`protocol: ${stale.map(([p]) => p.slice(root.length + 1)).join(', ')} differ from protocol/messages.mjs: run node protocol/generate.mjs`);
    process.exit(1);
  }
  console.log(`protocol: ${files.length} generated files match the table (version ${VERSION}, ${MESSAGES.length} messages)`);
} else {
  for (const [p, text] of files) writeFileSync(p, text);
  console.log(`protocol: wrote ${files.map(([p]) => p.slice(root.length + 1)).join(', ')}`);
}
