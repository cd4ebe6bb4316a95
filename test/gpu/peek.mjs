// peek and poke on a real GPU (part of npm run test:gpu): static_cudart's
// buffers read through a CPU mapping of the GPU's memory (the BAR, through
// Vulkan: carry the distribution's libvulkan1 and glvnd libraries, see
// test/gpu/README.md), a poke seen by the program's own checksums and undone
// byte for byte, a read outside the pool refused; then peek's read time
// for 4 KiB to 16 MiB beside the DMA the pool's checkpoint copy uses.
// Skipped, with the routes' answers, where no route maps GPU memory.

export async function runPeek(h) {
  const { App, test, Skip, failure, cliJson, runCli, expectSame, measure } = h;

  await test('peek', async () => {
    const app = new App('peek', 'static_cudart');
    const R = (await app.ready()).buffers;
    const pid = String(app.pid);
    const buf = R.reduce((a, b) => (b.size > a.size ? b : a));
    const at = `0x${(BigInt(buf.addr) + 4096n).toString(16)}`;
    const probe = await runCli(['peek', pid, at, '8', '--json'], 60_000);
    if (probe.code === 3 && /no route maps GPU memory/.test(probe.stderr)) throw new Skip(probe.stderr.trim().replace(/^gpuckpt: /, ''));
    const before = await cliJson(['peek', pid, at, '8', '--json']);
    await cliJson(['poke', pid, at, 'deadbeef', '01020304', '--json']);
    const after = await cliJson(['peek', pid, at, '8', '--json']);
    if (after.values.join() !== [0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4].join()) throw failure(`peek after a poke of deadbeef01020304 read ${after.values}`);
    const changed = (await app.send('state', 'state')).buffers.find((b) => b.addr === buf.addr);
    if (changed.checksum === buf.checksum) throw failure("the program's checksum did not change after the poke");
    await cliJson(['poke', pid, at, before.values.map((b) => b.toString(16).padStart(2, '0')).join(''), '--json']);
    expectSame((await app.send('state', 'state')).buffers, R, 'state after poking the bytes back');
    const outside = await runCli(['peek', pid, '0x1000', '16'], 60_000);
    if (outside.code !== 2 || !/is not inside one of its pool's allocations/.test(outside.stderr)) throw failure(`a peek outside the pool: exit ${outside.code}: ${outside.stderr.trim()}`);
    const times = {};
    for (const size of [4096, 65536, 1 << 20, 16 << 20].filter((s) => s <= buf.size - 4096)) {
      const r = await cliJson(['peek', pid, at, String(size), '--json'], 120_000);
      times[`read_${size}_us`] = Math.round(r.readSeconds * 1e6);
    }
    await app.quit();
    measure('peek', { route: after.route, ...times });
    return `route ${after.route}: 8 bytes read, a poke seen by the program and undone bit for bit, a read outside the pool refused; ${Object.entries(times).map(([k, v]) => `${k}=${v}`).join(' ')}`;
  });
}
