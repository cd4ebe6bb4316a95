// Snapshots held in GPU memory on a real GPU (part of npm run test:gpu):
//   gpu-held   pool_fill (the pool_fill size: 2 GiB in the quick suite) on
//              GPU 0. RUNS times (GPU_TEST_HELD_RUNS, default 3), alternately:
//              checkpoint --gpu-only --to-gpu, mutate, restore gpu:ID --into,
//              the data bit for bit; and the host route beside it
//              (checkpoint --gpu-only -o DIR, mutate, restore --into). On
//              two GPUs a snapshot onto GPU 1 rolled back the same way. ps
//              lists what is held; release lets it go. Then the program
//              asks for more memory than GPU 0 has free: the snapshot held
//              there goes (the shim asks the holder) and the allocation
//              succeeds.

import fs from 'node:fs';
import { spawnSync } from 'node:child_process';


const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** nvidia-smi's free memory of the GPU with that UUID, MiB. */
function freeMiB(uuid) {
  const r = spawnSync('nvidia-smi', ['--query-gpu=uuid,memory.free', '--format=csv,noheader,nounits'], { encoding: 'utf8' });
  const row = (r.stdout ?? '').split('\n').map((l) => l.split(',').map((s) => s.trim())).find(([u]) => u?.toLowerCase() === uuid.toLowerCase());
  return row ? Number(row[1]) : NaN;
}

/**
 * runs rounds on the pool_fill program app (its pid, its ready buffers R):
 * a snapshot in GPU memory, mutate, rollback, the data checked; the host
 * route the same way; then, on two GPUs, one snapshot onto GPU 1. add(k, v)
 * records a run of metric k (seconds; *_command_seconds count the whole
 * gpuckpt command, node's start included). Used by the test below and by
 * npm run bench (BENCH_HELD).
 */
export async function heldRounds(h, app, pid, R, runs, add) {
  const { cliJson, expectSame, failure, snapPath } = h;
  const uuids = h.gpuUuids();
  const timed = async (args) => {
    const t0 = performance.now();
    const r = await cliJson(args, 300_000);
    return { r, s: (performance.now() - t0) / 1000 };
  };
  const rollBack = async (snapshot, what) => {
    await app.send('mutate', 'mutated', 120_000);
    const back = await timed(['restore', snapshot, '--into', pid, '--json']);
    expectSame((await app.send('state', 'state', 120_000)).buffers, R, `state after rolling back to ${what}`);
    return back;
  };
  for (let i = 0; i < runs; i++) {
    const { r: s, s: snapCommand } = await timed(['checkpoint', pid, '--gpu-only', '--to-gpu', '--json']);
    if (s.gpus[0]?.toLowerCase() !== uuids[0]?.toLowerCase()) throw failure(`--to-gpu without a GPU held the snapshot on ${s.gpus}, not the process's GPU ${uuids[0]}`);
    const listed = (await cliJson(['ps', '--json'])).find((p) => String(p.pid) === pid)?.gpuSnapshots ?? [];
    if (listed.length !== 1 || listed[0].snapshot !== s.snapshot || listed[0].bytes !== s.heldBytes) throw failure(`ps lists ${JSON.stringify(listed)} for ${s.snapshot}`);
    const { r, s: rollCommand } = await rollBack(s.snapshot, `${s.snapshot} (GPU 0)`);
    await cliJson(['release', s.snapshot, '--json']);
    add('snap_pause_seconds', s.pauseSeconds);
    add('snap_seconds', s.seconds);
    add('snap_command_seconds', snapCommand);
    add('snap_copy_GBps', s.copyGBps);
    add('held_bytes', s.heldBytes);
    add('roll_pause_seconds', r.pauseSeconds);
    add('roll_seconds', r.seconds);
    add('roll_command_seconds', rollCommand);
    // The host route, same pool, same run.
    const dir = snapPath(`gpu-held-host-${i}`);
    const { r: c, s: hostCommand } = await timed(['checkpoint', pid, '--gpu-only', '-o', dir, '--json']);
    const { r: hr, s: hostRollCommand } = await rollBack(dir, `the host-memory image ${i}`);
    fs.rmSync(dir, { recursive: true, force: true });
    add('host_pause_seconds', c.pauseSeconds);
    add('host_seconds', c.seconds);
    add('host_command_seconds', hostCommand);
    add('host_roll_pause_seconds', hr.pauseSeconds);
    add('host_roll_seconds', hr.seconds);
    add('host_roll_command_seconds', hostRollCommand);
    if (uuids.length < 2) continue;
    const { r: s1 } = await timed(['checkpoint', pid, '--gpu-only', '--to-gpu', '1', '--json']);
    if (s1.gpus[0]?.toLowerCase() !== uuids[1].toLowerCase()) throw failure(`--to-gpu 1 held the snapshot on ${s1.gpus}`);
    const { r: r1 } = await rollBack(s1.snapshot, `${s1.snapshot} (GPU 1)`);
    await cliJson(['release', s1.snapshot, '--json']);
    add('other_snap_pause_seconds', s1.pauseSeconds);
    add('other_roll_pause_seconds', r1.pauseSeconds);
  }
}

export async function runGpuHeld(h) {
  const { App, test, failure, cliJson, expectSame, measure, gib, env } = h;

  await test('gpu-held', async () => {
    const app = new App('gpu-held', 'pool_fill', [String(gib)]);
    const R = (await app.ready(240_000)).buffers;
    const pid = String(app.pid);
    const runs = Number(env.GPU_TEST_HELD_RUNS ?? 3);
    const m = {};
    await heldRounds(h, app, pid, R, runs, (k, v) => (m[k] ??= []).push(v));
    // The application needs the memory: the snapshot gives way.
    const uuid = h.gpuUuids()[0];
    const s2 = await cliJson(['checkpoint', pid, '--gpu-only', '--to-gpu', '--json'], 120_000);
    const free = freeMiB(uuid);
    if (!Number.isFinite(free)) throw failure('nvidia-smi did not say how much memory GPU 0 has free');
    const want = free + Math.floor(s2.heldBytes / 2 ** 20 / 2);
    const g = await app.send(`grab ${want}`, 'grabbed', 120_000);
    if (!g.ok) throw failure(`the program could not allocate ${want} MiB (${free} MiB free, the snapshot holding ${Math.round(s2.heldBytes / 2 ** 20)} MiB): ${g.error}`);
    const after = (await cliJson(['ps', '--json'])).find((p) => p.pid === app.pid)?.gpuSnapshots ?? [];
    if (after.some((x) => x.snapshot === s2.snapshot)) throw failure(`${s2.snapshot} is still held after the program needed its memory`);
    await app.send('ungrab', 'ungrabbed', 120_000);
    expectSame((await app.send('state', 'state')).buffers, R, 'state after the grab');
    await app.quit();
    const med = Object.fromEntries(Object.entries(m).map(([k, v]) => [k, median(v)]));
    measure('gpu-held', { GiB: gib, runs, ...med });
    const ms = (k) => (med[k] === undefined ? '-' : `${(med[k] * 1000).toFixed(1)} ms`);
    return (
      `${gib} GiB pool, ${runs} runs, medians: snapshot paused ${ms('snap_pause_seconds')} (copy ${med.snap_copy_GBps} GB/s, command ${med.snap_command_seconds.toFixed(3)} s), ` +
      `rollback paused ${ms('roll_pause_seconds')} (command ${med.roll_command_seconds.toFixed(3)} s); host route ${ms('host_pause_seconds')} / ${med.host_command_seconds.toFixed(3)} s and ` +
      `${ms('host_roll_pause_seconds')} / ${med.host_roll_command_seconds.toFixed(3)} s; onto GPU 1 ${ms('other_snap_pause_seconds')}, back ${ms('other_roll_pause_seconds')}; data bit for bit each time; ` +
      `a grab of ${want} MiB (${free} free) let the snapshot go and succeeded`
    );
  });
}
