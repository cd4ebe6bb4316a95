/**
 * Snapshots held in GPU memory (checkpoint --gpu-only --to-gpu) on the CPU:
 * the real shim, CLI and snapshot holder against the fake driver, whose
 * exported chunks are memfds that outlive the controller as the real
 * driver's fds do. Covers the round trip, the bookkeeping (ps, release,
 * the process ending), the refusals, and the shim asking the holder for
 * memory when the application runs out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readFileSync, utimesSync } from 'node:fs';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { sameBuffers } from '../controller/adapters/app-driver.js';
import { APPS, eventually, json, requireBuilt, Sandbox } from './helpers/e2e.js';
import { chunkRuns } from '../controller/verbs/gpu-held.js';
import { holderBinary, holderSocket, SnapshotHolder } from '../controller/adapters/snapshot-holder.js';
import { startTime } from '../controller/adapters/processes.js';
import { HoldEntryFlag, MessageType, native } from '../native/index.js';


const box = new Sandbox();
const env = { FAKE_CUDA_DEVICES: '2' };
const cli = (args: string[], extra: Record<string, string> = {}) => box.cli(args, { ...env, ...extra });
const start = (extra: Record<string, string> = {}) => box.start(APPS.linked, { env: { ...env, ...extra } });
const snapshotsOf = (pid: number): any[] => json<any[]>(cli(['ps', '--json']).stdout).find((r) => r.pid === pid)?.gpuSnapshots ?? [];

beforeAll(() => requireBuilt());
afterAll(async () => {
  cli(['release', '--all']);
  box.cleanup();
});

describe('chunkRuns', () => {
  const base = 0x600000000000n;
  const MiB = 1n << 20n;
  const at = (device: number, off: bigint, size: bigint) => ({ device, addr: base + BigInt(device) * (256n << 30n) + off, size });
  it('merges the chunks allocations touch into runs, per device, in address order', () => {
    const runs = chunkRuns(
      [
        at(0, 6n * MiB, 1n * MiB), // chunk 3
        at(0, 0n, 512n), // chunk 0
        at(0, 2n * MiB - 512n, 1024n), // chunks 0 and 1: across a boundary
        at(1, 4n * MiB, 4n * MiB), // device 1, chunks 2 and 3 of its slice
        at(0, 10n * MiB, 2n * MiB), // chunk 5 exactly
      ],
      base,
      2n * MiB,
      2,
    );
    expect(runs[0]).toEqual([
      { addr: base, chunks: 2 },
      { addr: base + 6n * MiB, chunks: 1 },
      { addr: base + 10n * MiB, chunks: 1 },
    ]);
    expect(runs[1]).toEqual([{ addr: base + (256n << 30n) + 4n * MiB, chunks: 2 }]);
    expect(chunkRuns([], base, 2n * MiB, 1)).toEqual([[]]);
  });
});

describe('GPU-held snapshots', () => {
  it('takes a snapshot, rolls back to it bit for bit, twice, and lists it', async () => {
    const { app, ready } = await start();
    const take = cli(['checkpoint', String(app.pid), '--gpu-only', '--to-gpu', '--json']);
    expect(take.stderr).toBe('');
    expect(take.code).toBe(0);
    const s = json<any>(take.stdout);
    expect(s.snapshot).toMatch(/^gpu:[0-9]+$/);
    expect(s.pid).toBe(app.pid);
    expect(s.heldBytes).toBeGreaterThanOrEqual(s.rawBytes);
    expect(s.gpus).toHaveLength(1);
    // The controller is gone: the holder keeps the memory.
    const listed = snapshotsOf(app.pid);
    expect(listed.map((x) => x.snapshot)).toEqual([s.snapshot]);
    expect(listed[0]).toMatchObject({ complete: true, bytes: s.heldBytes, rawBytes: s.rawBytes });
    expect(cli(['ps']).stdout).toContain(`snapshot ${s.snapshot} of process ${app.pid}`);

    for (let round = 0; round < 2; round++) {
      const mutated = await app.command('mutate');
      expect(sameBuffers(mutated.buffers, ready.buffers)).toBe(false);
      const back = cli(['restore', s.snapshot, '--into', String(app.pid), '--json']);
      expect(back.stderr).toBe('');
      expect(back.code).toBe(0);
      expect(json<any>(back.stdout)).toMatchObject({ snapshot: s.snapshot, pid: app.pid, rawBytes: s.rawBytes });
      expect(sameBuffers((await app.command('state')).buffers, ready.buffers)).toBe(true);
    }
    // A second snapshot onto the other GPU, then both let go.
    const other = json<any>(cli(['checkpoint', String(app.pid), '--gpu-only', '--to-gpu', '1', '--json']).stdout);
    expect(other.gpus).toEqual(['GPU-46414b45-0100-0000-0000-000000000000']);
    expect(snapshotsOf(app.pid)).toHaveLength(2);
    const rel = cli(['release', '--pid', String(app.pid), '--json']);
    expect(rel.code).toBe(0);
    expect(json<any>(rel.stdout)).toMatchObject({ released: 2, bytes: s.heldBytes + other.heldBytes });
    expect(snapshotsOf(app.pid)).toEqual([]);
    const gone = cli(['restore', s.snapshot, '--into', String(app.pid)]);
    expect(gone.code).toBe(2);
    expect(gone.stderr).toMatch(/^gpuckpt: no GPU-held snapshot gpu:[0-9]+ \(released/);
    await app.quit();
  });

  it('lets a snapshot go when its process ends', async () => {
    const { app } = await start();
    const s = json<any>(cli(['checkpoint', String(app.pid), '--gpu-only', '--to-gpu', '--json']).stdout);
    expect(snapshotsOf(app.pid)).toHaveLength(1);
    await app.quit();
    // A process of the same sandbox keeps ps listing (and the holder's list read).
    const { app: other } = await start();
    const held = () => json<any[]>(cli(['ps', '--json']).stdout).flatMap((r) => r.gpuSnapshots);
    expect(await eventually(() => !held().some((x) => x.snapshot === s.snapshot))).toBe(true);
    // Its description goes once no longer young (a checkpoint may be writing one): as the snapshots are listed.
    const record = join(box.runDir, 'gpu-snapshots', `${s.snapshot.slice(4)}.json`);
    expect(existsSync(record)).toBe(true);
    utimesSync(record, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000));
    held();
    expect(existsSync(record)).toBe(false);
    await other.quit();
  });

  it('refuses what cannot work in one line, with the process untouched', async () => {
    const { app, ready } = await start();
    const bad = [
      [['checkpoint', String(app.pid), '--to-gpu'], /^gpuckpt: --to-gpu keeps a --gpu-only snapshot: add --gpu-only$/],
      [['checkpoint', String(app.pid), '--gpu-only', '--to-gpu', '-o', box.path('x')], /^gpuckpt: --output is for images in files/],
      [['checkpoint', String(app.pid), '--gpu-only', '--to-gpu', '7'], /^gpuckpt: no GPU "7" on this host/],
      [['restore', 'gpu:1'], /^gpuckpt: gpu:1 is held in GPU memory for a running process: give --into PID$/],
      [['restore', 'gpu:x', '--into', String(app.pid)], /^gpuckpt: "gpu:x" is not a GPU-held snapshot's name/],
      [['release'], /^gpuckpt: say what to release/],
    ] as const;
    for (const [args, line] of bad) {
      const r = cli([...args]);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr.trimEnd()).toMatch(line);
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    }
    // A snapshot of another layout: the process has allocated since.
    const s = json<any>(cli(['checkpoint', String(app.pid), '--gpu-only', '--to-gpu', '--json']).stdout);
    await app.command('alloc 1048576');
    const r = cli(['restore', s.snapshot, '--into', String(app.pid)]);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^gpuckpt: image layout does not match process [0-9]+: the process has an allocation at 0x/);
    expect((await app.command('state')).buffers!.slice(0, ready.buffers!.length)).toEqual(ready.buffers);
    await app.quit();
  });

  it('lets go of what a checkpoint that ended midway was handing over', async () => {
    const { app } = await start();
    cli(['checkpoint', String(app.pid), '--gpu-only', '--to-gpu']); // a holder runs
    const holder = SnapshotHolder.connect(box.runDir)!;
    const raw = new (native().Session)(holderSocket(box.runDir));
    const memfd = native().createMemfd(1 << 20);
    const part = { id: 0n, startTime: BigInt(startTime(app.pid)!), bytes: 1 << 20, first: 0, pid: app.pid, part: 0, flags: 0, uuid: 'GPU-46414b45-0000-0000-0000-000000000000' };
    const put = await raw.request(MessageType.HOLD_PUT, part, 5000, [memfd]);
    native().closeFd(memfd);
    const listed = async () => (await holder.list()).entries.filter((e) => e.id === put.id);
    expect(await listed()).toMatchObject([{ flags: 0, bytes: 1 << 20 }]); // not complete
    raw.close(); // the checkpoint is gone before its last part
    expect(await eventually(async () => (await listed()).length === 0)).toBe(true);
    holder.close();
    cli(['release', '--all']);
    await app.quit();
  });

  it('has one holder per socket: two starting over a stale socket, one serves, the other says so', async () => {
    const dir = box.path('holders');
    mkdirSync(dir);
    const socket = holderSocket(dir);
    // A socket file nobody listens on: what a holder killed with SIGKILL leaves.
    const stale = spawnSync('python3', ['-c', `import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(${JSON.stringify(socket)})`]);
    expect(stale.status).toBe(0);
    const start = () => {
      const child = spawn(holderBinary(), [socket], { stdio: ['ignore', 'pipe', 'ignore'] });
      const said = new Promise<string>((res) => {
        let out = '';
        child.stdout!.on('data', (d) => (out += d));
        child.on('exit', () => res(out.trim()));
        child.stdout!.on('data', () => out.includes('\n') && res(out.trim()));
      });
      return { child, said };
    };
    const [a, b] = [start(), start()];
    const said = [await a.said, await b.said].sort();
    expect(said).toEqual(['ready', 'running']);
    const serving = (await a.said) === 'ready' ? a : b;
    const h = SnapshotHolder.connect(dir)!;
    expect((await h.list()).holderPid).toBe(serving.child.pid);
    h.close();
    serving.child.kill('SIGTERM');
    await new Promise((r) => serving.child.once('exit', r));
    expect(existsSync(socket)).toBe(false);
  });

  it("lets the oldest snapshot on a GPU go when the application there runs out of memory", async () => {
    // 64 MiB fake devices: the application's own growth fails, and its shim asks the holder.
    const { app } = await start({ FAKE_CUDA_MEM_MB: '64' });
    const s = json<any>(cli(['checkpoint', String(app.pid), '--gpu-only', '--to-gpu', '--json'], { FAKE_CUDA_MEM_MB: '64' }).stdout);
    expect(snapshotsOf(app.pid)).toHaveLength(1);
    // Its own memory is all the fake device has: the allocation fails, after the snapshot went.
    expect((await app.command('try-alloc 64')).result).toBe(2);
    expect(snapshotsOf(app.pid)).toEqual([]);
    expect(readFileSync(join(box.runDir, 'logs', 'snapshot-holder.log'), 'utf8')).toMatch(new RegExp(`let snapshot ${s.snapshot.slice(4)} of process ${app.pid} go \\([0-9]+ MiB\\): an application on its GPU ran out of memory`));
    expect(cli(['restore', s.snapshot, '--into', String(app.pid)]).code).toBe(2);
    await app.quit();
  });

  it("keeps a pool's only copy (GPCK_HOLD_KEEP) from another's reclaim and from release --all, and lets it go when its own process allocates again", async () => {
    const { app } = await start({ FAKE_CUDA_MEM_MB: '64' });
    const other = await start({ FAKE_CUDA_MEM_MB: '64' });
    cli(['checkpoint', String(app.pid), '--gpu-only', '--to-gpu'], { FAKE_CUDA_MEM_MB: '64' }); // a holder runs
    cli(['release', '--all']);
    const holder = SnapshotHolder.connect(box.runDir)!;
    // As checkpoint --leave-running keeps a copy while CRIU dumps (engine/kept-copy.ts), one for each process.
    const keep = async (pid: number) => {
      const memfd = native().createMemfd(1 << 20);
      try {
        return await holder.put(pid, BigInt(startTime(pid)!), [{ uuid: 'GPU-46414b45-0000-0000-0000-000000000000', fds: [memfd], sizes: [1 << 20] }], true);
      } finally {
        native().closeFd(memfd);
      }
    };
    const mine = await keep(app.pid);
    const theirs = await keep(other.app.pid);
    const held = async () => (await holder.list()).entries.map((e) => e.id).sort();
    expect(await held()).toEqual([mine, theirs].sort());
    // Releasing every snapshot leaves the pools' only copies, which are no user's snapshots: ps lists none.
    expect(cli(['release', '--all']).code).toBe(0);
    expect(await held()).toEqual([mine, theirs].sort());
    expect((await holder.list()).entries.every((e) => e.flags === (HoldEntryFlag.COMPLETE | HoldEntryFlag.KEPT))).toBe(true);
    const rows = json(cli(['ps', '--json']).stdout) as { pid: number; gpuSnapshots: unknown[] }[];
    expect(rows.find((r) => r.pid === app.pid)?.gpuSnapshots).toEqual([]);
    // The other process runs out of memory: its own kept copy goes, never another's.
    expect((await other.app.command('try-alloc 64')).result).toBe(2);
    expect(await held()).toEqual([mine]);
    expect((await app.command('try-alloc 64')).result).toBe(2);
    expect(await held()).toEqual([]);
    expect(readFileSync(join(box.runDir, 'logs', 'snapshot-holder.log'), 'utf8')).toMatch(new RegExp(`let snapshot ${mine} of process ${app.pid} go \\([0-9]+ MiB\\): its process runs on its pool again`));
    holder.close();
    await app.quit();
    await other.app.quit();
  });
});
