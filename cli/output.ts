/** Human-readable and JSON renderings of the controller's results. */
import type { CheckpointSummary } from '../controller/engine/pool-image.js';
import type { InspectReport } from '../controller/verbs/inspect.js';
import type { ProcessRow } from '../controller/verbs/ps.js';
import type { RollbackSummary } from '../controller/verbs/rollback.js';
import type { MigrateSummary } from '../controller/verbs/migrate.js';
import type { ResumeSummary, SuspendSummary } from '../controller/engine/suspend.js';
import type { ProcessCheckpointSummary } from '../controller/verbs/process-checkpoint.js';
import type { ProcessRestoreSummary } from '../controller/verbs/process-restore.js';
import type { JobCheckpointSummary, JobResumeSummary, JobSuspendSummary } from '../controller/verbs/job.js';
import { formatBytes, hex } from '../controller/base/units.js';
import type { StreamedSummary } from '../controller/verbs/image-stream.js';
import type { GpuRollbackSummary, GpuSnapshotSummary, HeldSnapshot, ReleaseSummary } from '../controller/verbs/gpu-held.js';
import type { PeekResult, PokeSummary } from '../controller/verbs/peek.js';
import { elementSize } from '../controller/base/element-format.js';
import { bytesOf, zeroRanges } from '../controller/image/chain.js';
import { describeFrameworkUse } from '../controller/engine/framework-free.js';

/** JSON with 64-bit values readable by any consumer: addresses as hex
 * strings, other BigInts as numbers (sizes stay far below 2^53). */
export function toJson(value: unknown): string {
  return JSON.stringify(
    value,
    (key, v) => {
      if (typeof v !== 'bigint') return v;
      return /^(addr|poolBase|base)$/.test(key) ? hex(v) : Number(v);
    },
    2,
  );
}

export function printProcesses(rows: ProcessRow[]): void {
  if (rows.length === 0) {
    console.log('no processes running under gpuckpt');
    return;
  }
  const header = ['PID', 'JOB', 'NCCL', 'POOL BASE', 'SIZE/GPU', 'IN USE (per GPU)', 'OUTSIDE POOL', 'STATE', 'COMMAND'];
  const table = rows.map((r) => {
    const outside = r.outsidePool.managed + r.outsidePool.streamOrdered + r.outsidePool.host + r.outsidePool.unrouted;
    return [
      String(r.pid),
      r.job ? `${r.job.launcher}${r.job.name ? ` (${r.job.name})` : ''}` : '-',
      r.nccl.length ? r.nccl.map((c) => `${c.rank}/${c.nranks}${c.down ? ' down' : ''}`).join(' ') : '-',
      r.error ? '-' : hex(r.poolBase),
      r.error ? '-' : formatBytes(r.sliceSize),
      r.error ? '-' : r.devices.map((d) => `${d.device}:${formatBytes(d.bytesInUse)}`).join(' ') || '-',
      r.error ? '-' : formatBytes(outside),
      r.error ? `error: ${r.error}` : r.gate === 'closed' ? `${r.poolState}, paused` : r.poolState,
      r.command.join(' '),
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)));
  for (const row of [header, ...table]) console.log(row.map((c, i) => (i === row.length - 1 ? c : c.padEnd(widths[i]!))).join('  '));
  // Each job of several processes, in a line: the id its verbs take.
  const jobs = new Map<number, ProcessRow[]>();
  for (const r of rows) if (r.job) jobs.set(r.job.launcher, [...(jobs.get(r.job.launcher) ?? []), r]);
  for (const [launcher, ranks] of jobs) {
    if (ranks.length < 2 && ranks[0]!.pid === launcher) continue;
    const gpus = [...new Set(ranks.flatMap((r) => r.devices.filter((d) => d.bytesMapped > 0n).map((d) => d.device)))].sort();
    const pool = ranks.reduce((n, r) => n + r.devices.reduce((m, d) => m + d.bytesInUse, 0n), 0n);
    const name = ranks[0]!.job!.name;
    console.log(`job ${launcher}${name ? ` (${name})` : ''}: ${ranks.length} CUDA process(es) ${ranks.map((r) => r.pid).join(', ')}; GPUs ${gpus.join(', ') || '-'}; pool ${formatBytes(pool)} in use`);
  }
  for (const r of rows) for (const s of r.gpuSnapshots) console.log(describeGpuSnapshot(s));
}

/** One line per GPU-held snapshot: its name, process, what it holds where, and when it was taken. */
function describeGpuSnapshot(s: HeldSnapshot): string {
  const where = s.gpus.map((g) => `${formatBytes(g.bytes)} on ${g.uuid}`).join(', ');
  const taken = new Date(s.createdMs).toISOString().replace('T', ' ').slice(0, 19);
  return `snapshot ${s.snapshot} of process ${s.pid}: ${where}${s.rawBytes !== undefined ? ` (${formatBytes(s.rawBytes)} allocated)` : ''}, taken ${taken} UTC${s.complete ? '' : ', being made'}`;
}

export function printGpuSnapshot(s: GpuSnapshotSummary): void {
  console.log(`snapshot ${s.snapshot} of process ${s.pid} held in GPU memory on ${s.gpus.join(', ')}`);
  console.log(`  ${formatBytes(s.rawBytes)} allocated, ${formatBytes(s.heldBytes)} of GPU memory held; restore ${s.snapshot} --into ${s.pid} rolls back to it, gpuckpt release ${s.snapshot} lets it go`);
  console.log(`  application paused ${(s.pauseSeconds * 1000).toFixed(1)} ms (copy ${(s.copySeconds * 1000).toFixed(1)} ms, ${s.copyGBps} GB/s); total ${s.seconds} s`);
}

export function printGpuRollback(s: GpuRollbackSummary): void {
  console.log(`process ${s.pid} rolled back to snapshot ${s.snapshot} (${formatBytes(s.rawBytes)})`);
  console.log(`  application paused ${(s.pauseSeconds * 1000).toFixed(1)} ms (copy ${(s.copySeconds * 1000).toFixed(1)} ms, ${s.copyGBps} GB/s); total ${s.seconds} s`);
}

export function printPeek(r: PeekResult): void {
  const perLine = r.format === 'hex' ? 16 : Math.max(1, 32 / elementSize(r.format));
  const size = elementSize(r.format);
  for (let i = 0; i < r.values.length; i += perLine) {
    const cells = r.values.slice(i, i + perLine).map((v) => (r.format === 'hex' ? Number(v).toString(16).padStart(2, '0') : String(v)));
    console.log(`${hex(r.addr + BigInt(i * size))}  ${cells.join(' ')}`);
  }
  console.error(`(${r.length} bytes of process ${r.pid}, device ${r.device}, through ${r.route === 'vulkan' ? "the GPU's BAR (Vulkan)" : 'a mapping of the exported memory'}, read in ${(r.readSeconds * 1e6).toFixed(0)} µs)`);
}

export function printPoke(r: PokeSummary): void {
  console.log(`wrote ${r.length} bytes at ${hex(r.addr)} of process ${r.pid} (device ${r.device}) through ${r.route === 'vulkan' ? "the GPU's BAR (Vulkan)" : 'a mapping of the exported memory'}; paused ${(r.pauseSeconds * 1000).toFixed(1)} ms`);
}

export function printRelease(s: ReleaseSummary): void {
  console.log(s.released ? `released ${s.released} GPU-held snapshot(s), ${formatBytes(s.bytes)} of GPU memory` : 'no GPU-held snapshot to release');
}

export function printCheckpoint(s: CheckpointSummary): void {
  console.log(`checkpoint of process ${s.pid} written to ${s.image}`);
  if (s.parent) console.log(`  ${s.allocations} allocations (${formatBytes(s.poolBytes)}); changed since ${s.parent}: ${formatBytes(s.rawBytes)} -> ${formatBytes(s.storedBytes)} (ratio ${s.ratio})`);
  else console.log(`  ${s.allocations} allocations, ${formatBytes(s.rawBytes)} -> ${formatBytes(s.storedBytes)} (ratio ${s.ratio})`);
  if (s.zeroBytes) console.log(`  ${formatBytes(s.zeroBytes)} of all-zero blocks left on the GPU, recorded by their digest`);
  if (s.framework) console.log(`  ${describeFrameworkUse(s.framework)}`);
  console.log(`  application paused ${(s.pauseSeconds * 1000).toFixed(1)} ms; DMA ${s.copyGBps} GB/s; total ${s.seconds} s (${s.throughputGBps} GB/s)`);
  if (s.live) console.log(`  ${liveLine(s.live)}`);
}

/** checkpoint --live: what was copied while the application ran, and in its pause. */
export function liveLine(l: NonNullable<CheckpointSummary['live']>): string {
  const rounds = l.rounds.map((r) => `${formatBytes(r.bytes)} in ${r.seconds} s`).join(', ');
  return `live: ${l.rounds.length} round(s) while running (${rounds}); ${formatBytes(l.pauseBytes)} copied in the pause`;
}

export function printRollback(s: RollbackSummary): void {
  console.log(`restored ${s.image} into process ${s.pid}: ${formatBytes(s.rawBytes)} in ${s.seconds} s`);
  console.log(`  application paused ${(s.pauseSeconds * 1000).toFixed(1)} ms; DMA ${s.copyGBps} GB/s`);
}

/** inspect --json: the manifest's fields at top level, plus the verdict. */
export function inspectJson(r: InspectReport): string {
  const { blocks, parent, ...m } = r.manifest;
  return toJson({
    image: r.image,
    verified: r.verified,
    ...(r.problem ? { problem: r.problem } : {}),
    ...m,
    // Digests are for gpuckpt; their count and block size say what they cover.
    ...(blocks ? { blocks: { size: blocks.size, count: blocks.digests.reduce((n, d) => n + d.length / 8, 0) } } : {}),
    ...(parent ? { parent: { path: parent.path, manifestSha256: Buffer.from(parent.manifestSha256).toString('hex') } } : {}),
    chain: r.chain,
    ...(r.criuPages ? { criuPages: r.criuPages } : {}),
  });
}

export function printInspect(r: InspectReport): void {
  const m = r.manifest;
  const outside = m.outsidePool;
  console.log(`image        ${r.image}`);
  console.log(`format       ${m.format} version ${m.version} (protocol ${m.protocolVersion}), ${m.kind}, created ${m.createdAt}`);
  console.log(`source       pid ${m.source.pid} on ${m.source.host}: ${m.source.command.join(' ')}`);
  console.log(`pool         base ${hex(m.pool.base)}, ${formatBytes(m.pool.sliceSize)} per device, ${m.pool.deviceCount} device(s)`);
  for (const d of m.devices) console.log(`device ${d.ordinal}     ${d.name} (${d.uuid}), ${formatBytes(d.totalMemory)}`);
  console.log(`allocations  ${m.allocations.length}`);
  for (const a of m.allocations) console.log(`  device ${a.device}  ${hex(a.addr)}  ${formatBytes(a.size)}`);
  console.log(`data         ${formatBytes(m.data.rawBytes)} stored as ${formatBytes(m.data.storedBytes)} in ${m.data.frames.length} frames${m.parent ? ' (the blocks changed since its parent)' : ''}`);
  if (m.blocks) {
    const zero = bytesOf(zeroRanges(m.allocations, m.blocks.digests, m.blocks.size));
    console.log(`digests      ${m.blocks.digests.reduce((n, d) => n + d.length / 8, 0)} blocks of ${formatBytes(BigInt(m.blocks.size))}: can be a parent (checkpoint --parent); ${formatBytes(zero)} all zeros`);
  }
  if (m.unused) console.log(`unused       ${formatBytes(bytesOf(m.unused))} the framework held unused, in ${m.unused.length} range(s): not in the image, left as they are by a restore`);
  if (m.parent) console.log(`parent       ${m.parent.path}`);
  for (const [i, p] of r.chain.entries()) console.log(`chain ${i + 1}      ${p.image} (${p.createdAt}): ${formatBytes(p.rawBytes)} stored as ${formatBytes(p.storedBytes)}`);
  if (r.criuPages) console.log(`CRIU pages   ${formatBytes(r.criuPages.rawBytes)} stored as ${formatBytes(r.criuPages.storedBytes)} in ${r.criuPages.files} file(s)`);
  console.log(`outside pool managed ${formatBytes(outside.managed)}, stream-ordered ${formatBytes(outside.streamOrdered)}, pinned host ${formatBytes(outside.host)}, unrouted ${formatBytes(outside.unrouted)}`);
  console.log(`checksums    ${r.verified ? 'all verified' : r.problem ? `FAILED: ${r.problem}` : 'not checked'}`);
}

export function printSuspend(s: SuspendSummary): void {
  const where = s.heldIn === 'memory' ? 'in host memory' : s.heldIn === 'gpu' ? 'on the target GPU' : `at ${s.image} as ${formatBytes(s.storedBytes)}`;
  const zeros = s.zeroBytes ? ` (${formatBytes(s.zeroBytes)} of it all zeros, left to be zeroed again)` : '';
  console.log(`process ${s.pid} suspended: its GPU is free; pool (${formatBytes(s.rawBytes)}) held ${where}${zeros}`);
  console.log(`  pool memory released after ${s.poolReleasedSeconds} s, GPU free after ${s.gpuFreeSeconds} s; total ${s.seconds} s`);
}

export function printJobSuspend(s: JobSuspendSummary): void {
  console.log(`job of process ${s.pid} suspended: CUDA in ${s.members.join(', ')}, every GPU free; ${s.communicators} NCCL communicator(s) torn down, made again at the resume`);
  const pool = s.suspended.reduce((n, m) => n + m.rawBytes, 0);
  console.log(`  ranks at a common collective boundary after ${s.cutSeconds} s, NCCL torn down in ${s.teardownSeconds} s; pools (${formatBytes(pool)}) held in host memory; GPUs free after ${s.gpuFreeSeconds} s; total ${s.seconds} s`);
}

export function printJobResume(r: JobResumeSummary): void {
  const pool = r.resumed.reduce((n, m) => n + m.rawBytes, 0);
  const where = [...new Set(r.resumed.map((m) => m.device).filter(Boolean))];
  console.log(`job of process ${r.pid} resumed${where.length ? ` (GPU ${where.join(', ')} first)` : ''}: ${formatBytes(pool)} back in ${r.resumed.length} pool(s), ${r.communicators} NCCL communicator(s) made again in ${r.rebuildSeconds} s; total ${r.seconds} s`);
}

export function printJobCheckpoint(s: JobCheckpointSummary): void {
  console.log(`checkpoint of the job of process ${s.pid} (CUDA in ${s.members.join(', ')}) written to ${s.image}`);
  console.log(`  ${formatBytes(s.rawBytes)} -> ${formatBytes(s.storedBytes)}; ranks held at a common collective boundary after ${s.cutSeconds} s, for ${s.pauseSeconds} s in all; total ${s.seconds} s`);
}

export function printResume(r: ResumeSummary): void {
  console.log(`process ${r.pid} resumed${r.device ? ` on ${r.device}` : ''}: ${formatBytes(r.rawBytes)} back in the pool in ${r.seconds} s`);
  console.log(`  driver restore ${r.driverRestoreSeconds} s, pool remap ${r.remapSeconds} s, DMA ${r.copyGBps} GB/s`);
}

export function printMigrate(m: MigrateSummary): void {
  console.log(`process ${m.pid} moved to ${m.device}: ${formatBytes(m.rawBytes)} of pool, application down ${m.downtimeSeconds} s`);
  console.log(m.route === 'gpu' ? '  pool copied GPU to GPU' : `  pool moved through host memory${m.whyThroughHost ? `: ${m.whyThroughHost}` : ''}`);
}

export function printProcessCheckpoint(s: ProcessCheckpointSummary): void {
  const job = s.members.length > 1 || s.members[0] !== s.pid ? `job of process ${s.pid} (CUDA in ${s.members.join(', ')})` : `process ${s.pid}`;
  console.log(`${job} saved to ${s.image}${s.leftRunning ? '; it carries on' : '; it has stopped and its GPU is free'}`);
  console.log(`  pool ${formatBytes(s.rawBytes)} -> ${formatBytes(s.storedBytes)}; GPU free after ${s.gpuFreeSeconds} s; CRIU ${s.criuVersion} dump ${s.dumpSeconds} s; total ${s.seconds} s`);
  if (s.criuPages) console.log(`  CRIU's pages ${formatBytes(s.criuPages.rawBytes)} -> ${formatBytes(s.criuPages.storedBytes)} in ${s.criuPages.seconds} s`);
  if (s.pauseSeconds !== undefined)
    console.log(`  application paused ${s.pauseSeconds} s (${s.route === 'gpu' ? 'pool copied on its GPU' : `pool through host memory: ${s.whyThroughHost ?? 'asked to'}`})`);
  for (const n of s.notes) console.log(`  ${n}`);
}

export function printProcessRestore(s: ProcessRestoreSummary): void {
  process.stderr.write(
    `gpuckpt: restored process ${s.pid}${s.members.length > 1 ? ` (CUDA in ${s.members.join(', ')})` : ''} from ${s.image} in ${s.seconds} s (CRIU ${s.criuSeconds} s${s.criuPages ? `, its pages unpacked first in ${s.criuPages.seconds} s${s.criuPages.leftOutBytes ? `, ${formatBytes(s.criuPages.leftOutBytes)} of zero pages left out` : ''}` : ''}; pool image decompressed meanwhile in ${s.loadSeconds} s)\n`,
  );
  for (const f of s.appended ?? []) process.stderr.write(`gpuckpt: ${f} changed since the image was made: the job writes on at its end\n`);
}

/** An attached restore's exit status: the job's, as a shell reports it (128 + N for signal N); 1, and why, when it is not known. */
export function restoredJobStatus(s: ProcessRestoreSummary): number {
  if (s.exitCode != null) return s.exitCode;
  if (s.signalNumber != null) return 128 + s.signalNumber;
  process.stderr.write(`gpuckpt: process ${s.pid} has ended, its exit status unknown: CRIU did not make it a child of gpuckpt (run through a wrapper?)\n`);
  return 1;
}

export function printStream(s: StreamedSummary['stream']): void {
  console.log(`  streamed ${formatBytes(s.bytes)} (${s.files} files)${s.to ? ` to ${s.to}` : s.from ? ` from ${s.from}` : ''} in ${s.seconds} s`);
}
