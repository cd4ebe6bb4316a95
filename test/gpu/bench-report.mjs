/**
 * `npm run bench:report`: writes docs/BENCHMARKS.md, whole, from the
 * results `npm run bench` wrote on a GPU host (docs/bench/*.json, one per
 * workload): a headline table, then one section per workload. The
 * page holds the current figures only; targets sit beside them here,
 * never in a test.
 *
 * Usage: node test/gpu/bench-report.mjs [RESULTS_DIR] [BENCHMARKS.md]
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = process.argv[2] ?? path.join(ROOT, 'docs', 'bench');
const doc = process.argv[3] ?? path.join(ROOT, 'docs', 'BENCHMARKS.md');

/** Issue 26's job (166M parameters, 2 GiB buffer): 4x the anchor each way, half its image. */
const ISSUE26 = 'torch-166m-2g';

/**
 * [label, gpuckpt metric, anchor metric, unit, target (per workload kind):
 * a bound on the figure, or 'xN', at least N times the anchor's]
 */
const ROWS = [
  ['checkpoint, whole process (process gone, image durable: fsynced)', 'ckpt_s', 'anchor_ckpt_durable_s', 's', { torch: 10, [ISSUE26]: 'x4' }],
  ['… the whole `gpuckpt checkpoint` command, from its exec (node\'s start and the CLI\'s loading included)', 'ckpt_cmd_s', 'anchor_ckpt_durable_s', 's', {}],
  ["… the anchor's image as CRIU leaves it (in the page cache, not fsynced)", undefined, 'anchor_ckpt_s', 's', {}],
  ['… GPU free after', 'ckpt_gpu_free_s', 'anchor_gpu_free_s', 's', {}],
  ['image on disk', 'image_bytes', 'anchor_image_bytes', 'GB', { torch: 12, [ISSUE26]: 'x2' }],
  ["… the pools' allocations (raw)", 'pool_raw_bytes', undefined, 'GB', {}],
  ["… CRIU's pages (raw; stored compressed)", 'criu_pages_raw_bytes', undefined, 'GB', {}],
  ['restore, whole process (CRIU + GPU)', 'restore_s', 'anchor_restore_s', 's', { torch: 4, [ISSUE26]: 'x4' }],
  ['… the whole `gpuckpt restore` command until the application runs, from its exec', 'restore_cmd_s', 'anchor_restore_s', 's', {}],
  ['… the GPU checks passed (the driver started), beside the unpacking and CRIU, from the restore\'s start', 'restore_gpu_checks_s', undefined, 's', {}],
  ["… CRIU's zero pages of private anonymous memory, left out of the restore", 'restore_criu_pages_left_out_bytes', undefined, 'GB', {}],
  ['suspend: GPU free (anchor: driver lock + checkpoint)', 'suspend_gpu_free_s', 'anchor_gpu_free_s', 's', { 'pool-16g': 0.8 }],
  ['… suspend again: into the host memory the suspend before kept', 'suspend_again_gpu_free_s', undefined, 's', { 'pool-16g': 0.8 }],
  ['resume (anchor: driver restore + unlock)', 'resume_s', 'anchor_driver_restore_s', 's', { 'pool-16g': 0.8 }],
  ['… resume without a driver keeper (suspend --no-keep-driver)', 'resume_no_keeper_s', undefined, 's', {}],
  ['… resume without the driver warm-up (GPUCKPT_DRIVER_WARMUP=0)', 'resume_no_warmup_s', undefined, 's', {}],
  ['… the whole `gpuckpt resume` command, start and exit of node included', 'resume_command_s', undefined, 's', {}],
  ['… the same without a driver keeper', 'resume_command_no_keeper_s', undefined, 's', {}],
  ['… the same without the driver warm-up', 'resume_command_no_warmup_s', undefined, 's', {}],
  ['migrate to GPU 1: downtime', 'migrate_downtime_s', undefined, 's', { 'pool-16g': 1.0 }],
  ['… the same through host memory (--via-host)', 'migrate_via_host_downtime_s', undefined, 's', {}],
  ['checkpoint --leave-running: application pause (anchor: driver checkpoint, criu dump --leave-running, driver restore)', 'leave_running_pause_s', 'anchor_leave_running_pause_s', 's', { torch: 2 }],
  ['checkpoint --leave-running: image durable', 'leave_running_durable_s', undefined, 's', {}],
  ['checkpoint --gpu-only: application pause', 'gpu_only_pause_s', undefined, 's', {}],
  ['checkpoint --gpu-only: image durable', 'gpu_only_durable_s', undefined, 's', {}],
  ['checkpoint --gpu-only: image on disk', 'gpu_only_image_bytes', undefined, 'GB', {}],
  ['restore --into (rollback of a running process)', 'restore_into_s', undefined, 's', {}],
];

/**
 * Results from before CRIU's files were fsynced (no ckpt.sync_s): their
 * checkpoint row compares like with like, neither side's CRIU files synced.
 */
const UNSYNCED_ROWS = [
  ["checkpoint, whole process (process gone; pool image fsynced, CRIU's files left in the page cache, as the anchor's)", 'ckpt_s', 'anchor_ckpt_s', 's', { torch: 10 }],
  ...ROWS.slice(2),
];

const num = (v, unit) => (unit === 'GB' ? (v / 1e9).toFixed(2) : v < 10 ? v.toFixed(2) : v.toFixed(1));
const all = (m, unit) => m.all.map((v) => num(v, unit)).join(', ');
/** Under a workload's heading: the host, the date, the command and the runs. */
const hostLine = (r) =>
  `${r.gpus}× ${r.gpu}, driver ${r.driver}, ${r.cpus} cores, ${r.hostMemGiB} GiB RAM; ${r.date}; \`${r.command}\`; medians of ${r.runs} run(s) on one process (every run listed).`;

/** r's metric k (g), and as table cells, the median then every run: seconds (s), gigabytes (gb). */
function cells(r) {
  const g = (k) => r.metrics[k];
  return { g, s: (k) => `${num(g(k).median, 's')} s (${all(g(k), 's')})`, gb: (k) => `${num(g(k).median, 'GB')} GB (${all(g(k), 'GB')})` };
}

/** The shim's own cost: native against under the shim, no anchor. */
function shimTable(r) {
  const g = (k) => r.metrics[k];
  const ns = (v) => `${(v / 1000).toFixed(1)} µs`;
  const rate = (v) => `${(v / 1e6).toFixed(3)} M/s`;
  const ratio = g('malloc_free_ns_plain').median / g('malloc_free_ns_shim').median;
  const launch = g('launch_rate_ratio').median;
  return [
    `## ${r.workload}`,
    '',
    `${r.gpus}× ${r.gpu}, driver ${r.driver}; ${r.date}; \`${r.command}\`; medians of ${r.runs} run(s) each (every run listed).`,
    '',
    '| | native | under the shim | shim vs native | target |',
    '| --- | --- | --- | --- | --- |',
    `| cudaMalloc(1 MiB) + cudaFree | ${ns(g('malloc_free_ns_plain').median)} (${g('malloc_free_ns_plain').all.map(ns).join(', ')}) | **${ns(g('malloc_free_ns_shim').median)}** (${g('malloc_free_ns_shim').all.map(ns).join(', ')}) | ${ratio.toFixed(1)}× faster | ≥ 10× faster: ${ratio >= 10 ? 'met' : '**missed**'} |`,
    g('launch_rate_ratio_in_process') ? launchRows(r) : `| empty kernel launches | ${rate(g('launches_per_s_plain').median)} (${g('launches_per_s_plain').all.map(rate).join(', ')}) | **${rate(g('launches_per_s_shim').median)}** (${g('launches_per_s_shim').all.map(rate).join(', ')}) | ${(100 * launch).toFixed(1)} % (${g('launch_rate_ratio').all.map((v) => (100 * v).toFixed(1)).join(', ')}) | ≥ 99 %: ${launch >= 0.99 ? 'met' : '**missed**'} |`,
    ...(g('driver_call_ns_shim') ? driverCallRows(r) : []),
    '',
  ].join('\n');
}

/**
 * Launch throughput two ways: between processes (plain, then under the
 * shim), and within one process (the shim's cuLaunchKernel against the
 * driver's own, alternating blocks), which judges the target: processes
 * differ by more than the shim costs. The plain runs' in-process ratio
 * (the same function both ways) shows that method's spread.
 */
function launchRows(r) {
  const g = (k) => r.metrics[k];
  const rate = (v) => `${(v / 1e6).toFixed(3)} M/s`;
  const pct = (v, d = 1) => `${(100 * v).toFixed(d)} %`;
  const plain = g('launches_per_s_plain').all;
  const spread = (Math.max(...plain) - Math.min(...plain)) / g('launches_per_s_plain').median;
  const inProcess = g('launch_rate_ratio_in_process').median;
  const rounds = (arm, label) => {
    const k = `rounds_launch_ratio_${arm}`;
    return `| … ${label} ÷ plain, ${g(k).all.length} rounds of three processes (plain, under the shim, under the shim switched off) | — | median **${pct(g(k).median)}**, mean ${pct(g(`${k}_mean`).median)} ± ${pct(g(`${k}_stderr`).median)} (standard error) | ${pct(g(`${k}_mean`).median)} | — |`;
  };
  return [
    `| empty kernel launches, one process plain then one under the shim | ${rate(g('launches_per_s_plain').median)} (${plain.map(rate).join(', ')}) | **${rate(g('launches_per_s_shim').median)}** (${g('launches_per_s_shim').all.map(rate).join(', ')}) | ${pct(g('launch_rate_ratio').median)} (${g('launch_rate_ratio').all.map((v) => pct(v)).join(', ')}) | — (native alone spreads ${pct(spread, 0)} between processes) |`,
    ...(g('rounds_launch_ratio_shim') ? [rounds('shim', 'under the shim'), rounds('shim_off', 'under the shim switched off (GPUCKPT_DISABLE=1)')] : []),
    `| empty kernel launches in one process: the shim's cuLaunchKernel ÷ the driver's own, alternating blocks | ${pct(g('launch_rate_ratio_in_process_plain').median, 2)} (no shim: the same function both ways; ${g('launch_rate_ratio_in_process_plain').all.map((v) => pct(v, 2)).join(', ')}) | **${pct(inProcess, 2)}** (${g('launch_rate_ratio_in_process').all.map((v) => pct(v, 2)).join(', ')}) | ${pct(inProcess, 2)} | ≥ 99 %: ${inProcess >= 0.99 ? 'met' : '**missed**'} |`,
  ].join('\n');
}

/** The shim's cost of one driver call, and what it adds to a launch (older results lack it). */
function driverCallRows(r) {
  const g = (k) => r.metrics[k];
  const ns = (v) => `${v.toFixed(1)} ns`;
  const added = g('shim_ns_per_driver_call').median * g('driver_calls_per_launch').median;
  return [
    `| cuCtxGetCurrent (the cheapest driver call) | ${ns(g('driver_call_ns_plain').median)} (${g('driver_call_ns_plain').all.map(ns).join(', ')}) | **${ns(g('driver_call_ns_shim').median)}** (${g('driver_call_ns_shim').all.map(ns).join(', ')}) | +${ns(g('shim_ns_per_driver_call').median)} per call | — |`,
    `| what the shim adds to one launch | — | ${g('driver_calls_per_launch').median.toFixed(2)} driver calls × ${ns(g('shim_ns_per_driver_call').median)} = ${ns(added)} | ${(100 * g('shim_launch_cost_fraction').median).toFixed(2)} % of a native launch | — |`,
    '',
    `The measuring thread ran on CPU ${g('bench_cpu').median} in both the native and the shimmed run (BENCH_CPU).`,
  ];
}

/** When an image's bytes went to its file, and the pace from the first one on (older results lack it). */
function writeRows(r) {
  const { g, s, gb } = cells(r);
  const rate = (k) => `${g(k).median.toFixed(2)} GB/s (${g(k).all.map((v) => v.toFixed(2)).join(', ')})`;
  return [
    `| first frame written, from the command's start | ${s('full_first_write_seconds')} | ${s('inc_first_write_seconds')} | | |`,
    `| … written when the pause ended | ${gb('full_stored_at_pause_end_bytes')} | ${gb('inc_stored_at_pause_end_bytes')} | | |`,
    `| … image bytes per second from the first write until durable | ${rate('full_write_GBps')} | ${rate('inc_write_GBps')} | | |`,
  ];
}

/** Incremental images: checkpoint --parent against the full checkpoint it follows, on the same process. */
function incrementalTable(r) {
  const { g, s, gb } = cells(r);
  const pct = (k) => `${(100 * g(k).median).toFixed(1)} % (${g(k).all.map((v) => (100 * v).toFixed(1)).join(', ')})`;
  const mark = (k) => (g(k).median <= 0.15 ? '≤ 15 %: met' : '≤ 15 %: **missed**');
  return [
    `## ${r.workload}`,
    '',
    hostLine(r),
    '',
    '| | full checkpoint --gpu-only | checkpoint --gpu-only --parent (10 % changed) | incremental ÷ full | target |',
    '| --- | --- | --- | --- | --- |',
    `| image durable | ${s('full_seconds')} | **${s('inc_seconds')}** | ${pct('time_ratio')} | ${mark('time_ratio')} |`,
    `| image on disk | ${gb('full_stored_bytes')} | **${gb('inc_stored_bytes')}** | ${pct('size_ratio')} | ${mark('size_ratio')} |`,
    `| application pause | ${s('full_pause_seconds')} | **${s('inc_pause_seconds')}** | | |`,
    `| data copied and stored | | ${gb('inc_raw_bytes')} | | |`,
    `| digest kernel (in the pause) | | ${s('digest_seconds')} | | |`,
    `| restore --into through the chain | | ${s('chain_restore_seconds')} | | |`,
    ...(g('inc_first_write_seconds') ? writeRows(r) : []),
    '',
    ...['full', 'inc'].map((w) => phaseLine(r, `${w}.`, `Where the ${w === 'full' ? 'full' : 'incremental'} checkpoint's time goes`)).filter(Boolean),
    '',
  ].join('\n');
}

/** checkpoint --live against the plain checkpoint, on one process whose job rewrites its pool throughout. */
function liveTable(r) {
  const { g, s, gb } = cells(r);
  const ms = (k) => `${(1000 * g(k).median).toFixed(1)} ms (${g(k).all.map((v) => (1000 * v).toFixed(1)).join(', ')})`;
  const pause = g('live_pause_seconds').median;
  return [
    `## ${r.workload}`,
    '',
    hostLine(r),
    '',
    '| | checkpoint --gpu-only | checkpoint --gpu-only --live | plain ÷ live | target |',
    '| --- | --- | --- | --- | --- |',
    `| application pause | ${ms('plain_pause_seconds')} | **${ms('live_pause_seconds')}** | ${(g('plain_pause_seconds').median / pause).toFixed(1)}× | ≤ 0.3 s: ${pause <= 0.3 ? 'met' : '**missed**'} |`,
    `| image durable | ${s('plain_seconds')} | ${s('live_seconds')} | | |`,
    `| copied while the job ran | | ${gb('live_precopied_bytes')} in ${s('live_precopy_seconds')}, ${g('live_rounds').median} rounds | | |`,
    `| copied in the pause | all of it | ${gb('live_pause_bytes')} | | |`,
    `| digest kernel (in the pause) | | ${s('live_digest_seconds')} | | |`,
    '',
    phaseLine(r, 'live.', "Where the live checkpoint's time goes"),
    `The last --live image, restored --into, held the pool after write ${g('held_write').median} of the rewriter, every region whole.`,
    '',
  ].join('\n');
}

/** The BAR mapping (peek, poke) against DMA, size by size: the faster of each in bold. */
/** The sizes metrics named PREFIX<bytes> were measured at, smallest first. */
const sizesOf = (r, prefix) =>
  Object.keys(r.metrics)
    .filter((k) => k.startsWith(prefix) && /^[0-9]+$/.test(k.slice(prefix.length)))
    .map((k) => Number(k.slice(prefix.length)))
    .sort((a, b) => a - b);

function barTable(r) {
  const g = (k) => r.metrics[k];
  const t = (k) => {
    const v = g(k).median;
    return v < 1e-3 ? `${(v * 1e6).toFixed(1)} µs` : v < 1 ? `${(v * 1e3).toFixed(2)} ms` : `${v.toFixed(2)} s`;
  };
  const rate = (k, size) => `${(size / g(k).median / 1e9).toFixed(2)} GB/s`;
  const pair = (a, b, size) => {
    const [x, y] = [g(a).median, g(b).median];
    return [x <= y ? `**${t(a)}** (${rate(a, size)})` : `${t(a)} (${rate(a, size)})`, y < x ? `**${t(b)}** (${rate(b, size)})` : `${t(b)} (${rate(b, size)})`];
  };
  const sizes = sizesOf(r, 'bar_read_s_');
  const label = (s) => (s >= 1 << 30 ? `${s / 2 ** 30} GiB` : s >= 1 << 20 ? `${s / 2 ** 20} MiB` : `${s / 1024} KiB`);
  return [
    `## ${r.workload}`,
    '',
    hostLine(r),
    '',
    '| bytes | read, BAR | read, DMA | read, DMA with its pause | write, BAR | write, DMA |',
    '| --- | --- | --- | --- | --- | --- |',
    ...sizes.map((s) => `| ${label(s)} | ${pair(`bar_read_s_${s}`, `dma_read_s_${s}`, s).join(' | ')} | ${g(`dma_paused_read_s_${s}`) ? `${t(`dma_paused_read_s_${s}`)}` : '—'} | ${pair(`bar_write_s_${s}`, `dma_write_s_${s}`, s).join(' | ')} |`),
    '',
    ...(sizes.length && g(`scattered_bar_write_s_4096`)
      ? [
          '| 64 pieces spread over 1 GiB | read, BAR (a call each) | read, DMA (one batch) | write, BAR (a call each) | write, DMA (one batch) |',
          '| --- | --- | --- | --- | --- |',
          ...sizesOf(r, 'scattered_bar_write_s_').map((s) => `| 64 × ${label(s)} | ${pair(`scattered_bar_read_s_${s}`, `scattered_dma_read_s_${s}`, 64 * s).join(' | ')} | ${pair(`scattered_bar_write_s_${s}`, `scattered_dma_write_s_${s}`, 64 * s).join(' | ')} |`),
          '',
        ]
      : []),
    'BAR: the mapping peek and poke use, timed around the addon call (streaming loads; write-combined stores, fenced). DMA: the copy checkpoint and restore use, as the shim times it, the application paused. With its pause: what a DMA read from outside the process costs, the pause included (quiesce, copy, resume); a read through the BAR (peek) does not pause the application at all.',
    '',
  ].join('\n');
}

/** Snapshots in GPU memory beside the host route (the same pool, alternately): the pauses and the whole commands. */
function heldTable(r) {
  const { g, s, gb } = cells(r);
  const ms = (k) => (g(k) ? `${(1000 * g(k).median).toFixed(1)} ms (${g(k).all.map((v) => (1000 * v).toFixed(1)).join(', ')})` : '—');
  const ratio = (a, b) => `${(g(b).median / g(a).median).toFixed(1)}×`;
  const pauseMark = (k) => (g(k).median < 0.1 ? '< 100 ms: met' : '< 100 ms: **missed**');
  return [
    `## ${r.workload}`,
    '',
    hostLine(r),
    '',
    '| | in GPU memory (--to-gpu) | host memory and disk (-o DIR) | host ÷ GPU | target |',
    '| --- | --- | --- | --- | --- |',
    `| snapshot: application pause | **${ms('snap_pause_seconds')}** | ${ms('host_pause_seconds')} | ${ratio('snap_pause_seconds', 'host_pause_seconds')} | ${pauseMark('snap_pause_seconds')} |`,
    `| snapshot: the whole command (node's start included) | ${s('snap_command_seconds')} | ${s('host_command_seconds')} | ${ratio('snap_command_seconds', 'host_command_seconds')} | |`,
    `| rollback (restore --into): application pause | **${ms('roll_pause_seconds')}** | ${ms('host_roll_pause_seconds')} | ${ratio('roll_pause_seconds', 'host_roll_pause_seconds')} | ${pauseMark('roll_pause_seconds')} |`,
    `| rollback: the whole command | ${s('roll_command_seconds')} | ${s('host_roll_command_seconds')} | ${ratio('roll_command_seconds', 'host_roll_command_seconds')} | |`,
    ...(g('other_snap_pause_seconds')
      ? [
          `| onto GPU 1 (NVLink): snapshot, application pause | ${ms('other_snap_pause_seconds')} | | | ${pauseMark('other_snap_pause_seconds')} |`,
          `| … rollback from GPU 1, application pause | ${ms('other_roll_pause_seconds')} | | | ${pauseMark('other_roll_pause_seconds')} |`,
        ]
      : []),
    `| GPU memory held (whole 32 MiB chunks) | ${gb('held_bytes')} | | | |`,
    '',
  ].join('\n');
}

/** "what (medians, s): phase t, ..." for the metrics named prefix + phase, or '' when there are none. */
/** An 'xN' target: the anchor's figure at least N times gpuckpt's. */
function ratioMark(n, a, b) {
  if (!b) return '';
  return b.median / a.median >= n ? `≥ ${n}× the anchor: met` : `≥ ${n}× the anchor: **missed**`;
}

function phaseLine(r, prefix, what, note = '') {
  const list = Object.entries(r.metrics)
    .filter(([k]) => k.startsWith(prefix))
    .map(([k, v]) => `${k.slice(prefix.length).replace(/_s$/, '')} ${v.median.toFixed(3)}`)
    .join(', ');
  return list ? `${what} (medians, s): ${list}.${list.includes('load ') ? note : ''}` : '';
}

/**
 * A 2-rank NCCL job (ddp.json, test/gpu/distributed.mjs) beside one of its
 * ranks alone and one process of the same total memory. The anchor cannot
 * take the job: what it did is quoted.
 */
function ddpTable(r) {
  const { g, s, gb } = cells(r);
  const has = (k) => !!r.metrics[k];
  const cell = (k, unit = 's') => (has(k) ? (unit === 'GB' ? gb(k) : s(k)) : '—');
  const x = (a, b) => (has(a) && has(b) ? `${(g(a).median / g(b).median).toFixed(2)}×` : '');
  const within = (a, b) => (g(a).median <= 1.2 * g(b).median ? '≤ 1.2× one rank: met' : '≤ 1.2× one rank: **missed**');
  const row = (label, k, target = '—', bold = false) => `| ${label} | ${bold ? `**${cell(`job_${k}`)}**` : cell(`job_${k}`)} | ${cell(`rank_${k}`)} | ${cell(`single_${k}`)} | ${x(`job_${k}`, `rank_${k}`)} | ${target} |`;
  const bytes = (label, k) => `| ${label} | ${cell(`job_${k}`, 'GB')} | ${cell(`rank_${k}`, 'GB')} | ${cell(`single_${k}`, 'GB')} | ${x(`job_${k}`, `rank_${k}`)} | — |`;
  const phases = (what) => [...new Set(Object.keys(r.metrics).filter((k) => k.startsWith(`job_${what}_`)).map((k) => k.slice(`job_${what}_`.length, -2)))];
  const out = [
    `## ${r.workload}`,
    '',
    hostLine(r),
    '',
    '| | 2-rank job | one rank alone | one process, same memory | job ÷ one rank | target |',
    '| --- | --- | --- | --- | --- | --- |',
    row('checkpoint, whole job (job gone, image durable)', 'ckpt_s', within('job_ckpt_s', 'rank_ckpt_s'), true),
    ...phases('ckpt_phase').map((p) => row(`… ${p}`, `ckpt_phase_${p}_s`)),
    ...phases('ckpt_suspend').map((p) => row(`… … suspend, the slowest member's ${p}`, `ckpt_suspend_${p}_s`)),
    row('… GPUs free after', 'ckpt_gpu_free_s'),
    row('restore, whole job (page cache warm)', 'restore_s', within('job_restore_s', 'rank_restore_s'), true),
    ...phases('restore_phase').map((p) => row(`… ${p}`, `restore_phase_${p}_s`)),
    ...(has('job_cold_restore_s') ? [row('restore, the image dropped from the page cache first', 'cold_restore_s')] : []),
    bytes('pool (raw)', 'pool_bytes'),
    bytes('image on disk', 'image_bytes'),
    ...(has('job_raw_ckpt_s')
      ? [
          row("with CRIU's pages raw (--raw-criu-pages): checkpoint", 'raw_ckpt_s'),
          row('… restore (page cache warm)', 'raw_restore_s'),
          ...(has('job_raw_cold_restore_s') ? [row('… restore, dropped from the page cache', 'raw_cold_restore_s')] : []),
          bytes('… image on disk', 'raw_image_bytes'),
        ]
      : []),
    row('suspend: GPUs free', 'suspend_gpu_free_s', '—', true),
    row('resume (communicators made again)', 'resume_s', '—', true),
    row("checkpoint --gpu-only: pause (the cut, then the slowest pool's copy)", 'gpu_only_pause_s', '—', true),
    row('checkpoint --gpu-only: image durable', 'gpu_only_s'),
    '',
    `The anchor (driver API + CRIU) on the running 2-rank job, same run: ${r.anchor}.`,
    '',
  ];
  return out.join('\n');
}

function table(name, r) {
  if (name === 'shim') return shimTable(r);
  if (name === 'ddp') return ddpTable(r);
  if (name.startsWith('incremental-')) return incrementalTable(r);
  if (name.startsWith('live-')) return liveTable(r);
  if (name.startsWith('held-')) return heldTable(r);
  if (name === 'bar') return barTable(r);
  const out = [];
  const kind = name;
  out.push(`## ${r.workload}`, '');
  out.push(hostLine(r), '');
  out.push('| | gpuckpt | anchor (driver API + CRIU) | anchor ÷ gpuckpt | target |', '| --- | --- | --- | --- | --- |');
  for (const [label, ours, theirs, unit, targets] of r.metrics['ckpt.sync_s'] ? ROWS : UNSYNCED_ROWS) {
    // A row of the anchor alone has no gpuckpt metric.
    const a = ours ? r.metrics[ours] : undefined;
    const b = theirs ? r.metrics[theirs] : undefined;
    if (ours ? !a : !b) continue;
    const target = targets[kind];
    const ratio = a && b ? `${(b.median / a.median).toFixed(1)}×` : '—';
    const mark = !a || target === undefined ? '' : typeof target === 'string' ? ratioMark(Number(target.slice(1)), a, b) : a.median * (unit === 'GB' ? 1e-9 : 1) <= target ? ` ≤ ${target} ${unit}: met` : ` ≤ ${target} ${unit}: **missed**`;
    out.push(`| ${label} | ${a ? `**${num(a.median, unit)} ${unit}** (${all(a, unit)})` : '—'} | ${b ? `${num(b.median, unit)} ${unit} (${all(b, unit)})` : '—'} | ${ratio} | ${mark.trim() || '—'} |`);
  }
  const phases = [
    phaseLine(r, 'ckpt_phase.', "Where a whole-process checkpoint's time goes, step by step (suspend: the GPU free and the pools' data with the snapshot holder; dump: CRIU, while the pool images are written; images: their end beyond the dump; pack: CRIU's pages beyond that)"),
    phaseLine(r, 'ckpt.', "Where a whole-process checkpoint's time goes after the GPU is free"),
    phaseLine(r, 'leave_running.', "Where checkpoint --leave-running's time goes (the application is paused from quiesce to reopen)"),
    phaseLine(r, 'suspend.', "Where suspend's time goes"),
    phaseLine(r, 'suspend_again.', "Where a second suspend's time goes"),
    phaseLine(r, 'resume.', "Where resume's time goes"),
    phaseLine(r, 'resume_no_keeper.', "Where resume's time goes without a driver keeper"),
    phaseLine(r, 'migrate.suspend.', "Where a migrate's (GPU to GPU) suspend half goes"),
    phaseLine(r, 'migrate.resume.', "Where a migrate's (GPU to GPU) resume half goes"),
    phaseLine(
      r,
      'restore.',
      "Where a whole-process restore's time goes",
      ' `criu` counts from the start (image checks included); `load`, decompressing the pool image, runs meanwhile; `cleanup`, freeing the staging, comes after the application runs again and is not in the total.',
    ),
    phaseLine(r, 'restore_phase.', "Where a whole-process restore's time goes, step by step (checks: the PIDs free, and before the gate the driver's start and the GPU checks; unpack: CRIU's pages, beyond the checks; criu: CRIU, with the GPU checks beside it since its post-restore gate; load: the pools' decompression beyond CRIU's time)"),
  ].filter(Boolean);
  if (phases.length) out.push('', ...phases);
  out.push('');
  return out.join('\n');
}

const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort((a, b) => order(a) - order(b)) : [];
function order(f) {
  const m = f.match(/^pool-([0-9.]+)g/);
  return m ? Number(m[1]) : 1e9;
}
if (!files.length) {
  console.error(`bench-report: no results in ${dir} (run npm run bench on a GPU host first)`);
  process.exit(1);
}
const results = Object.fromEntries(files.map((f) => [f.replace(/\.json$/, ''), JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'))]));

/** [workload, label, gpuckpt metric, anchor metric (or the plain/native one to compare with), unit, what the second column is] */
const HEADLINE = [
  [ISSUE26, 'PyTorch job, 166M parameters + 2 GiB buffer: checkpoint, image durable', 'ckpt_s', 'anchor_ckpt_durable_s', 's'],
  [ISSUE26, 'PyTorch job, 166M parameters + 2 GiB buffer: checkpoint, the command from its exec', 'ckpt_cmd_s', 'anchor_ckpt_durable_s', 's'],
  [ISSUE26, 'PyTorch job, 166M parameters + 2 GiB buffer: restore', 'restore_s', 'anchor_restore_s', 's'],
  [ISSUE26, 'PyTorch job, 166M parameters + 2 GiB buffer: restore, the command from its exec', 'restore_cmd_s', 'anchor_restore_s', 's'],
  [ISSUE26, 'PyTorch job, 166M parameters + 2 GiB buffer: image on disk', 'image_bytes', 'anchor_image_bytes', 'GB'],
  ['torch', 'PyTorch job: checkpoint, image durable', 'ckpt_s', 'anchor_ckpt_durable_s', 's'],
  ['torch', 'PyTorch job: restore', 'restore_s', 'anchor_restore_s', 's'],
  ['torch', 'PyTorch job: image on disk', 'image_bytes', 'anchor_image_bytes', 'GB'],
  ['torch', 'PyTorch job: checkpoint --leave-running, application pause', 'leave_running_pause_s', 'anchor_leave_running_pause_s', 's'],
  ['pool-16g', '16 GiB pool: suspend, GPU free', 'suspend_gpu_free_s', 'anchor_gpu_free_s', 's'],
  ['pool-16g', '16 GiB pool: resume', 'resume_s', 'anchor_driver_restore_s', 's'],
  ['pool-16g', '16 GiB pool: checkpoint, image durable', 'ckpt_s', 'anchor_ckpt_durable_s', 's'],
  ['pool-16g', '16 GiB pool: restore', 'restore_s', 'anchor_restore_s', 's'],
  ['pool-16g', '16 GiB pool: migrate to GPU 1, downtime', 'migrate_downtime_s', undefined, 's'],
  ['pool-64g', '64 GiB pool: checkpoint, image written', 'ckpt_s', 'anchor_ckpt_durable_s', 's'],
  ['pool-64g', '64 GiB pool: restore', 'restore_s', 'anchor_restore_s', 's'],
];

/** The first table: each figure beside the anchor of the same run, the ratio, the host. */
function headline() {
  const out = ['| | gpuckpt | anchor (driver API + CRIU), same run | anchor ÷ gpuckpt | host, date |', '| --- | --- | --- | --- | --- |'];
  for (const [w, label, ours, theirs, unit] of HEADLINE) {
    const r = results[w];
    const a = r?.metrics[ours];
    if (!a) continue;
    // Results from before CRIU's files were fsynced compare like with like: neither side's synced.
    const unsynced = theirs === 'anchor_ckpt_durable_s' && !r.metrics['ckpt.sync_s'];
    const b = theirs ? r.metrics[unsynced ? 'anchor_ckpt_s' : theirs] : undefined;
    out.push(`| ${label}${unsynced ? " (CRIU's files in the page cache on both sides)" : ''} | **${num(a.median, unit)} ${unit}** | ${b ? `${num(b.median, unit)} ${unit}` : '—'} | ${b ? `${(b.median / a.median).toFixed(1)}×` : '—'} | ${r.gpus}× ${r.gpu.replace('NVIDIA ', '')}, ${r.date} |`);
  }
  const ddp = results.ddp;
  if (ddp) {
    const m = ddp.metrics;
    const host = `${ddp.gpus}× ${ddp.gpu.replace('NVIDIA ', '')}, ${ddp.date}`;
    // The anchor's failure is its dump's: it stands beside what needs one.
    const cannot = `cannot: ${ddp.anchor.split('; ').at(-1)}`;
    const rows = [
      ['2-rank DDP job (torchrun, NCCL): checkpoint, image durable', 'job_ckpt_s', cannot],
      ['2-rank DDP job: restore', 'job_restore_s', cannot],
      ['2-rank DDP job: suspend, GPUs free', 'job_suspend_gpu_free_s', '—'],
      ['2-rank DDP job: checkpoint --gpu-only, pause', 'job_gpu_only_pause_s', '—'],
    ];
    for (const [label, k, anchor] of rows) out.push(`| ${label} | **${num(m[k].median, 's')} s** | ${anchor} | — | ${host} |`);
  }
  const inc = results['incremental-16g'];
  if (inc) {
    const where = `${inc.gpus}× ${inc.gpu.replace('NVIDIA ', '')}, ${inc.date}`;
    out.push(`| incremental image (10 % of 16 GiB changed) | **${num(inc.metrics.inc_seconds.median, 's')} s** | full image ${num(inc.metrics.full_seconds.median, 's')} s (gpuckpt) | ${(100 * inc.metrics.time_ratio.median).toFixed(1)} % of the full | ${where} |`);
    const ms = (k) => (1000 * inc.metrics[k].median).toFixed(1);
    out.push(`| incremental image, application pause | **${ms('inc_pause_seconds')} ms** | full image ${ms('full_pause_seconds')} ms (gpuckpt) | ${(inc.metrics.full_pause_seconds.median / inc.metrics.inc_pause_seconds.median).toFixed(1)}× shorter | ${where} |`);
  }
  const live = results['live-16g'];
  if (live) out.push(`| checkpoint --live, pause (16 GiB, 1 GiB/s rewritten) | **${(1000 * live.metrics.live_pause_seconds.median).toFixed(1)} ms** | plain checkpoint ${(1000 * live.metrics.plain_pause_seconds.median).toFixed(1)} ms (gpuckpt) | ${(live.metrics.plain_pause_seconds.median / live.metrics.live_pause_seconds.median).toFixed(1)}× | ${live.gpus}× ${live.gpu.replace('NVIDIA ', '')}, ${live.date} |`);
  const held = results['held-16g'];
  if (held) {
    const m = held.metrics;
    const where = `${held.gpus}× ${held.gpu.replace('NVIDIA ', '')}, ${held.date}`;
    const ms = (k) => (1000 * m[k].median).toFixed(1);
    out.push(`| 16 GiB pool: snapshot in GPU memory, application pause | **${ms('snap_pause_seconds')} ms** | host route ${ms('host_pause_seconds')} ms (gpuckpt) | ${(m.host_pause_seconds.median / m.snap_pause_seconds.median).toFixed(1)}× shorter | ${where} |`);
    out.push(`| 16 GiB pool: rollback from GPU memory, application pause | **${ms('roll_pause_seconds')} ms** | host route ${ms('host_roll_pause_seconds')} ms (gpuckpt) | ${(m.host_roll_pause_seconds.median / m.roll_pause_seconds.median).toFixed(1)}× shorter | ${where} |`);
  }
  const bar = results.bar;
  if (bar?.metrics.dma_paused_read_s_4096) {
    const m = bar.metrics;
    const where = `${bar.gpus}× ${bar.gpu.replace('NVIDIA ', '')}, ${bar.date}`;
    const us = (k) => (1e6 * m[k].median).toFixed(1);
    out.push(`| peek 4 KiB through the BAR, application not paused | **${us('bar_read_s_4096')} µs** | DMA from outside, its pause included ${us('dma_paused_read_s_4096')} µs (gpuckpt) | ${(m.dma_paused_read_s_4096.median / m.bar_read_s_4096.median).toFixed(1)}× | ${where} |`);
    if (m.scattered_bar_write_s_4096)
      out.push(`| 64 scattered 4 KiB writes (poke), application paused | **${us('scattered_bar_write_s_4096')} µs** BAR | one DMA batch ${us('scattered_dma_write_s_4096')} µs (gpuckpt) | ${(m.scattered_dma_write_s_4096.median / m.scattered_bar_write_s_4096.median).toFixed(1)}× | ${where} |`);
  }
  const shim = results.shim;
  if (shim) {
    const m = shim.metrics;
    out.push(`| cudaMalloc + cudaFree under the shim | **${(m.malloc_free_ns_shim.median / 1000).toFixed(1)} µs** | native ${(m.malloc_free_ns_plain.median / 1000).toFixed(1)} µs | ${(m.malloc_free_ns_plain.median / m.malloc_free_ns_shim.median).toFixed(1)}× faster | ${shim.gpus}× ${shim.gpu.replace('NVIDIA ', '')}, ${shim.date} |`);
    if (m.launch_rate_ratio_in_process) out.push(`| kernel launch rate under the shim, one process | **${(100 * m.launch_rate_ratio_in_process.median).toFixed(2)} %** of native | — | — | ${shim.gpus}× ${shim.gpu.replace('NVIDIA ', '')}, ${shim.date} |`);
  }
  return out.join('\n');
}

const page = [
  '# Benchmarks',
  '',
  'Current figures only, written by `npm run bench:report` from `docs/bench/*.json`, which `npm run bench` (`test/gpu/bench.mjs`) writes on a GPU host; each section names the command that made it, and rerunning it regenerates its raw output. A figure is the median of the runs listed; the anchor is the driver checkpoint API (as `cuda-checkpoint` calls it) with CRIU, on the same process in the same run.',
  '',
  headline(),
  '',
  ...files.map((f) => {
    const r = results[f.replace(/\.json$/, '')];
    // notes: what a later reader must know beside the figures (other runs, what varies), added by hand.
    return [table(f.replace(/\.json$/, ''), r), ...(r.notes ?? []).flatMap((n) => [n, ''])].join('\n\n');
  }),
];
fs.writeFileSync(doc, page.join('\n').replace(/\n{3,}/g, '\n\n'));
console.log(`bench-report: ${files.length} workload(s) from ${dir} into ${doc} (${page.join('\n').split('\n').length} lines)`);
