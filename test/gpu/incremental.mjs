// Incremental images on a real GPU (part of npm run test:gpu): the digest
// kernel the shim ships (a fatbin) runs on the GPU, an image made with
// --parent stores only the blocks that changed, and restore follows the
// chain bit for bit.
//   incremental          gpu-only: full image A, `touch 10` (the first 10 %
//                        of every buffer rewritten), B --parent A, `touch
//                        50`, C --parent B; mutate; restore C, B, A --into,
//                        each bit for bit; inspect shows the chain.
//   incremental/process  whole process (real CRIU): checkpoint
//                        --leave-running P1, touch 10, checkpoint --parent
//                        P1 (the process ends), restore: the touched data.

import path from 'node:path';
import { spawnSync } from 'node:child_process';

export async function runIncremental(h) {
  const { App, test, Skip, failure, cliJson, expectSame, launchViaFifo, snapPath, measure } = h;

  await test('incremental', async () => {
    const app = new App('incremental', 'static_cudart');
    const R = (await app.ready()).buffers;
    const pid = String(app.pid);
    const [A, B, C] = ['A', 'B', 'C'].map((n) => snapPath(`incremental-${n}`));
    const full = await cliJson(['checkpoint', pid, '--gpu-only', '-o', A, '--json'], 120_000);
    const T1 = (await app.send('touch 10', 'touched')).buffers;
    const inc = await cliJson(['checkpoint', pid, '--gpu-only', '-o', B, '--parent', A, '--json'], 120_000);
    const T2 = (await app.send('touch 50', 'touched')).buffers;
    await cliJson(['checkpoint', pid, '--gpu-only', '-o', C, '--parent', B, '--json'], 120_000);
    if (!(inc.rawBytes < full.rawBytes / 2)) throw failure(`the incremental image holds ${inc.rawBytes} of ${full.rawBytes} bytes after 10 % changed`);
    if (!(inc.storedBytes < full.storedBytes / 2)) throw failure(`the incremental image stores ${inc.storedBytes} bytes, the full one ${full.storedBytes}`);
    await app.send('mutate', 'mutated');
    for (const [image, want, what] of [
      [C, T2, 'C (chain of 3)'],
      [B, T1, 'B (chain of 2)'],
      [A, R, 'A (full)'],
    ]) {
      await cliJson(['restore', image, '--into', pid, '--json'], 120_000);
      expectSame((await app.send('state', 'state')).buffers, want, `state after restoring ${what}`);
    }
    const shown = await cliJson(['inspect', C, '--json']);
    if (!shown.verified || shown.chain.map((c) => c.image).join() !== [B, A].join()) throw failure(`inspect of C: ${JSON.stringify({ verified: shown.verified, chain: shown.chain })}`);
    await app.quit();
    measure('incremental', { full_raw: full.rawBytes, inc_raw: inc.rawBytes, full_stored: full.storedBytes, inc_stored: inc.storedBytes, digest_s: inc.digestSeconds, full_pause_s: full.pauseSeconds, inc_pause_s: inc.pauseSeconds });
    return (
      `digests on the GPU in ${inc.digestSeconds} s; after 10 % changed the child holds ${inc.rawBytes} of ${inc.poolBytes} bytes ` +
      `(stored ${inc.storedBytes} vs ${full.storedBytes}); restores through chains of 3, 2 and 1 bit for bit; inspect verified the chain`
    );
  });

  await test('incremental/process', async () => {
    if (spawnSync('criu', ['--version']).status !== 0) throw new Skip('criu not on PATH (source .device/setup.sh)');
    const p = launchViaFifo('static_cudart');
    try {
      const ready = await p.nextLine('ready', 120_000);
      const pid = String(ready.pid);
      const P1 = path.join(p.dir, 'P1');
      const P2 = path.join(p.dir, 'P2');
      await cliJson(['checkpoint', pid, '-o', P1, '--leave-running', '--json'], 300_000);
      const T = (await p.send('touch 10', 'touched')).buffers;
      await cliJson(['checkpoint', pid, '-o', P2, '--parent', P1, '--json'], 300_000);
      for (let i = 0; i < 100 && p.alive(ready.pid); i++) await h.sleep(50);
      if (p.alive(ready.pid)) throw failure('the process still runs after its checkpoint');
      const back = await cliJson(['restore', P2, '--detach', '--json'], 300_000);
      if (back.pid !== ready.pid) throw failure(`restore gave pid ${back.pid}, expected ${ready.pid}`);
      expectSame((await p.send('state', 'state')).buffers, T, 'state after restoring the incremental process image');
      const shown = await cliJson(['inspect', P2, '--json']);
      return `whole-process image --parent: ${shown.data.rawBytes} bytes of pool stored of ${shown.allocations.reduce((n, a) => n + Number(a.size), 0)}; CRIU restore through the chain brought the touched data back bit for bit`;
    } finally {
      p.close();
    }
  });
}
