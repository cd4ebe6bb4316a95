// Images as one stream on a real GPU (part of npm run test:gpu): a
// pool_fill process's --gpu-only image three ways, each restored into it
// bit for bit, timed side by side (GPU_TEST_STREAM_RUNS runs, default 2):
//   directory  checkpoint -o DIR, then restore DIR --into
//   pipe       checkpoint -o - | restore - --into (both at once)
//   file       checkpoint --export FILE, then restore --import FILE --into
// Streams pass as they do for a user who sets no TMPDIR: through /dev/shm
// where the image fits (both ends of the pipe: its header says how much at
// most comes), else the disk.
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';

export async function runStream(h) {
  const { App, GPUCKPT, test, failure, cliJson, expectSame, snapPath, measure, tmpRoot, gib } = h;

  await test('stream', async () => {
    const runs = Number(process.env.GPU_TEST_STREAM_RUNS ?? 2);
    const { TMPDIR: _, ...withoutTmpdir } = process.env;
    const app = new App('stream', 'pool_fill', [String(gib)]);
    const R = (await app.ready(240_000)).buffers;
    const pid = String(app.pid);
    const t = {};
    const add = (k, v) => (t[k] ??= []).push(v);
    const timed = async (f) => {
      const t0 = performance.now();
      await f();
      return (performance.now() - t0) / 1000;
    };
    const back = async (what) => expectSame((await app.send('state', 'state')).buffers, R, `state after the ${what} restore`);
    const sh = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;
    try {
      for (let i = 0; i < runs; i++) {
        const dir = snapPath('stream-dir');
        add('dir_ckpt_s', await timed(() => cliJson(['checkpoint', pid, '--gpu-only', '-o', dir, '--json'], 300_000)));
        await app.send('mutate', 'mutated');
        add('dir_restore_s', await timed(() => cliJson(['restore', dir, '--into', pid, '--json'], 300_000)));
        await back('directory');
        fs.rmSync(dir, { recursive: true, force: true });

        const file = snapPath('stream-file');
        add('file_ckpt_s', await timed(() => cliJson(['checkpoint', pid, '--gpu-only', '--export', file, '--json'], 300_000)));
        add('file_bytes', fs.statSync(file).size);
        await app.send('mutate', 'mutated');
        add('file_restore_s', await timed(() => cliJson(['restore', '--import', file, '--into', pid, '--json'], 300_000)));
        await back('--import');
        fs.rmSync(file, { force: true });

        const cmd = `${sh(GPUCKPT)} checkpoint ${pid} --gpu-only -o - | ${sh(GPUCKPT)} restore - --into ${pid} --json`;
        let received;
        const pipe = await timed(async () => {
          const r = spawnSync('bash', ['-o', 'pipefail', '-c', cmd], { encoding: 'utf8', env: withoutTmpdir, timeout: 300_000 });
          if (r.status !== 0) throw failure(`checkpoint -o - | restore -: ${(r.stderr || '').trim().split('\n').at(-1)}`);
          received = JSON.parse(r.stdout);
        });
        add('pipe_s', pipe);
        // Where the pipe's time goes: the stream received whole (the sender done), then the restore from it.
        add('pipe_received_s', received.stream.seconds);
        add('pipe_restore_s', received.seconds);
        await back('piped');
      }
    } finally {
      await app.quit();
    }
    const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const m = Object.fromEntries(Object.entries(t).map(([k, v]) => [k, median(v)]));
    const dirPair = m.dir_ckpt_s + m.dir_restore_s;
    measure('stream', { GiB: gib, runs, ...m, dir_pair_s: dirPair, pipe_vs_dir: m.pipe_s / dirPair, file_vs_dir: (m.file_ckpt_s + m.file_restore_s) / dirPair, all: JSON.stringify(t) });
    if (fs.readdirSync(tmpRoot).some((n) => n.includes('gpuckpt-tmp'))) throw failure(`a stream left its directory in ${tmpRoot}`);
    return `${gib} GiB pool, data bit for bit each way: directory ${m.dir_ckpt_s.toFixed(2)} + ${m.dir_restore_s.toFixed(2)} s, piped ${m.pipe_s.toFixed(2)} s (${((100 * m.pipe_s) / dirPair).toFixed(0)} %), file ${m.file_ckpt_s.toFixed(2)} + ${m.file_restore_s.toFixed(2)} s`;
  });
}
