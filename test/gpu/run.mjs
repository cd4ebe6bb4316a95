// GPU test runner: drives the programs of test/gpu/apps (built by run.sh into
// build/gpu/) under bin/gpuckpt and checks live checkpoints and rollbacks
// ("restore --into") bit for bit. Plain ESM, Node 20, no dependencies.
//
// Output: one line per test, `ok NAME: detail` / `FAIL NAME: reason` /
// `SKIP NAME: reason`, measurements as `measure NAME: key=value ...`, notes as
// `# ...`, and last exactly one line `N passed, N failed, N skipped`. Exit 1
// if any test failed. Everything printed also goes to $OUT/gpu-test.log when
// OUT is set ($OUT/gpu-bench.log for a bench: a bench run after the tests
// used to empty their log).
//
// Environment:
//   GPU_TEST_BIN_DIR   built programs (default build/gpu)
//   GPUCKPT_BIN        the CLI (default bin/gpuckpt; a .js/.mjs file runs with node)
//   GPU_TEST_TMPDIR    where images go (default os.tmpdir()); removed at the end
//   GPU_TEST_BUDGET_S  time budget of the whole run in s (default 450; run.sh passes
//                      what its build left of 460)
//   GPU_TEST_POOL_GIB  pool_fill size in GiB (default 16, scaled to free memory)
//   GPU_TEST_SUITE     quick (default): every verb, pool_fill, the stream and
//                      the GPU-held snapshots at 2 GiB, in one 10-minute call;
//                      long: what quick leaves out (LONG_ONLY) and those at
//                      full size; all: both
//   GPU_TEST_HELD_RUNS gpu-held's snapshot/rollback rounds (default 3)
//   GPU_TEST_ONLY      comma-separated test-name prefixes to run, whatever the suite
//   GPU_TEST_VERBOSE   1: pass the programs' stderr through
//   GPU_TEST_LOG_APPEND  1: append to the log (run.sh started it)
//   GPU_RUN_MODE       bench: run the benchmark of bench.mjs instead of the tests
//                      (npm run bench; its BENCH_* variables are described there)

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const env = process.env;
const BIN_DIR = path.resolve(ROOT, env.GPU_TEST_BIN_DIR ?? 'build/gpu');
const GPUCKPT = path.resolve(ROOT, env.GPUCKPT_BIN ?? 'bin/gpuckpt');
const BUDGET_MS = Number(env.GPU_TEST_BUDGET_S ?? 450) * 1000;
const ONLY = (env.GPU_TEST_ONLY ?? '').split(',').map((s) => s.trim()).filter(Boolean);
const VERBOSE = env.GPU_TEST_VERBOSE === '1';
const T0 = Date.now();

const DEFAULT_POOL_BASE = 0x600000000000n;
const DEFAULT_SLICE = 256n << 30n;
const GiB = 2 ** 30;
const MiB = 2 ** 20;

// ------------------------------------------------------------------ output --

const logPath = env.OUT ? path.join(env.OUT, env.GPU_RUN_MODE === 'bench' ? 'gpu-bench.log' : 'gpu-test.log') : null;
if (logPath) {
  fs.mkdirSync(env.OUT, { recursive: true });
  if (env.GPU_TEST_LOG_APPEND !== '1') fs.writeFileSync(logPath, '');
}
function say(line) {
  process.stdout.write(line + '\n');
  if (logPath) fs.appendFileSync(logPath, line + '\n');
}
const oneLine = (s) => String(s).replace(/\s*\n\s*/g, ' | ').slice(0, 600);

const counts = { passed: 0, failed: 0, skipped: 0 };
let summaryPrinted = false;
function summary() {
  if (summaryPrinted) return;
  summaryPrinted = true;
  say(`${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped`);
}

class Skip extends Error {}

/** A failure with extra diagnostic lines (printed as `# ...` after FAIL). */
function failure(msg, diag = []) {
  const e = new Error(msg);
  e.diag = diag;
  return e;
}

const SUITE = env.GPU_TEST_SUITE ?? 'quick';
if (!['quick', 'long', 'all'].includes(SUITE)) throw new Error(`GPU_TEST_SUITE="${SUITE}" must be quick, long or all`);
/**
 * The long suite's own tests (name prefixes): soaks, the controller killed,
 * the launch shapes beyond a script's `&`, the 166M-parameter job, and
 * what another test of the quick suite already covers in its verbs.
 */
const LONG_ONLY = [
  'kill',
  'soak',
  ...['nohup', 'timeout', 'setsid', 'stdin-pipe', 'service', 'terminal-bg', 'fork-cost', 'torch-plain', 'torch-issue23'].map((m) => `launch/${m}`),
  'distributed/killed',
  'distributed/bench',
  'cupy/process',
  // Covered by launch/torch-workers's verbs, and the allocation timing.
  'torch',
  'launch/torch-spawn',
  'bench_alloc',
];
/** Tests of both suites whose pool is 2 GiB in the quick one (poolFillSize). */
const SIZED = ['pool_fill', 'stream', 'gpu-held'];
const startsAny = (name, prefixes) => prefixes.some((p) => name.startsWith(p));
/** A test or one of its sub-tests ("torch" names torch, not torch/process). */
const within = (name, tests) => tests.some((t) => name === t || name.startsWith(`${t}/`));
const inSuite = (name) => SUITE === 'all' || (SUITE === 'long' ? within(name, [...LONG_ONLY, ...SIZED]) : !within(name, LONG_ONLY));
const selected = (name) => (ONLY.length ? startsAny(name, ONLY) : inSuite(name));

/** Runs one test: fn returns a detail string (or {detail, value}). Returns
 * the value on success, undefined otherwise. Processes it started are
 * killed at the end. */
async function test(name, fn) {
  if (!selected(name)) return undefined;
  if (remaining() <= 0) {
    counts.failed++;
    say(`FAIL ${name}: not run: time budget of ${BUDGET_MS / 1000} s exhausted`);
    return undefined;
  }
  const t = Date.now();
  try {
    const r = await fn();
    const detail = typeof r === 'string' ? r : r?.detail ?? '';
    counts.passed++;
    say(`ok ${name}: ${detail} (${((Date.now() - t) / 1000).toFixed(1)} s)`);
    return typeof r === 'object' && r !== null && 'value' in r ? r.value : true;
  } catch (e) {
    if (e instanceof Skip) {
      counts.skipped++;
      say(`SKIP ${name}: ${oneLine(e.message)}`);
    } else {
      counts.failed++;
      say(`FAIL ${name}: ${oneLine(e?.message ?? e)}`);
      for (const l of e?.diag ?? []) say(`#   ${l}`);
      // An exception that is no test failure (a bug in the runner): where.
      if (!e?.diag) for (const l of String(e?.stack ?? '').split('\n').slice(1, 4)) say(`#   ${l.trim()}`);
    }
    return undefined;
  } finally {
    killAll();
  }
}

function measure(name, kv) {
  const parts = Object.entries(kv).map(([k, v]) => `${k}=${typeof v === 'number' ? fmt(v) : v}`);
  say(`measure ${name}: ${parts.join(' ')}`);
}
function fmt(v) {
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) || Math.abs(v) >= 1e4) return v.toFixed(0);
  return String(Number(v.toPrecision(4)));
}

// ------------------------------------------------------------ time budget --

function remaining() {
  return T0 + BUDGET_MS - Date.now();
}
/** A step's timeout: ms, cut to what is left of the budget. */
function limit(ms) {
  const r = remaining();
  if (r <= 0) throw failure(`time budget of ${BUDGET_MS / 1000} s exhausted`);
  return Math.min(ms, r);
}
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

// -------------------------------------------------------------- processes --

const live = new Set(); // child processes this runner started and that still run

function killAll() {
  for (const child of live) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        child.kill('SIGKILL'); // by PID: only what we spawned
      } catch {
        /* already gone */
      }
    }
  }
  live.clear();
}

function track(child) {
  live.add(child);
  child.on('close', () => live.delete(child));
  return child;
}

function cliCommand(args) {
  return /\.[cm]?js$/.test(GPUCKPT) ? [process.execPath, [GPUCKPT, ...args]] : [GPUCKPT, args];
}

const describeExit = (s) => (s.signal ? `signal ${s.signal}` : `exit code ${s.code}`);

/** One run of a test program (plain, or under `gpuckpt run`), talking the
 * line protocol. */
class App {
  constructor(name, prog, args = [], { shim = true, extraEnv = {} } = {}) {
    this.name = name;
    const file = path.isAbsolute(prog) ? prog : path.join(BIN_DIR, prog);
    if (!fs.existsSync(file)) throw failure(`${file} not built (run test/gpu/run.sh)`);
    const [cmd, argv] = shim ? cliCommand(['run', '--', file, ...args]) : [file, args];
    this.cmdline = [cmd, ...argv].join(' ');
    this.lines = [];
    this.wake = null;
    this.stderr = '';
    this.status = null;
    this.spawnError = null;
    this.child = track(spawn(cmd, argv, { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'], env: { ...env, ...extraEnv } }));
    this.child.on('error', (e) => {
      this.spawnError = e;
      this.status ??= { code: null, signal: null };
      this.wake?.();
    });
    this.child.stdin.on('error', () => {}); // EPIPE when it died: reported via status
    readline.createInterface({ input: this.child.stdout }).on('line', (l) => {
      this.lines.push(l);
      this.wake?.();
    });
    this.child.stderr.on('data', (d) => {
      this.stderr = (this.stderr + d).slice(-16384);
      if (VERBOSE) process.stderr.write(d);
    });
    this.closed = new Promise((res) =>
      this.child.on('close', (code, signal) => {
        this.status = { code, signal };
        this.wake?.();
        res(this.status);
      }),
    );
  }

  get pid() {
    return this.child.pid;
  }

  /** Error with the program's last stderr lines as diagnostics. */
  error(msg) {
    const tail = this.stderr.trimEnd().split('\n').filter(Boolean).slice(-12);
    return failure(msg, tail.length ? [`stderr of ${this.name} (last lines):`, ...tail.map((l) => '  ' + l)] : []);
  }

  /** The next JSON line on stdout, within ms. */
  async next(what, ms) {
    const to = limit(ms);
    const deadline = Date.now() + to;
    for (;;) {
      if (this.lines.length) break;
      if (this.spawnError) throw this.error(`${what}: cannot start ${this.cmdline}: ${this.spawnError.message}`);
      if (this.status) throw this.error(`${what}: ${this.name} ended (${describeExit(this.status)}) without a reply`);
      const left = deadline - Date.now();
      if (left <= 0) throw this.error(`${what}: no reply from ${this.name} within ${(to / 1000).toFixed(0)} s`);
      await new Promise((res) => {
        const t = setTimeout(res, left);
        this.wake = () => {
          clearTimeout(t);
          res();
        };
      });
      this.wake = null;
    }
    const line = this.lines.shift();
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      throw this.error(`${what}: not a JSON line on ${this.name}'s stdout: ${JSON.stringify(line.slice(0, 200))}`);
    }
    if (msg?.event === 'error') throw this.error(`${what}: ${this.name} reported an error: ${msg.message}`);
    return msg;
  }

  /** Sends a command and expects the event `expect` back. */
  async send(cmd, expect, ms = 60_000) {
    this.child.stdin.write(cmd + '\n');
    const msg = await this.next(cmd, ms);
    if (msg.event !== expect) throw this.error(`${cmd}: expected event "${expect}", got ${JSON.stringify(msg).slice(0, 200)}`);
    if (msg.buffers !== undefined) checkBuffers(msg.buffers, `${cmd} reply`);
    return msg;
  }

  /** The ready event (or skip), with the PID check of `gpuckpt run`'s exec. */
  async ready(ms = 90_000) {
    const msg = await this.next('ready', ms);
    if (msg.event === 'skip') return msg;
    if (msg.event !== 'ready') throw this.error(`expected a ready event, got ${JSON.stringify(msg).slice(0, 200)}`);
    checkBuffers(msg.buffers, 'ready event');
    if (msg.pid !== this.pid)
      throw this.error(`ready: program's pid ${msg.pid} is not the spawned pid ${this.pid} (gpuckpt run must exec)`);
    return msg;
  }

  async waitExit(ms) {
    let t;
    const to = limit(ms);
    const timeout = new Promise((res) => (t = setTimeout(res, to, null)));
    const s = await Promise.race([this.closed, timeout]);
    clearTimeout(t);
    if (!s) throw this.error(`${this.name} did not exit within ${(to / 1000).toFixed(0)} s`);
    return s;
  }

  /** quit -> bye, then exit code 0. */
  async quit(ms = 60_000) {
    await this.send('quit', 'bye', ms);
    this.child.stdin.end();
    const s = await this.waitExit(ms);
    if (s.code !== 0) throw this.error(`after quit ${this.name} ended with ${describeExit(s)}`);
  }
}

/** Runs the CLI; resolves {code, signal, stdout, stderr, seconds}. */
function runCli(args, ms, extraEnv = {}) {
  let stderr = '';
  const running = new Promise((resolve, reject) => {
    let to;
    try {
      to = limit(ms);
    } catch (e) {
      reject(e);
      return;
    }
    const t0 = Date.now();
    const [cmd, argv] = cliCommand(args);
    const child = track(spawn(cmd, argv, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, ...extraEnv } }));
    let stdout = '';
    let timedOut = false;
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => {
      stderr += d;
      if (VERBOSE) process.stderr.write(d);
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, to);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(failure(`cannot run ${cmd}: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const r = { code, signal, stdout, stderr, seconds: (Date.now() - t0) / 1000 };
      if (timedOut) reject(failure(`gpuckpt ${args.join(' ')}: no result within ${(to / 1000).toFixed(0)} s (killed)`, tail(stderr)));
      else resolve(r);
    });
  });
  // What a command still running has said, for a failure met meanwhile.
  running.stderrSoFar = () => stderr;
  return running;
}

const tail = (s, n = 12) => s.trimEnd().split('\n').filter(Boolean).slice(-n).map((l) => '  ' + l);

/** Runs the CLI with --json; exit 0 and one JSON value on stdout, or throws. */
/** stderrTo: a file the command's stderr is kept in, whatever its end (a trace at GPUCKPT_LOG=debug). */
async function cliJson(args, ms = 60_000, extraEnv = {}, { stderrTo } = {}) {
  const r = await runCli(args, ms, extraEnv);
  if (stderrTo) fs.writeFileSync(stderrTo, r.stderr);
  const what = `gpuckpt ${args.join(' ')}`;
  if (r.code !== 0) {
    const lines = r.stderr.trimEnd().split('\n').filter(Boolean);
    const msg =
      lines.find((l) => l.startsWith('gpuckpt:')) ??
      lines.find((l) => /\b[A-Za-z]*Error\b:/.test(l)) ??
      lines.at(-1) ??
      '(no message on stderr)';
    throw failure(`${what}: ${describeExit(r)}: ${msg}`, tail(r.stderr));
  }
  try {
    return JSON.parse(r.stdout);
  } catch {
    throw failure(`${what}: stdout is not one JSON value: ${JSON.stringify(r.stdout.slice(0, 200))}`, tail(r.stderr));
  }
}

// ---------------------------------------------------------- data checking --

function checkBuffers(bufs, what) {
  if (!Array.isArray(bufs) || bufs.length === 0) throw failure(`${what}: no buffers array`);
  bufs.forEach((b, i) => {
    const ok =
      b &&
      Number.isInteger(b.device) &&
      typeof b.addr === 'string' &&
      /^0x[0-9a-f]+$/i.test(b.addr) &&
      Number.isSafeInteger(b.size) &&
      b.size > 0 &&
      typeof b.checksum === 'string' &&
      /^[0-9a-f]{16}$/i.test(b.checksum);
    if (!ok) throw failure(`${what}: malformed buffer ${i}: ${JSON.stringify(b)}`);
  });
}

const bufName = (b, i) => `buffer ${i} (dev ${b.device} ${b.addr}, ${b.size} B)`;
const totalBytes = (bufs) => bufs.reduce((s, b) => s + b.size, 0);

/** Same device, address and size, in order. */
function expectLayout(got, want, what) {
  if (got.length !== want.length) throw failure(`${what}: ${got.length} buffers, expected ${want.length}`);
  got.forEach((b, i) => {
    const w = want[i];
    if (b.device !== w.device || BigInt(b.addr) !== BigInt(w.addr) || b.size !== w.size)
      throw failure(`${what}: ${bufName(b, i)} != ${bufName(w, i)}`);
  });
}

/** Same layout and bit-identical checksums. */
function expectSame(got, want, what) {
  expectLayout(got, want, what);
  const bad = got.map((b, i) => [b, i]).filter(([b, i]) => b.checksum.toLowerCase() !== want[i].checksum.toLowerCase());
  if (bad.length)
    throw failure(
      `${what}: ${bad.length}/${got.length} buffers differ: ` +
        bad
          .slice(0, 2)
          .map(([b, i]) => `${bufName(b, i)} checksum ${b.checksum}, expected ${want[i].checksum}`)
          .join('; ') +
        (bad.length > 2 ? '; ...' : ''),
    );
}

/** Same devices, sizes and checksums; addresses may differ (another program
 * or a run without the shim). */
function expectSameData(got, want, what) {
  if (got.length !== want.length) throw failure(`${what}: ${got.length} buffers, expected ${want.length}`);
  got.forEach((b, i) => {
    const w = want[i];
    if (b.device !== w.device || b.size !== w.size || b.checksum.toLowerCase() !== w.checksum.toLowerCase())
      throw failure(`${what}: ${bufName(b, i)} checksum ${b.checksum}, expected ${bufName(w, i)} checksum ${w.checksum}`);
  });
}

/** Same layout and every checksum changed. */
function expectAllDiffer(got, before, what) {
  expectLayout(got, before, what);
  got.forEach((b, i) => {
    if (b.checksum.toLowerCase() === before[i].checksum.toLowerCase())
      throw failure(`${what}: ${bufName(b, i)} checksum unchanged (${b.checksum})`);
  });
}

function toBig(v) {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return BigInt(v);
  if (typeof v === 'string' && /^(0x[0-9a-f]+|[0-9]+)$/i.test(v.trim())) return BigInt(v.trim());
  return null;
}

/** ps --json entry of pid, and the pool range it reports. */
async function poolOf(pid) {
  const list = await cliJson(['ps', '--json'], 30_000);
  if (!Array.isArray(list)) throw failure(`gpuckpt ps --json: not an array: ${JSON.stringify(list).slice(0, 200)}`);
  const entry = list.find((p) => Number(p?.pid) === pid);
  if (!entry) throw failure(`gpuckpt ps --json does not list pid ${pid} (lists ${list.map((p) => p?.pid).join(', ') || 'none'})`);
  let base = toBig(entry.poolBase);
  let slice = toBig(entry.sliceSize);
  let note = '';
  if (base === null || slice === null) {
    note = ` (ps gave poolBase=${JSON.stringify(entry.poolBase)} sliceSize=${JSON.stringify(entry.sliceSize)}: used the defaults)`;
    base ??= DEFAULT_POOL_BASE;
    slice ??= DEFAULT_SLICE;
  }
  return { entry, base, slice, note };
}

/** Every buffer inside its device's slice; ps counts at least as many
 * allocations per device. */
function expectInPool(bufs, pool, what) {
  bufs.forEach((b, i) => {
    const lo = pool.base + BigInt(b.device) * pool.slice;
    const a = BigInt(b.addr);
    if (a < lo || a + BigInt(b.size) > lo + pool.slice)
      throw failure(`${what}: ${bufName(b, i)} is outside device ${b.device}'s pool slice [0x${lo.toString(16)}, 0x${(lo + pool.slice).toString(16)})`);
  });
  const devs = pool.entry.devices;
  if (Array.isArray(devs)) {
    const per = new Map();
    for (const b of bufs) per.set(b.device, (per.get(b.device) ?? 0) + 1);
    for (const [d, n] of per) {
      const got = devs[d]?.allocations;
      if (typeof got === 'number' && got < n)
        throw failure(`${what}: ps --json counts ${got} allocations on device ${d}, the program holds ${n} buffers there`);
    }
  }
}

const NUM = (j, k) => typeof j[k] === 'number' && Number.isFinite(j[k]);

function expectKeys(j, keys, what) {
  if (!j || typeof j !== 'object') throw failure(`${what}: not a JSON object`);
  const missing = keys.filter((k) => !NUM(j, k));
  if (missing.length) throw failure(`${what}: missing or non-numeric ${missing.join(', ')} in ${JSON.stringify(j).slice(0, 300)}`);
}

async function checkpoint(app, snap, bufs, ms) {
  const what = `checkpoint ${app.pid} --gpu-only`;
  const j = await cliJson(['checkpoint', String(app.pid), '--gpu-only', '-o', snap, '--json'], ms);
  expectKeys(j, ['pid', 'allocations', 'frames', 'rawBytes', 'storedBytes', 'ratio', 'seconds', 'pauseSeconds', 'copySeconds', 'copyGBps', 'throughputGBps'], what);
  if (typeof j.image !== 'string') throw failure(`${what}: no image path in the result`);
  if (j.pid !== app.pid) throw failure(`${what}: result names pid ${j.pid}`);
  if (j.allocations < bufs.length) throw failure(`${what}: ${j.allocations} allocations in the image, the program holds ${bufs.length} buffers`);
  if (j.rawBytes + j.zeroBytes < totalBytes(bufs)) throw failure(`${what}: rawBytes ${j.rawBytes} + zeroBytes ${j.zeroBytes} < ${totalBytes(bufs)} bytes of buffers`);
  if (!fs.existsSync(snap)) throw failure(`${what}: exit 0 but ${snap} does not exist`);
  return j;
}

async function restore(app, snap, ck, ms) {
  const what = `restore ${path.basename(snap)} --into ${app.pid}`;
  const j = await cliJson(['restore', snap, '--into', String(app.pid), '--json'], ms);
  expectKeys(j, ['pid', 'rawBytes', 'seconds', 'pauseSeconds', 'copyGBps'], what);
  if (j.pid !== app.pid) throw failure(`${what}: result names pid ${j.pid}`);
  if (ck && j.rawBytes !== ck.rawBytes) throw failure(`${what}: rawBytes ${j.rawBytes}, the checkpoint wrote ${ck.rawBytes}`);
  return j;
}

async function inspect(snap, bufs, ms = 120_000) {
  const what = `inspect ${path.basename(snap)}`;
  const j = await cliJson(['inspect', snap, '--json'], ms);
  if (j?.verified !== true) throw failure(`${what}: verified is ${JSON.stringify(j?.verified)}, not true`);
  if (!Array.isArray(j.allocations)) throw failure(`${what}: no allocations array`);
  const allocs = j.allocations.map((a) => ({ device: Number(a.device), addr: toBig(a.addr), size: Number(a.size) }));
  bufs.forEach((b, i) => {
    const a = allocs.find((x) => x.device === b.device && x.addr === BigInt(b.addr));
    if (!a) throw failure(`${what}: no allocation at ${bufName(b, i)} among ${allocs.length}`);
    if (!(a.size >= b.size)) throw failure(`${what}: allocation at ${b.addr} has size ${a.size} < ${b.size}`);
  });
  return j;
}

// ------------------------------------------------------------------ images --

const tmpRoot = fs.mkdtempSync(path.join(env.GPU_TEST_TMPDIR ?? os.tmpdir(), 'gpuckpt-gputest-'));
let snapSeq = 0;
const snapPath = (name) => path.join(tmpRoot, `${name.replace(/[^A-Za-z0-9_.-]/g, '_')}-${++snapSeq}`);
function removeImages(prefix = '') {
  for (const f of fs.readdirSync(tmpRoot)) if (f.startsWith(prefix)) fs.rmSync(path.join(tmpRoot, f), { recursive: true, force: true });
}
/** Runs fn, then deletes the images named after prefix (disk space). */
async function withImages(prefix, fn) {
  try {
    return await fn();
  } finally {
    killAll(); // a program still holding the pool, first
    removeImages(prefix);
  }
}
function cleanup() {
  killAll();
  fs.rmSync(tmpRoot, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    say(`FAIL runner: interrupted by ${sig}`);
    counts.failed++;
    cleanup();
    summary();
    process.exit(1);
  });
}
// Backstop: steps honour the budget, but never let the run hang.
setTimeout(() => {
  say(`FAIL runner: still running ${BUDGET_MS / 1000 + 20} s after start, giving up`);
  counts.failed++;
  cleanup();
  summary();
  process.exit(1);
}, BUDGET_MS + 20_000).unref();

// --------------------------------------------------------------- scenarios --

/** Ready buffers of each program's first run under the shim, kept even when
 * the rest of its scenario failed: the second run compares against them. */
const firstReady = new Map();

const mib = (n) => (n / MiB).toFixed(1);

function ckMeasures(prefix, ck) {
  return {
    [`${prefix}s`]: ck.seconds,
    [`${prefix}pause_s`]: ck.pauseSeconds,
    [`${prefix}copy_GBps`]: ck.copyGBps,
    ...(ck.throughputGBps !== undefined ? { [`${prefix}throughput_GBps`]: ck.throughputGBps } : {}),
  };
}

/**
 * The rollback scenario of one program under the shim:
 *   ready (buffers in the pool, ps lists it) -> checkpoint A (live) ->
 *   state == ready -> mutate (all differ) -> [checkpoint B -> state ==
 *   mutated -> mutate again] -> restore A --into -> state == ready ->
 *   [restore B -> state == mutated] -> inspect A (verified, has every
 *   buffer) -> quit -> exit 0.
 * opts.single: one image only (large pools); opts.* timeouts in ms.
 */
async function rollback(name, prog, args = [], opts = {}) {
  const { readyMs = 90_000, ckptMs = 120_000, restoreMs = 120_000, single = false, measures = true } = opts;
  const app = new App(name, prog, args);
  const ready = await app.ready(readyMs);
  if (ready.event === 'skip') throw new Skip(ready.reason ?? 'program skipped');
  const R = ready.buffers;
  firstReady.set(name, R);
  const pool = await poolOf(app.pid);
  expectInPool(R, pool, 'ready');

  const snapA = snapPath(name);
  const ckA = await checkpoint(app, snapA, R, ckptMs);
  expectSame((await app.send('state', 'state')).buffers, R, 'state after live checkpoint A');
  const M1 = (await app.send('mutate', 'mutated')).buffers;
  expectAllDiffer(M1, R, 'mutate');

  let snapB;
  let ckB;
  if (!single) {
    snapB = snapPath(name);
    ckB = await checkpoint(app, snapB, M1, ckptMs);
    expectSame((await app.send('state', 'state')).buffers, M1, 'state after live checkpoint B');
    const M2 = (await app.send('mutate', 'mutated')).buffers;
    expectAllDiffer(M2, M1, 'second mutate');
  }

  const rsA = await restore(app, snapA, ckA, restoreMs);
  expectSame((await app.send('state', 'state')).buffers, R, 'state after restore of A (must equal ready)');
  if (!single) {
    await restore(app, snapB, ckB, restoreMs);
    expectSame((await app.send('state', 'state')).buffers, M1, 'state after restore of B (must equal first mutate)');
  }
  const insp = await inspect(snapA, R);
  await app.quit();

  if (measures) {
    measure(name, {
      buffers: R.length,
      MiB: Number(mib(totalBytes(R))),
      raw_MiB: Number(mib(ckA.rawBytes)),
      stored_MiB: Number(mib(ckA.storedBytes)),
      ratio: ckA.ratio,
      ...ckMeasures('ckpt_', ckA),
      ...ckMeasures('restore_', rsA),
    });
  }
  const detail =
    `${R.length} buffers, ${mib(totalBytes(R))} MiB in the pool at ${R[0].addr}${pool.note}; ` +
    `live checkpoint left data intact; mutate + restore --into rolled back bit for bit` +
    (single ? '' : ' (2 images, each restored)') +
    `; inspect verified ${insp.allocations.length} allocations`;
  return { detail, value: { ready: R, mutated: M1, ckA, rsA } };
}

/** A second run of the same program: identical addresses and checksums to
 * the first run's ready event. */
async function secondRun(name, prog, args = [], extra = {}) {
  const first = firstReady.get(name);
  if (!first) throw failure('not run: the first run under the shim never got ready');
  const app = new App(name, prog, args);
  const ready = await app.ready();
  if (ready.event === 'skip') throw new Skip(ready.reason ?? 'program skipped');
  expectLayout(ready.buffers, first, 'addresses of the second run');
  expectSame(ready.buffers, first, 'checksums of the second run');
  let note = '';
  if (extra.sameAs) {
    // Same kernels, seeds and sizes as another program: same data.
    expectSameData(ready.buffers, extra.sameAs.buffers, `checksums vs ${extra.sameAs.name}`);
    note = `; data identical to ${extra.sameAs.name}'s`;
  }
  await app.quit();
  return `${ready.buffers.length} buffers at the same addresses (${ready.buffers[0].addr}...) with the same checksums${note}`;
}

/** The static program without the shim: the program itself is correct. */
async function noShim() {
  const app = new App('static_cudart', 'static_cudart', [], { shim: false });
  const ready = await app.ready();
  const R = ready.buffers;
  expectSame((await app.send('state', 'state')).buffers, R, 'state');
  const M = (await app.send('mutate', 'mutated')).buffers;
  expectAllDiffer(M, R, 'mutate');
  expectSame((await app.send('state', 'state')).buffers, M, 'state after mutate');
  await app.quit();
  return { detail: `${R.length} buffers at ${R[0].addr}..., state stable, mutate changes every buffer`, value: { ready: R, mutated: M } };
}

/** Where a program that stopped answering is: its kernel state and wait
 * channel, and what gpuckpt ps says of it (a gate left closed shows here). */
function processWhereabouts(pid) {
  if (!pid) return ['the program never named its pid'];
  let status;
  try {
    status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return [`process ${pid} is gone`];
  }
  const field = (k) => (status.match(new RegExp(`^${k}:\\s*(.*)$`, 'm')) ?? [])[1] ?? '?';
  let wchan = '?';
  try {
    wchan = fs.readFileSync(`/proc/${pid}/wchan`, 'utf8');
  } catch {}
  const [cmd, argv] = cliCommand(['ps', '--json']);
  const ps = spawnSync(cmd, argv, { encoding: 'utf8', timeout: 10_000 });
  let entry = 'not listed';
  try {
    const list = JSON.parse(ps.stdout);
    const found = Array.isArray(list) ? list.find((p) => Number(p?.pid) === pid) : undefined;
    if (found) entry = JSON.stringify(found).slice(0, 300);
  } catch {}
  return [`process ${pid}: state ${field('State')}, wchan ${wchan}, threads ${field('Threads')}`, `gpuckpt ps: ${entry}`];
}

/** GPU memory nvidia-smi shows for pid, per GPU UUID (MiB). */
function gpuMemoryOf(pid) {
  const r = spawnSync('nvidia-smi', ['--query-compute-apps=pid,gpu_uuid,used_memory', '--format=csv,noheader,nounits'], { encoding: 'utf8' });
  const out = {};
  for (const line of (r.stdout ?? '').split('\n')) {
    const [p, uuid, mem] = line.split(',').map((x) => x.trim());
    if (Number(p) === pid) out[uuid] = Number(mem);
  }
  return out;
}

/** SIGKILL to each PID of a set this runner made (launched or restored), which is emptied. */
function endPids(pids) {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  pids.clear();
}

/** Running, not a zombie waiting for its reaper. */
function running(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

/** True when nvidia-smi's topology shows NVLink between GPUs a and b (a migrate then goes GPU to GPU). */
function nvlinked(a, b) {
  const r = spawnSync('nvidia-smi', ['topo', '-m'], { encoding: 'utf8' });
  // Strip the colour codes, then row "GPUa" has one column per GPU.
  const row = (r.stdout ?? '').replace(/\x1b\[[0-9;]*m/g, '').split('\n').find((l) => l.startsWith(`GPU${a}\t`) || l.startsWith(`GPU${a} `));
  return /^NV\d+$/.test(row?.trim().split(/\s+/)[1 + b] ?? '');
}

function gpuUuids() {
  const r = spawnSync('nvidia-smi', ['--query-gpu=uuid', '--format=csv,noheader'], { encoding: 'utf8' });
  return (r.stdout ?? '').split('\n').map((x) => x.trim()).filter(Boolean);
}

/**
 * Whole-process checkpoint and restore with the real CRIU. The program's
 * stdin is a named pipe and its stdout a file (CRIU restores both; it cannot
 * restore pipes to a process outside the dump, such as this runner).
 * checkpoint --leave-running; checkpoint (the process ends, its GPU is
 * free); restore --detach; the same image restored a second time, attached
 * (gpuckpt waits and returns the program's exit status); on 2 GPUs, restore
 * onto the other GPU. Data compared bit for bit with the first run each time.
 */
/** A program under `gpuckpt run` whose stdin is a named pipe and stdout a
 * file (appended), so CRIU can dump and restore it; talked to through them. */
function launchViaFifo(prog, args = []) {
  const dir = fs.mkdtempSync(path.join(tmpRoot, 'proc-'));
  const fifo = path.join(dir, 'in');
  const out = path.join(dir, 'out');
  if (spawnSync('mkfifo', [fifo]).status !== 0) throw failure('mkfifo failed');
  const file = path.isAbsolute(prog) ? prog : path.join(BIN_DIR, prog);
  const launcher = track(
    spawn('setsid', ['bash', '-c', 'exec "$0" run -- "$@" <"$FIFO" >>"$OUTF" 2>>"$OUTF.err"', GPUCKPT, file, ...args], {
      cwd: ROOT,
      env: { ...env, FIFO: fifo, OUTF: out },
      stdio: 'ignore',
      detached: true,
    }),
  );
  const w = fs.openSync(fifo, 'w'); // blocks until the program opens its stdin
  let lines = 0;
  let pid = 0; // from the program's first line that names it
  const errTail = () => tail(fs.existsSync(out + '.err') ? fs.readFileSync(out + '.err', 'utf8') : '');
  const nextLine = async (what, ms = 60_000) => {
    const t0 = Date.now();
    for (;;) {
      // Only whole lines: the program may be between the writes of one.
      const text = fs.existsSync(out) ? fs.readFileSync(out, 'utf8') : '';
      const all = text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter(Boolean);
      if (all.length > lines) {
        const line = all[lines++];
        let e;
        try {
          e = JSON.parse(line);
        } catch {
          throw failure(`${what}: the program printed a line that is not JSON: ${JSON.stringify(line.slice(0, 200))}`);
        }
        if (!pid && Number.isInteger(e.pid)) pid = e.pid;
        return e;
      }
      if (Date.now() - t0 > ms) throw failure(`${what}: no answer in ${ms / 1000} s`, [...processWhereabouts(pid), ...errTail()]);
      await sleep(50);
    }
  };
  /** `step` names the point of the scenario in a failure. */
  /** `readerMs`: how long an EPIPE may mean that the program is being
   * restored and has not opened its stdin yet (CRIU gives it its pid first). */
  const send = async (cmd, expect, ms = 60_000, step = cmd, readerMs = 0) => {
    for (const t0 = Date.now(); ; await sleep(50)) {
      try {
        fs.writeSync(w, cmd + '\n');
        break;
      } catch (e) {
        if (e.code === 'EPIPE' && Date.now() - t0 < readerMs) continue;
        // The program is gone; say what it printed last.
        throw failure(`${step}: cannot write to the program (${e.code ?? e.message}): it has ended`, errTail());
      }
    }
    const e = await nextLine(step, ms);
    if (e.event !== expect) throw failure(`${step}: got ${JSON.stringify(e).slice(0, 200)}`);
    return e;
  };
  const alive = (pid) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  const close = () => {
    try {
      fs.closeSync(w);
    } catch {}
    try {
      process.kill(-launcher.pid, 'SIGKILL');
    } catch {}
  };
  return { dir, w, nextLine, send, alive, close };
}

async function processScenario(name, prog) {
  if (spawnSync('criu', ['--version']).status !== 0) throw new Skip('criu not on PATH (source .device/setup.sh)');
  const { dir, w, nextLine, send, alive, close } = launchViaFifo(prog);
  try {
    const ready = await nextLine('ready', 120_000);
    const pid = ready.pid;
    const R = ready.buffers;
    const m = {};
    const ckA = await cliJson(['checkpoint', String(pid), '-o', path.join(dir, 'A'), '--leave-running', '--json'], 300_000);
    expectSame((await send('state', 'state', 60_000, 'state after checkpoint --leave-running')).buffers, R, 'state after checkpoint --leave-running');
    if (ckA.route !== 'gpu') throw failure(`checkpoint --leave-running went through host memory: ${ckA.whyThroughHost}`);
    m.leave_running_s = ckA.seconds;
    m.leave_running_pause_s = ckA.pauseSeconds;
    const ckB = await cliJson(['checkpoint', String(pid), '-o', path.join(dir, 'B'), '--json'], 300_000);
    for (let i = 0; i < 100 && alive(pid); i++) await sleep(50);
    if (alive(pid)) throw failure(`process ${pid} still runs after a checkpoint without --leave-running`);
    if (Object.keys(gpuMemoryOf(pid)).length) throw failure('GPU memory still held after the checkpoint');
    m.ckpt_s = ckB.seconds;
    m.ckpt_gpu_free_s = ckB.gpuFreeSeconds;
    m.ckpt_dump_s = ckB.dumpSeconds;
    m.image_MiB = Number((spawnSync('du', ['-sm', path.join(dir, 'B')], { encoding: 'utf8' }).stdout || '0').split('\t')[0]);
    const rs1 = await cliJson(['restore', path.join(dir, 'B'), '--detach', '--json'], 300_000);
    if (rs1.pid !== pid) throw failure(`restore --detach gave pid ${rs1.pid}, expected ${pid}`);
    expectSame((await send('state', 'state', 60_000, 'state after restore --detach')).buffers, R, 'state after restore --detach');
    m.restore_s = rs1.seconds;
    m.restore_criu_s = rs1.criuSeconds;
    fs.writeSync(w, 'quit\n');
    await nextLine('quit');
    for (let i = 0; i < 100 && alive(pid); i++) await sleep(50);
    // The same image again, attached: gpuckpt returns the program's exit status.
    const uuids = gpuUuids();
    const args = ['restore', path.join(dir, 'B'), ...(uuids.length >= 2 ? ['--device', '1'] : [])];
    const attached = runCli(args, 300_000, { GPUCKPT_LOG: 'debug' });
    const second = await send('state', 'state', 60_000, 'state after the second restore', 60_000).catch((e) => {
      throw failure(e.message, [...(e.diag ?? []), '  the attached restore so far:', ...tail(attached.stderrSoFar(), 20)]);
    });
    expectSame(second.buffers, R, 'state after the second restore of the same image');
    if (uuids.length >= 2) {
      const on = gpuMemoryOf(pid);
      if (!on[uuids[1]]) throw failure(`restored with --device 1, nvidia-smi shows ${JSON.stringify(on)}`);
    }
    fs.writeSync(w, 'quit 3\n'); // a status of its own: the attached restore must end with it
    const r = await attached;
    if (r.code !== 3) throw failure(`restore (attached) returned ${describeExit(r)}; the program exited with 3`, tail(r.stderr));
    measure(name, m);
    return `checkpoint --leave-running, checkpoint (process gone, GPU free), restore --detach, and a second attached restore${uuids.length >= 2 ? ' onto GPU 1' : ''} of the same image: data bit for bit each time, exit status passed through`;
  } finally {
    close();
  }
}

/**
 * CRIU alone, with gpuckpt's plugin (build/criu): `criu dump` of a process
 * under the shim frees its GPU and puts its pool among CRIU's files;
 * `criu restore` brings it back bit for bit, then again onto GPU 1
 * (GPUCKPT_RESTORE_DEVICE), and a dump with --leave-running lets it run on.
 */
async function criuPluginScenario(name) {
  if (spawnSync('criu', ['--version']).status !== 0) throw new Skip('criu not on PATH (source .device/setup.sh)');
  const plugins = path.join(ROOT, 'build', 'criu');
  const { dir, nextLine, send, alive, close } = launchViaFifo('static_cudart');
  const criu = (args, extra = {}) => {
    const r = spawnSync('criu', [...args, '-L', plugins, '-v4'], { encoding: 'utf8', timeout: 300_000, env: { ...env, ...extra } });
    if (r.status !== 0) {
      const log = path.join(args[args.indexOf('-D') + 1], `${args[0]}.log`);
      const text = fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : r.stderr;
      throw failure(`criu ${args[0]} failed (${describeExit({ code: r.status, signal: r.signal })}): ${text.split('\n').find((l) => /Error|gpuckpt/.test(l)) ?? ''}`, tail(text));
    }
  };
  const waitActive = async (pid, what) => {
    for (let i = 0; i < 600; i++) {
      const row = (await cliJson(['ps', '--json'])).find((r) => r.pid === pid);
      if (row?.poolState === 'active') return;
      await sleep(50);
    }
    throw failure(`${what}: process ${pid} never resumed (see the run dir's logs/criu-plugin-${pid}.log)`);
  };
  try {
    const ready = await nextLine('ready', 120_000);
    const pid = ready.pid;
    const R = ready.buffers;
    const m = {};
    const round = async (images, extra, what) => {
      fs.mkdirSync(images);
      let t = Date.now();
      criu(['dump', '-t', String(pid), '-D', images, '-o', 'dump.log']);
      m[`${what}_dump_s`] = (Date.now() - t) / 1000;
      for (let i = 0; i < 100 && alive(pid); i++) await sleep(50);
      if (alive(pid)) throw failure(`${what}: process ${pid} still runs after criu dump`);
      if (!fs.existsSync(path.join(images, `gpuckpt-pool-${pid}`, 'manifest'))) throw failure(`${what}: no pool image among CRIU's files`);
      t = Date.now();
      criu(['restore', '-D', images, '-o', 'restore.log', '--restore-detached'], extra);
      await waitActive(pid, what);
      m[`${what}_restore_s`] = (Date.now() - t) / 1000;
      expectSame((await send('state', 'state')).buffers, R, `state after criu restore (${what})`);
    };
    await round(path.join(dir, 'same'), {}, 'same_gpu');
    const uuids = gpuUuids();
    if (uuids.length >= 2) {
      await round(path.join(dir, 'other'), { GPUCKPT_RESTORE_DEVICE: '1' }, 'gpu1');
      if (!gpuMemoryOf(pid)[uuids[1]]) throw failure(`restored onto GPU 1, nvidia-smi shows ${JSON.stringify(gpuMemoryOf(pid))}`);
    }
    const left = path.join(dir, 'left');
    fs.mkdirSync(left);
    criu(['dump', '-t', String(pid), '-D', left, '-o', 'dump.log', '--leave-running']);
    await waitActive(pid, 'criu dump --leave-running');
    expectSame((await send('state', 'state')).buffers, R, 'state after criu dump --leave-running');
    measure(name, m);
    return `criu dump (process gone, pool among CRIU's files) and criu restore with the plugin${uuids.length >= 2 ? ', on the same GPU and onto GPU 1' : ''}, and criu dump --leave-running: data bit for bit each time`;
  } finally {
    close();
  }
}

/** The python3 that has the job's framework, and the job's script; or Skip. */
function pythonJob(job) {
  const py = (spawnSync('bash', ['-c', 'command -v python3'], { encoding: 'utf8' }).stdout ?? '').trim();
  const probe = job === 'torch' ? 'import torch; assert torch.cuda.is_available()' : 'import cupy; cupy.zeros(1)';
  if (!py || spawnSync(py, ['-c', probe]).status !== 0) throw new Skip(`no ${job === 'torch' ? 'PyTorch' : 'CuPy'} with CUDA here`);
  return { py, script: path.join(ROOT, 'test', 'gpu', 'apps', job === 'torch' ? 'torch_train.py' : 'cupy_job.py') };
}

/**
 * A deterministic job (the PyTorch job of DESIGN.md, or a CuPy one): its trajectory across a
 * suspend/resume and (on 2 GPUs) a migrate must be bit-identical to an
 * uninterrupted run's.
 */
async function jobScenario(name, job) {
  const { py, script } = pythonJob(job);
  const steps = Number(env.GPU_TEST_TORCH_STEPS ?? 6);
  const start = async (label) => {
    const a = new App(label, py, [script]);
    const r = await a.next('ready', 240_000);
    if (r.event !== 'ready') throw failure(`${label}: ${JSON.stringify(r).slice(0, 200)}`);
    return a;
  };
  const train = async (a) => (await a.send(`train ${steps}`, 'trained', 300_000)).losses;

  const ref = await start(`${name}/reference`);
  const want = [...(await train(ref)), ...(await train(ref)), ...(await train(ref))];
  await ref.quit();

  const app = await start(name);
  const got = [...(await train(app))];
  const m = {};
  const row = (await cliJson(['ps', '--json'])).find((r) => r.pid === app.pid);
  m.pool_MiB = row ? Math.round(row.devices.reduce((s, d) => s + d.bytesInUse, 0) / MiB) : -1;
  const sus = await cliJson(['suspend', String(app.pid), '--json'], 300_000);
  if (Object.keys(gpuMemoryOf(app.pid)).length) throw failure('the suspended job still holds GPU memory');
  const res = await cliJson(['resume', String(app.pid), '--json'], 300_000);
  m.suspend_s = sus.seconds;
  m.resume_s = res.seconds;
  got.push(...(await train(app)));
  if (gpuUuids().length >= 2) {
    const mig = await cliJson(['migrate', String(app.pid), '--to-device', '1', '--json'], 300_000);
    m.migrate_downtime_s = mig.downtimeSeconds;
  }
  got.push(...(await train(app)));
  await app.quit();
  const diff = want.findIndex((l, i) => got[i] !== l);
  if (diff >= 0 || got.length !== want.length) throw failure(`loss ${diff} differs: ${got[diff]} vs ${want[diff]} uninterrupted`);
  measure(name, m);
  return `${want.length} steps: loss trajectory across suspend/resume${m.migrate_downtime_s !== undefined ? ' and a migrate to GPU 1' : ''} bit-identical to an uninterrupted run`;
}

/**
 * Failures on a real GPU: a CRIU dump failing midway (the fake CRIU of
 * test/fake-criu fails it after the real driver has frozen the process and
 * the pool was released) must leave the process running with its data; on
 * 2 GPUs, a target GPU without room must leave it suspended, and a resume on
 * the other GPU must work.
 */
async function processFailuresScenario(name) {
  const app = new App(name, 'static_cudart');
  const R = (await app.ready()).buffers;
  const pid = String(app.pid);
  const cli = (args, extra = {}) => spawnSync(GPUCKPT, args, { cwd: ROOT, env: { ...env, ...extra }, encoding: 'utf8', timeout: 300_000 });
  const snap = snapPath(name);
  const dump = cli(['checkpoint', pid, '-o', snap, '--criu', path.join(ROOT, 'test', 'fake-criu', 'criu')], { FAKE_CRIU_FAIL: 'dump' });
  if (dump.status !== 1 || !/criu dump of process \d+ failed: .*resumed/.test(dump.stderr)) throw failure(`failing dump: ${describeExit({ code: dump.status, signal: dump.signal })}: ${dump.stderr.trim()}`);
  if (fs.existsSync(snap)) throw failure('a failed dump left an image behind');
  expectSame((await app.send('state', 'state')).buffers, R, 'state after a failed dump');
  let detail = 'a CRIU dump failing midway left the process running with its data and no image';
  if (gpuUuids().length >= 2) {
    const hog = track(spawn('python3', ['-c', "import torch,time; f,t=torch.cuda.mem_get_info(1); x=torch.empty(f-(200<<20), dtype=torch.uint8, device='cuda:1'); print('held', flush=True); time.sleep(600)"], { env, stdio: ['ignore', 'pipe', 'pipe'] }));
    await new Promise((res, rej) => {
      hog.stdout.on('data', (d) => /held/.test(String(d)) && res());
      hog.on('exit', () => rej(failure('the memory hog on GPU 1 did not start')));
    });
    try {
      const sus = cli(['suspend', pid]);
      if (sus.status !== 0) throw failure(`suspend: ${sus.stderr.trim()}`);
      const full = cli(['resume', pid, '--device', '1']);
      if (full.status !== 3 || !/stays suspended/.test(full.stderr) || full.stderr.trim().split('\n').length !== 1) throw failure(`resume onto a full GPU: ${describeExit({ code: full.status, signal: full.signal })}: ${full.stderr.trim()}`);
      const row = (await cliJson(['ps', '--json'])).find((r) => r.pid === app.pid);
      if (row?.poolState !== 'suspended') throw failure(`after the refused resume the process is ${row?.poolState}, not suspended`);
      const ok = cli(['resume', pid, '--device', '0']);
      if (ok.status !== 0) throw failure(`resume on GPU 0 after the refusal: ${ok.stderr.trim()}`);
      expectSame((await app.send('state', 'state')).buffers, R, 'state after resuming on the other GPU');
      detail += `; resume onto a full GPU 1 refused in one line ("${full.stderr.trim().slice(9, 90)}…"), process stayed suspended, resume on GPU 0 worked`;
    } finally {
      hog.kill('SIGKILL');
    }
  }
  await app.quit();
  return detail;
}

/**
 * A program attached to a terminal (a pty from script(1)): checkpointed as a
 * whole process and restored into a new terminal, as a shell job.
 */
async function terminalScenario(name) {
  if (spawnSync('criu', ['--version']).status !== 0) throw new Skip('criu not on PATH (source .device/setup.sh)');
  if (spawnSync('script', ['--version']).status !== 0) throw new Skip('script(1) not installed');
  const dir = fs.mkdtempSync(path.join(tmpRoot, 'tty-'));
  const file = path.join(BIN_DIR, 'static_cudart');
  const inTerminal = (label, command) => {
    const fifo = path.join(dir, `${label}.in`);
    const log = path.join(dir, `${label}.log`);
    spawnSync('mkfifo', [fifo]);
    const child = track(spawn('setsid', ['bash', '-c', 'exec script -qfc "$0" "$1" <"$2" >/dev/null', command, log, fifo], { cwd: ROOT, env, stdio: 'ignore', detached: true }));
    const w = fs.openSync(fifo, 'w');
    let seen = 0;
    const next = async (what, ms = 120_000) => {
      const t0 = Date.now();
      for (;;) {
        // A terminal mixes the program's lines with echoed input and with
        // gpuckpt's progress (escape codes, same line): take each JSON event
        // from where it starts.
        const json = (fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '')
          .split(/\r?\n/)
          .map((l) => l.slice(Math.max(0, l.indexOf('{"event"'))))
          .filter((l) => l.startsWith('{"event"'));
        if (json.length > seen) return JSON.parse(json[seen++]);
        if (Date.now() - t0 > ms) throw failure(`${label}: ${what}: no answer`, tail(fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : ''));
        await sleep(50);
      }
    };
    const send = async (cmd, expect) => {
      fs.writeSync(w, cmd + '\n');
      const e = await next(cmd);
      if (e.event !== expect) throw failure(`${label}: ${cmd}: ${JSON.stringify(e).slice(0, 150)}`);
      return e;
    };
    const close = () => {
      try {
        fs.closeSync(w);
      } catch {}
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    };
    return { next, send, close };
  };
  const first = inTerminal('first', `${GPUCKPT} run -- ${file}`);
  let second;
  try {
    const ready = await first.next('ready');
    const snap = path.join(dir, 'snap');
    await cliJson(['checkpoint', String(ready.pid), '-o', snap, '--json'], 300_000);
    if (!JSON.parse(fs.readFileSync(path.join(snap, 'criu', 'gpuckpt-process.json'), 'utf8')).shellJob) throw failure('the image does not record a shell job');
    second = inTerminal('second', `${GPUCKPT} restore ${snap}`);
    expectSame((await second.send('state', 'state')).buffers, ready.buffers, 'state in the new terminal');
    await second.send('quit', 'bye');
    return 'a terminal-attached program was checkpointed as a shell job and restored into a new terminal with its data';
  } finally {
    first.close();
    second?.close();
  }
}

/**
 * A deterministic job (PyTorch or CuPy) checkpointed mid-run as a whole process and restored, then
 * the anchor (driver checkpoint API + CRIU) on the same job: both must
 * continue on the uninterrupted loss trajectory; times and image sizes side
 * by side.
 */
async function jobProcessScenario(name, job) {
  if (spawnSync('criu', ['--version']).status !== 0) throw new Skip('criu not on PATH (source .device/setup.sh)');
  const { py, script } = pythonJob(job);
  const steps = Number(env.GPU_TEST_TORCH_STEPS ?? 6);
  const ref = new App(`${name}/reference`, py, [script]);
  if ((await ref.next('ready', 240_000)).event !== 'ready') throw failure('reference run did not start');
  const want = [];
  for (let i = 0; i < 4; i++) want.push(...(await ref.send(`train ${steps}`, 'trained', 300_000)).losses);
  await ref.quit();

  const p = launchViaFifo(py, [script]);
  const du = (d) => Number((spawnSync('du', ['-sm', d], { encoding: 'utf8' }).stdout || '0').split('\t')[0]);
  const waitGone = async (pid) => {
    for (let i = 0; i < 600 && p.alive(pid); i++) await sleep(50);
    if (p.alive(pid)) throw failure(`process ${pid} still runs after its checkpoint`);
  };
  const step = (pid, s) => {
    const r = spawnSync(path.join(BIN_DIR, 'driver_ckpt'), [String(pid), s], { encoding: 'utf8', timeout: 300_000 });
    if (r.status !== 0) throw failure(`driver ${s} of ${pid}: ${(r.stdout || r.stderr || '').trim()}`);
  };
  const criu = (args) => {
    const r = spawnSync('criu', args, { encoding: 'utf8', timeout: 300_000 });
    if (r.status !== 0) throw failure(`criu ${args[0]} failed (${describeExit({ code: r.status, signal: r.signal })})`);
  };
  try {
    const ready = await p.nextLine('ready', 240_000);
    const pid = ready.pid;
    // A --gpu-only image taken while it trains: the framework hook answers
    // inside the pause, or the image says why it took the whole pool.
    const training = p.send(`train ${steps}`, 'trained', 300_000);
    await sleep(300);
    const mid = await cliJson(['checkpoint', String(pid), '--gpu-only', '-o', path.join(p.dir, 'mid-training'), '--json'], 600_000);
    fs.rmSync(path.join(p.dir, 'mid-training'), { recursive: true, force: true });
    const got = [...(await training).losses];
    const m = job === 'torch' ? { ...(await liveBytes(p, pid)), mid_training_unused_MB: mb(mid.framework?.unusedBytes ?? 0), mid_training_why: mid.framework?.wholePoolBecause ?? '' } : {};
    const sameAs = (losses, from, what) => {
      const d = losses.findIndex((l, i) => l !== want[from + i]);
      if (d >= 0) throw failure(`${what}: loss ${from + d} differs: ${losses[d]} vs ${want[from + d]} uninterrupted`);
    };

    // checkpoint --leave-running: the job trains on after a short pause;
    // killed, it comes back from that image where the pause was.
    const left = path.join(p.dir, 'left-running');
    const lr = await cliJson(['checkpoint', String(pid), '-o', left, '--leave-running', '--json'], 600_000);
    if (lr.route !== 'gpu') throw failure(`checkpoint --leave-running went through host memory: ${lr.whyThroughHost}`);
    sameAs((await p.send(`train ${steps}`, 'trained', 300_000)).losses, got.length, 'training on after checkpoint --leave-running');
    process.kill(pid, 'SIGKILL');
    await waitGone(pid);
    await cliJson(['restore', left, '--detach', '--json'], 600_000);
    got.push(...(await p.send(`train ${steps}`, 'trained', 300_000)).losses);
    Object.assign(m, { leave_running_pause_s: lr.pauseSeconds, leave_running_s: lr.seconds });

    const ours = path.join(p.dir, 'gpuckpt');
    const ck = await cliJson(['checkpoint', String(pid), '-o', ours, '--json'], 600_000);
    // PyTorch's unused memory left out, and the job still bit-identical after the restore.
    if (job === 'torch' && !ck.notes.some((n) => /PyTorch: .* left out/.test(n))) throw failure(`the whole-process image took PyTorch's unused memory: ${ck.notes.join('; ')}`);
    await waitGone(pid);
    const rs = await cliJson(['restore', ours, '--detach', '--json'], 600_000);
    got.push(...(await p.send(`train ${steps}`, 'trained', 300_000)).losses);
    Object.assign(m, { ckpt_s: ck.seconds, gpu_free_s: ck.gpuFreeSeconds, image_MB: Math.round(du(ours) * 1.048576), restore_s: rs.seconds });

    const anchorDir = path.join(p.dir, 'anchor');
    fs.mkdirSync(anchorDir);
    let t = Date.now();
    step(pid, 'lock');
    step(pid, 'checkpoint');
    const driverCk = (Date.now() - t) / 1000;
    criu(['dump', '-t', String(pid), '-D', anchorDir, '-o', 'dump.log']);
    const anchorCk = (Date.now() - t) / 1000;
    await waitGone(pid);
    t = Date.now();
    criu(['restore', '-D', anchorDir, '-o', 'restore.log', '--restore-detached']);
    step(pid, 'restore');
    step(pid, 'unlock');
    const anchorRs = (Date.now() - t) / 1000;
    got.push(...(await p.send(`train ${steps}`, 'trained', 300_000)).losses);
    Object.assign(m, { anchor_ckpt_s: anchorCk, anchor_driver_ckpt_s: driverCk, anchor_image_MB: Math.round(du(anchorDir) * 1.048576), anchor_restore_s: anchorRs });
    await p.send('quit', 'bye');

    const diff = want.findIndex((l, i) => got[i] !== l);
    if (diff >= 0 || got.length !== want.length) throw failure(`loss ${diff} differs: ${got[diff]} vs ${want[diff]} uninterrupted`);
    measure(name, m);
    return `${want.length} steps: after a checkpoint --leave-running (paused ${fmt(lr.pauseSeconds)} s, pool copied on the GPU) both the job training on and the image restored after a kill, after a gpuckpt checkpoint + restore and after the anchor's, the loss trajectory is bit-identical to an uninterrupted run (checkpoint ${fmt(ck.seconds)} s vs anchor ${fmt(anchorCk)} s)`;
  } finally {
    p.close();
  }
}

const mb = (bytes) => Math.round(bytes / 1e6);

/**
 * The PyTorch job idle: a --gpu-only image holds at most
 * memory_allocated() + 5 % of raw bytes (what the caching allocator holds
 * unused left out), beside one of the whole pool (--whole-pool).
 */
async function liveBytes(p, pid) {
  const mem = await p.send('memory', 'memory');
  const image = (name, more) => cliJson(['checkpoint', String(pid), '--gpu-only', '-o', path.join(p.dir, name), ...more, '--json'], 600_000).finally(() => fs.rmSync(path.join(p.dir, name), { recursive: true, force: true }));
  const live = await image('live-bytes', []);
  const whole = await image('whole-pool', ['--whole-pool']);
  if (!live.framework || live.framework.wholePoolBecause) throw failure(`the image took the whole pool: ${live.framework?.wholePoolBecause ?? 'no framework hook answered'}`);
  if (live.rawBytes > mem.allocated * 1.05) throw failure(`the image holds ${mb(live.rawBytes)} MB raw, more than memory_allocated() ${mb(mem.allocated)} MB + 5 %`);
  return {
    allocated_MB: mb(mem.allocated),
    reserved_MB: mb(mem.reserved),
    pool_MB: mb(live.poolBytes),
    unused_MB: mb(live.framework.unusedBytes),
    live_raw_MB: mb(live.rawBytes),
    live_stored_MB: mb(live.storedBytes),
    live_pause_s: live.pauseSeconds,
    live_s: live.seconds,
    framework_s: live.framework.seconds,
    whole_raw_MB: mb(whole.rawBytes),
    whole_stored_MB: mb(whole.storedBytes),
    whole_pause_s: whole.pauseSeconds,
    whole_s: whole.seconds,
  };
}

/**
 * suspend / resume / migrate on one process: after suspend nvidia-smi shows
 * no memory for it; after resume (and each migrate) its data is intact at
 * the same addresses, and it runs on the GPU it was sent to.
 */
async function suspendScenario(name, prog, args, gpus, cycles = 2) {
  const { driverKeeperPid } = await import('../../dist/controller/adapters/driver-keeper.js');
  const app = new App(name, prog, args);
  const R = (await app.ready(240_000)).buffers;
  const before = gpuMemoryOf(app.pid);
  if (Object.keys(before).length === 0) throw failure('nvidia-smi shows no GPU memory for the running program');
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const runs = { suspend_s: [], gpu_free_s: [], pool_released_s: [], suspend_copy_GBps: [], resume_s: [], resume_driver_s: [], resume_copy_GBps: [], migrate_downtime_s: [], migrate_back_downtime_s: [] };
  const uuids = gpuUuids();
  for (let i = 0; i < cycles; i++) {
    const sus = await cliJson(['suspend', String(app.pid), '--json'], 300_000);
    const during = gpuMemoryOf(app.pid);
    if (Object.keys(during).length !== 0) throw failure(`suspended, yet nvidia-smi shows ${JSON.stringify(during)} MiB for it`);
    const keeper = driverKeeperPid(app.pid);
    if (!sus.driverKept || !keeper || !running(keeper)) throw failure(`suspend left no running driver keeper (driverKept ${sus.driverKept}, pid ${keeper})`);
    if (Object.keys(gpuMemoryOf(keeper)).length) throw failure(`the driver keeper holds GPU memory: ${JSON.stringify(gpuMemoryOf(keeper))}`);
    const res = await cliJson(['resume', String(app.pid), '--json'], 300_000);
    // The second cycle's suspend copies into the host memory the first one kept.
    expectSame((await app.send('state', 'state')).buffers, R, `state after suspend + resume ${i + 1}`);
    for (let t = 0; t < 100 && running(keeper); t++) await sleep(20);
    if (running(keeper)) throw failure('the driver keeper still runs after the resume');
    runs.suspend_s.push(sus.seconds);
    runs.gpu_free_s.push(sus.gpuFreeSeconds);
    runs.pool_released_s.push(sus.poolReleasedSeconds);
    runs.suspend_copy_GBps.push(sus.copyGBps);
    (runs.zero_GiB ??= []).push(sus.zeroBytes / 2 ** 30);
    runs.resume_s.push(res.seconds);
    runs.resume_driver_s.push(res.driverRestoreSeconds);
    runs.resume_copy_GBps.push(res.copyGBps);
    // Where each command's time went, step by step (medians below).
    for (const [step, sec] of Object.entries(sus.phases ?? {})) (runs[`suspend.${step}_s`] ??= []).push(sec);
    for (const [step, sec] of Object.entries(res.phases ?? {})) (runs[`resume.${step}_s`] ??= []).push(sec);
    if (uuids.length >= 2) {
      // There GPU to GPU (where NVLink joins them), back through host memory: both routes, each checked.
      const mig = await cliJson(['migrate', String(app.pid), '--to-device', '1', '--json'], 300_000);
      expectSame((await app.send('state', 'state')).buffers, R, 'state after migrate to GPU 1');
      if (mig.route !== 'gpu' && nvlinked(0, 1)) throw failure(`migrate went through host memory although NVLink joins GPU 0 and 1: ${mig.whyThroughHost}`);
      const on1 = gpuMemoryOf(app.pid);
      if (!on1[uuids[1]] || on1[uuids[0]]) throw failure(`after migrate to GPU 1 nvidia-smi shows ${JSON.stringify(on1)}`);
      const back = await cliJson(['migrate', String(app.pid), '--to-device', '0', '--via-host', '--json'], 300_000);
      expectSame((await app.send('state', 'state')).buffers, R, 'state after migrate back to GPU 0 through host memory');
      const on0 = gpuMemoryOf(app.pid);
      if (!on0[uuids[0]] || on0[uuids[1]]) throw failure(`after migrate back to GPU 0 nvidia-smi shows ${JSON.stringify(on0)}`);
      runs.migrate_downtime_s.push(mig.downtimeSeconds);
      runs.migrate_back_downtime_s.push(back.downtimeSeconds);
      runs.migrate_route = [mig.route === 'gpu' ? 'GPU to GPU' : `through host memory (${mig.whyThroughHost})`];
      for (const [step, sec] of Object.entries(mig.suspend.phases ?? {})) (runs[`migrate.suspend.${step}_s`] ??= []).push(sec);
      for (const [step, sec] of Object.entries(mig.resume.phases ?? {})) (runs[`migrate.resume.${step}_s`] ??= []).push(sec);
    }
  }
  const m = { cycles };
  for (const [k, v] of Object.entries(runs)) if (v.length) m[k] = median(v);
  if (prog === 'pool_fill' && !(m.zero_GiB > 0)) throw failure('the suspend left none of pool_fill\'s zero regions on the GPU');
  if (cycles > 1) m.all_suspend_s = runs.suspend_s.join(',');
  let detail = `suspend freed the GPU (nvidia-smi: no memory for pid ${app.pid}; its driver keeper held none and was gone after the resume), resume restored the data bit for bit (${fmt(m.zero_GiB)} GiB of all-zero blocks left on the GPU and zeroed again)${cycles > 1 ? ` (${cycles} cycles, the later ones into the host memory the first kept)` : ''}`;
  if (runs.migrate_downtime_s.length)
    detail += `; migrate to GPU 1 (${runs.migrate_route[0]}) and back through host memory kept the data (median downtime ${fmt(m.migrate_downtime_s)} s / ${fmt(m.migrate_back_downtime_s)} s)`;
  // The program still computes after all of it.
  const M = (await app.send('mutate', 'mutated')).buffers;
  expectAllDiffer(M, R, 'mutate after resume');
  await app.quit();
  measure(name, m);
  return detail;
}

/**
 * threads: 3 live checkpoints while 8 threads x 4 streams churn (each
 * followed by state == ready, errors 0, workers still progressing), then
 * stop -> checkpoint -> mutate -> restore --into -> state == ready, errors 0.
 */
async function threadsScenario(name) {
  const app = new App(name, 'threads');
  const ready = await app.ready();
  const R = ready.buffers;
  firstReady.set(name, R);
  const pool = await poolOf(app.pid);
  expectInPool(R, pool, 'ready');
  const check = (s, what, wantRunning) => {
    expectSame(s.buffers, R, what);
    if (s.errors !== 0) throw app.error(`${what}: workers report ${s.errors} errors (scratch verification or CUDA calls)`);
    if (s.running !== wantRunning) throw failure(`${what}: running is ${s.running}`);
  };
  await sleep(1000);
  let s = await app.send('state', 'state');
  check(s, 'state under load', true);
  if (!(s.iterations > 0)) throw failure(`workers made no progress in 1 s (iterations ${s.iterations})`);
  const loaded = [];
  for (let k = 1; k <= 3; k++) {
    const before = s.iterations;
    const snapK = snapPath(name);
    const ck = await checkpoint(app, snapK, R, 120_000);
    s = await app.send('state', 'state');
    check(s, `state after live checkpoint ${k} under load`, true);
    if (!(s.iterations > before)) throw failure(`workers stalled across checkpoint ${k} (iterations ${before} -> ${s.iterations})`);
    loaded.push({ ck, maxRoundMs: s.maxRoundMs, iters: s.iterations - before });
    if (k === 1) await inspect(snapK, R); // an image taken under load is complete too
    await sleep(300);
  }
  s = await app.send('stop', 'stopped', 120_000);
  check(s, 'stop', false);
  const iterations = s.iterations;
  const snap = snapPath(name);
  const ck = await checkpoint(app, snap, R, 120_000);
  expectAllDiffer((await app.send('mutate', 'mutated')).buffers, R, 'mutate after stop');
  const rs = await restore(app, snap, ck, 120_000);
  s = await app.send('state', 'state');
  check(s, 'state after restore --into (must equal ready)', false);
  await inspect(snap, R);
  await app.quit();
  measure(name, {
    threads: ready.threads ?? '?',
    iterations,
    errors: s.errors,
    ckpt_under_load_s: loaded.map((l) => fmt(l.ck.seconds)).join(','),
    pause_under_load_s: loaded.map((l) => fmt(l.ck.pauseSeconds)).join(','),
    allocs_under_load: loaded.map((l) => l.ck.allocations).join(','),
    max_worker_round_ms: loaded.map((l) => fmt(l.maxRoundMs ?? NaN)).join(','),
    ...ckMeasures('stopped_ckpt_', ck),
    ...ckMeasures('restore_', rs),
  });
  return {
    detail:
      `${R.length} persistent buffers; 3 live checkpoints under load (${loaded.map((l) => l.ck.allocations).join('/')} allocations), ` +
      `state intact and 0 errors after each; ${iterations} worker rounds; stop + mutate + restore rolled back bit for bit`,
    value: { ready: R },
  };
}

async function bench() {
  const runOne = async (shim) => {
    const app = new App('bench_alloc', 'bench_alloc', [], { shim });
    const m = await app.next('bench', 180_000);
    if (m.event !== 'bench' || !NUM(m, 'mallocFreeNs') || !NUM(m, 'launchesPerSec'))
      throw app.error(`bench: unexpected line ${JSON.stringify(m).slice(0, 200)}`);
    const s = await app.waitExit(30_000);
    if (s.code !== 0) throw app.error(`bench_alloc ended with ${describeExit(s)}`);
    return m;
  };
  const plain = await runOne(false);
  const shim = await runOne(true);
  const mr = shim.mallocFreeNs / plain.mallocFreeNs;
  const lr = shim.launchesPerSec / plain.launchesPerSec;
  measure('bench_alloc', {
    malloc_free_ns_plain: plain.mallocFreeNs,
    malloc_free_ns_shim: shim.mallocFreeNs,
    malloc_free_ratio: mr,
    launches_per_s_plain: Math.round(plain.launchesPerSec),
    launches_per_s_shim: Math.round(shim.launchesPerSec),
    launch_rate_ratio: lr,
    reps: plain.reps,
  });
  return (
    `cudaMalloc(1 MiB)+cudaFree median ${fmt(plain.mallocFreeNs)} ns plain, ${fmt(shim.mallocFreeNs)} ns under the shim (x${fmt(mr)}); ` +
    `empty launches ${Math.round(plain.launchesPerSec)}/s plain, ${Math.round(shim.launchesPerSec)}/s under the shim (x${fmt(lr)})`
  );
}

function gpuInfo() {
  const r = spawnSync('nvidia-smi', ['--query-gpu=index,name,memory.total,memory.free,driver_version', '--format=csv,noheader,nounits'], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (r.status !== 0 || !r.stdout) return [];
  return r.stdout
    .trim()
    .split('\n')
    .map((l) => l.split(',').map((s) => s.trim()))
    .map(([index, name, total, free, driver]) => ({ index: Number(index), name, totalMiB: Number(total), freeMiB: Number(free), driver }));
}

/** Size of pool_fill: 16 GiB if >= 40 GB are free on GPU 0 (and the disk can
 * take the image), else scaled down. */
function poolFillSize(gpus) {
  if (env.GPU_TEST_POOL_GIB) return { gib: Number(env.GPU_TEST_POOL_GIB), note: 'size from GPU_TEST_POOL_GIB' };
  if (SUITE === 'quick') return { gib: 2, note: 'the quick suite; GPU_TEST_SUITE=long for 16 GiB' };
  let gib = 16;
  const notes = [];
  const freeBytes = gpus[0] ? gpus[0].freeMiB * MiB : NaN;
  if (!(freeBytes >= 40e9)) {
    gib = Number.isFinite(freeBytes) ? Math.max(1, Math.floor((freeBytes * 0.35) / GiB)) : 4;
    notes.push(`scaled down from 16 GiB: ${Number.isFinite(freeBytes) ? (freeBytes / 1e9).toFixed(1) + ' GB' : 'unknown memory'} free on GPU 0 (< 40 GB)`);
  }
  try {
    const st = fs.statfsSync(tmpRoot);
    const avail = st.bavail * st.bsize;
    const need = (g) => g * GiB * 0.75 + 2 * GiB; // image of the mixed content, with margin
    if (avail < need(gib)) {
      const g = Math.max(1, Math.floor((avail - 2 * GiB) / (0.75 * GiB)));
      notes.push(`scaled down to ${g} GiB: ${(avail / GiB).toFixed(1)} GiB free on the image disk`);
      gib = Math.min(gib, g);
    }
  } catch {
    /* statfs unavailable: keep the size */
  }
  return { gib, note: notes.join('; ') };
}

/** Medians of repeated gpuckpt checkpoints and restores of one pool_fill
 * process, and of the driver checkpoint API (the anchor) on the same
 * process, data verified after each. GPU_TEST_BENCH_RUNS sets the count. */
async function poolFillBench(gib) {
  const runs = Number(env.GPU_TEST_BENCH_RUNS ?? 3);
  if (!(runs > 0)) return;
  const app = new App('pool_fill/bench', 'pool_fill', [String(gib)]);
  const R = (await app.ready(240_000)).buffers;
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const ours = { pause: [], total: [], copy: [], restore: [], restorePause: [] };
  const anchor = { checkpoint: [], restore: [], lock: [], unlock: [] };
  for (let i = 0; i < runs; i++) {
    const snap = snapPath('pool_fill-bench');
    const ck = await checkpoint(app, snap, R, 300_000);
    const rs = await restore(app, snap, ck, 300_000);
    expectSame((await app.send('state', 'state')).buffers, R, `state after bench restore ${i + 1}`);
    fs.rmSync(snap, { recursive: true, force: true });
    ours.pause.push(ck.pauseSeconds);
    ours.total.push(ck.seconds);
    ours.copy.push(ck.copyGBps);
    ours.restore.push(rs.seconds);
    ours.restorePause.push(rs.pauseSeconds);
    const a = await anchorRun(app.pid);
    expectSame((await app.send('state', 'state')).buffers, R, `state after driver checkpoint/restore ${i + 1}`);
    anchor.checkpoint.push(a.lock_s + a.checkpoint_s);
    anchor.restore.push(a.restore_s + a.unlock_s);
  }
  await app.quit();
  measure('pool_fill/bench', {
    GiB: gib,
    runs,
    median_pause_s: median(ours.pause),
    median_ckpt_s: median(ours.total),
    median_copy_GBps: median(ours.copy),
    median_restore_s: median(ours.restore),
    median_restore_pause_s: median(ours.restorePause),
    anchor_driver_ckpt_s: median(anchor.checkpoint),
    anchor_driver_restore_s: median(anchor.restore),
    all_pause_s: ours.pause.join(','),
    all_anchor_ckpt_s: anchor.checkpoint.map((x) => x.toFixed(3)).join(','),
  });
}

function anchorRun(pid) {
  const r = spawnSync(path.join(BIN_DIR, 'driver_ckpt'), [String(pid)], { encoding: 'utf8', timeout: 180_000 });
  const line = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  let j;
  try {
    j = JSON.parse(line);
  } catch {
    throw failure(`driver_ckpt ${pid}: ${describeExit({ code: r.status, signal: r.signal })}`, tail(r.stderr ?? ''));
  }
  if (j.event !== 'anchor') throw failure(`driver_ckpt ${pid}: ${line}`);
  return j;
}

// ------------------------------------------------------------------- main --

async function main() {
  const gpus = gpuInfo();
  for (const g of gpus) say(`# GPU ${g.index}: ${g.name}, ${g.totalMiB} MiB, ${g.freeMiB} MiB free, driver ${g.driver}`);
  say(`# programs from ${BIN_DIR}, CLI ${GPUCKPT}, images in ${tmpRoot}; ${ONLY.length ? `tests ${ONLY.join(',')}` : `the ${SUITE} suite`}`);
  if (env.GPU_RUN_MODE === 'bench') {
    const { runBench } = await import('./bench.mjs');
    await runBench({ ROOT, BIN_DIR, tmpRoot, App, test, Skip, failure, say, sleep, cliJson, launchViaFifo, expectSame, gpuMemoryOf, gpuUuids, gpuInfo, nvlinked, pythonJob, describeExit, snapPath });
    return;
  }

  const plain = await test('static_cudart/no-shim', noShim);

  let cliBroken = null;
  if (selected('cli')) {
    await test('cli', async () => {
      try {
        const list = await cliJson(['ps', '--json'], 30_000);
        if (!Array.isArray(list)) throw failure(`ps --json printed ${JSON.stringify(list).slice(0, 100)}, not an array`);
        return `gpuckpt ps --json answers (${list.length} processes)`;
      } catch (e) {
        cliBroken = e.message;
        throw e;
      }
    });
  }
  const needCli = (fn) => async () => {
    if (cliBroken) throw failure(`not run: gpuckpt unusable (${oneLine(cliBroken).slice(0, 200)})`);
    return fn();
  };

  // static cudart, shared cudart, driver API: same buffers and data.
  await test(
    'static_cudart',
    needCli(() =>
      withImages('static_cudart', async () => {
        const r = await rollback('static_cudart', 'static_cudart');
        if (plain) {
          expectSameData(r.value.ready, plain.ready, 'ready checksums vs the run without the shim');
          expectSameData(r.value.mutated, plain.mutated, 'mutated checksums vs the run without the shim');
          r.detail += '; data identical to the run without the shim';
        }
        return r;
      }),
    ),
  );
  await test(
    'static_cudart/second-run',
    needCli(() => secondRun('static_cudart', 'static_cudart')),
  );

  for (const prog of ['shared_cudart', 'driver_api']) {
    await test(
      prog,
      needCli(() => withImages(prog, () => rollback(prog, prog))),
    );
    await test(
      `${prog}/second-run`,
      needCli(() => secondRun(prog, prog, [], plain ? { sameAs: { name: 'static_cudart (no shim)', buffers: plain.ready } } : {})),
    );
  }

  await test(
    'threads',
    needCli(() => withImages('threads', () => threadsScenario('threads'))),
  );
  await test(
    'threads/second-run',
    needCli(() => secondRun('threads', 'threads')),
  );

  // With one GPU the program itself says skip; nvidia-smi saves starting it.
  let twoSkipped = gpus.length === 1 ? `needs 2 GPUs, this machine has 1 (${gpus[0].name})` : null;
  await test('two_gpu', async () => {
    if (twoSkipped) throw new Skip(twoSkipped);
    return needCli(() =>
      withImages('two_gpu', () =>
        rollback('two_gpu', 'two_gpu').catch((e) => {
          if (e instanceof Skip) twoSkipped = e.message;
          throw e;
        }),
      ),
    )();
  });
  await test('two_gpu/second-run', async () => {
    if (twoSkipped) throw new Skip(twoSkipped);
    return needCli(() => secondRun('two_gpu', 'two_gpu'))();
  });

  await test('suspend', needCli(() => withImages('suspend', () => suspendScenario('suspend', 'static_cudart', [], gpus))));
  // pool_fill's mixed content: a third of it all-zero 256 KiB regions, which stay on the GPU.
  await test('suspend/zeros', needCli(() => suspendScenario('suspend/zeros', 'pool_fill', ['1'], gpus, 1)));
  await test('process', needCli(() => processScenario('process', 'static_cudart')));
  // A pool on two GPUs: checkpoint --leave-running copies and copies back each GPU's part on that GPU.
  await test('process/two_gpu', async () => {
    if (twoSkipped) throw new Skip(twoSkipped);
    return needCli(() => processScenario('process/two_gpu', 'two_gpu'))();
  });
  await test('process/failures', needCli(() => processFailuresScenario('process/failures')));
  await test('process/terminal', needCli(() => terminalScenario('process/terminal')));
  await test('criu/plugin', needCli(() => criuPluginScenario('criu/plugin')));
  if (['incremental'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runIncremental } = await import('./incremental.mjs');
    await runIncremental({ App, test, Skip, failure, sleep, cliJson, expectSame, launchViaFifo, snapPath, measure });
  }
  if (['live'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runLive } = await import('./live.mjs');
    await runLive({ App, test, failure, cliJson, snapPath, measure });
  }
  if (['peek'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runPeek } = await import('./peek.mjs');
    await runPeek({ App, test, Skip, failure, cliJson, runCli, expectSame, measure });
  }
  if (['gpu-held'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runGpuHeld } = await import('./gpu-held.mjs');
    await runGpuHeld({ App, test, failure, cliJson, expectSame, snapPath, measure, gib: poolFillSize(gpus).gib, gpuUuids, env });
  }
  if (['stream'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runStream } = await import('./stream.mjs');
    await runStream({ App, GPUCKPT, test, failure, cliJson, expectSame, snapPath, measure, tmpRoot, gib: poolFillSize(gpus).gib });
  }
  if (['launch'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runLaunch } = await import('./launch.mjs');
    await runLaunch({ ROOT, BIN_DIR, GPUCKPT, test, selected, Skip, failure, sleep, cliJson, runCli, expectSame, measure, track, tmpRoot, gpuUuids, say, running, endPids });
  }
  if (['distributed'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runDistributed } = await import('./distributed.mjs');
    await runDistributed({ ROOT, BIN_DIR, GPUCKPT, test, Skip, failure, sleep, cliJson, runCli, measure, tmpRoot, gpuUuids, gpuMemoryOf, gpuInfo, say, running, endPids });
  }
  await test('torch', needCli(() => jobScenario('torch', 'torch')));
  await test('torch/process', needCli(() => jobProcessScenario('torch/process', 'torch')));
  await test('cupy', needCli(() => jobScenario('cupy', 'cupy')));
  await test('cupy/process', needCli(() => jobProcessScenario('cupy/process', 'cupy')));

  if (['faults', 'kill', 'soak'].some((t) => ONLY.length === 0 || ONLY.some((p) => p.startsWith(t) || t.startsWith(p)))) {
    const { runReliability } = await import('./reliability.mjs');
    await runReliability({ ROOT, App, test, Skip, failure, sleep, cliCommand, track, cliJson, expectSame, launchViaFifo, gpuMemoryOf, snapPath, measure });
  }

  await test('bench_alloc', needCli(bench));

  await test(
    'pool_fill',
    needCli(() =>
      withImages('pool_fill', async () => {
        const { gib, note } = poolFillSize(gpus);
        const r = await rollback('pool_fill', 'pool_fill', [String(gib)], {
          readyMs: 240_000,
          ckptMs: 300_000,
          restoreMs: 300_000,
          single: true,
          measures: false,
        });
        const { ckA: ck, rsA: rs } = r.value;
        measure('pool_fill', {
          GiB: gib,
          raw_GiB: ck.rawBytes / GiB,
          stored_GiB: ck.storedBytes / GiB,
          ratio: ck.ratio,
          ckpt_s: ck.seconds,
          pause_s: ck.pauseSeconds,
          copy_GBps: ck.copyGBps,
          throughput_GBps: ck.throughputGBps,
          restore_s: rs.seconds,
          restore_pause_s: rs.pauseSeconds,
          restore_copy_GBps: rs.copyGBps,
        });
        await poolFillBench(gib);
        if (selected('pool_fill/suspend')) await suspendScenario('pool_fill/suspend', 'pool_fill', [String(gib)], gpus, Math.max(1, Number(env.GPU_TEST_BENCH_RUNS ?? 3)));
        return (
          `${gib} GiB${note ? ` (${note})` : ''}: checkpoint pause ${fmt(ck.pauseSeconds)} s, copy ${fmt(ck.copyGBps)} GB/s, ` +
          `${fmt(ck.seconds)} s total, stored ${fmt(ck.storedBytes / GiB)} GiB; restore --into ${fmt(rs.seconds)} s ` +
          `(copy ${fmt(rs.copyGBps)} GB/s), data rolled back bit for bit`
        );
      }),
    ),
  );
}

try {
  await main();
} catch (e) {
  counts.failed++;
  say(`FAIL runner: ${oneLine(e?.stack ?? e)}`);
} finally {
  cleanup();
}
summary();
process.exitCode = counts.failed > 0 ? 1 : 0;
