// Where a gpuckpt command's first moments go, before its verb starts:
// node's own start, loading the CLI's modules, and the driver's start
// (cuInit) beside them. Run from the repository root on a GPU host with no
// process on the GPU: node test/gpu/probes/cli_start.mjs [RUNS]
import { spawnSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';

const runs = Number(process.argv[2] ?? 5);
const entry = 'dist/cli/entry.js';
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function wall(args, env = {}) {
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    spawnSync(process.execPath, args, { env: { ...process.env, ...env }, stdio: 'ignore' });
    times.push((performance.now() - t0) / 1000);
  }
  return `${median(times).toFixed(3)} s (${times.map((t) => t.toFixed(3)).join(', ')})`;
}

// One process: the marks are milliseconds from node's own time origin.
const marks = String.raw`
const m = [];
const mark = (w) => m.push(w + ' ' + performance.now().toFixed(1));
mark('node started');
const warm = process.env.WARM === '1';
let driverDone;
if (warm) {
  const { native } = await import('./dist/native/index.js');
  const n = native(); mark('addon loaded');
  driverDone = n.warmDriver().then(() => mark('driver started (cuInit)'));
}
await import('commander'); mark('commander');
await import('./dist/controller/verbs/process-restore.js'); mark('restore verb modules');
await import('./dist/controller/verbs/process-checkpoint.js'); mark('checkpoint verb modules');
await import('./dist/cli/output.js'); mark('output');
await driverDone;
console.log(m.join('; '));
`;

console.log(`node -e '' : ${wall(['-e', ''])}`);
console.log(`gpuckpt --version : ${wall([entry, '--version'])}`);
console.log(`gpuckpt restore /nonexistent (driver warm-up on) : ${wall([entry, 'restore', '/nonexistent'])}`);
console.log(`gpuckpt restore /nonexistent (warm-up off) : ${wall([entry, 'restore', '/nonexistent'], { GPUCKPT_DRIVER_WARMUP: '0' })}`);
for (const warm of ['0', '1']) {
  for (let i = 0; i < 3; i++) {
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', marks], { env: { ...process.env, WARM: warm }, encoding: 'utf8' });
    console.log(`marks (warm-up ${warm === '1' ? 'on' : 'off'}), ms from node's start: ${r.stdout.trim() || r.stderr.trim()}`);
  }
}
