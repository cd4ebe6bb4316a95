// checkpoint --live on a real GPU (part of npm run test:gpu): the shim's
// copies and digest kernel run beside the application's own work, and the
// image is the pool at the pause, exactly.
//   live   static_cudart rewriting GPU_TEST_LIVE_MIBPS (default 1024) MiB/s
//          of its buffers, region after region (`rewrite`), three live
//          checkpoints; after each, the rewriter stopped, the pool mutated
//          and the image restored --into: every region holds one write,
//          whole, and together the state after some number of writes, no
//          more than were made (`rewritten`: whole and prefix).

export async function runLive(h) {
  const { App, test, failure, cliJson, snapPath, measure } = h;
  const mibps = Number(process.env.GPU_TEST_LIVE_MIBPS ?? 1024);

  await test('live', async () => {
    const app = new App('live', 'static_cudart');
    const pid = String((await app.ready()).pid);
    const seen = [];
    for (let i = 0; i < 3; i++) {
      const regions = (await app.send(`rewrite ${mibps}`, 'rewriting')).regions;
      const img = snapPath(`live-${i}`);
      const s = await cliJson(['checkpoint', pid, '--gpu-only', '--live', '-o', img, '--json'], 120_000);
      const stopped = await app.send('rewritten', 'rewritten');
      if (!stopped.whole || !stopped.prefix) throw failure(`the running pool itself fails its check: ${JSON.stringify(stopped)}`);
      await app.send('mutate', 'mutated');
      await cliJson(['restore', img, '--into', pid, '--json'], 120_000);
      const back = await app.send('rewritten', 'rewritten');
      if (!back.whole) throw failure(`checkpoint ${i}: a region of the restored pool mixes two writes (a torn copy got into the image)`);
      if (!back.prefix) throw failure(`checkpoint ${i}: the restored regions are not the state after any number of writes`);
      if (!(back.holds >= regions && back.holds <= stopped.count)) throw failure(`checkpoint ${i}: the image holds write ${back.holds}, outside [${regions}, ${stopped.count}]`);
      seen.push({ rounds: s.live.rounds.length, pauseMs: Math.round(s.pauseSeconds * 1000), pauseBytes: s.live.pauseBytes, writes: stopped.count - regions, held: back.holds - regions });
    }
    measure('live', { mibps, checkpoints: seen });
    return (
      `3 live checkpoints of a pool rewritten at ${mibps} MiB/s: ` +
      seen.map((x) => `${x.rounds} round(s), pause ${x.pauseMs} ms with ${(x.pauseBytes / 2 ** 20).toFixed(1)} MiB copied, image = the pool after write ${x.held} of ${x.writes}`).join('; ') +
      '; each restored whole and consistent'
    );
  });
}
