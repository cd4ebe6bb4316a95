/**
 * gpuckpt peek and poke on the CPU: the real shim exports the pool's chunks
 * (the fake driver's are memfds, which the mmap route maps), and what peek
 * reads and poke writes is the application's own memory: its checksums say
 * so. The formats, the refusals, and the one line when no route maps.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APPS, json, requireBuilt, Sandbox } from './helpers/e2e.js';
import { decodeElements, encodeElements } from '../controller/base/element-format.js';

const box = new Sandbox();
beforeAll(() => requireBuilt());
afterAll(() => box.cleanup());

describe('element formats', () => {
  it('round-trips every format, little-endian, with 64-bit values exact', () => {
    const cases: [Parameters<typeof encodeElements>[1], string[]][] = [
      ['u8', ['0', '255']],
      ['i8', ['-128', '127']],
      ['u16', ['65535', '1']],
      ['i32', ['-2147483648', '7']],
      ['u64', ['18446744073709551615', '3']],
      ['i64', ['-9223372036854775808', '9']],
      ['f32', ['1.5', '-2']],
      ['f64', ['0.1', '-3.25']],
      ['f16', ['1.5', '-0.25', '65504']],
      ['bf16', ['1.5', '-2']],
    ];
    for (const [f, values] of cases) expect(decodeElements(encodeElements(values, f), f).map(String), f).toEqual(values.map((v) => String(Number(v) === Number(v) && !f.includes('64') ? Number(v) : v)));
    expect([...encodeElements(['de ad', 'BEEF'], 'hex')]).toEqual([0xde, 0xad, 0xbe, 0xef]);
    expect([...encodeElements(['0xde', '0xad'], 'hex')]).toEqual([0xde, 0xad]);
    expect(() => encodeElements([''], 'u32')).toThrow(/empty/);
    // bf16 rounds to nearest: 1 + 2^-8 + 2^-9 lies above the halfway point of 1 and 1 + 2^-7.
    expect(decodeElements(encodeElements([String(1 + 2 ** -8 + 2 ** -9)], 'bf16'), 'bf16')).toEqual([1 + 2 ** -7]);
    expect([...encodeElements(['258'], 'u16')]).toEqual([2, 1]);
    expect(() => encodeElements(['256'], 'u8')).toThrow(/out of range 0..255/);
    expect(() => encodeElements(['abc'], 'hex')).toThrow(/not bytes in hex/);
    expect(() => encodeElements(['x'], 'f32')).toThrow(/not a number/);
  });
});

describe('peek and poke', () => {
  it("read and write the application's memory without entering its CUDA context", async () => {
    const { app, ready } = await box.start(APPS.linked);
    const buf = ready.buffers![1]!;
    const at = `0x${(BigInt(buf.addr) + 4096n).toString(16)}`;
    const peek = (len: string, ...more: string[]) => box.cli(['peek', String(app.pid), at, len, ...more]);
    const before = json<any>(peek('8', '--json').stdout);
    expect(before).toMatchObject({ pid: app.pid, addr: at, length: 8, route: 'mmap', format: 'hex' });
    expect(before.values).toHaveLength(8);

    const poke = box.cli(['poke', String(app.pid), at, 'deadbeef', '01020304', '--json']);
    expect(poke.stderr).toBe('');
    expect(poke.code).toBe(0);
    expect(json<any>(poke.stdout)).toMatchObject({ length: 8, route: 'mmap' });
    expect(json<any>(peek('8', '--json').stdout).values).toEqual([0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4]);
    expect(json<any>(peek('8', '--format', 'u32', '--json').stdout).values).toEqual([0xefbeadde, 0x04030201]);
    // The application's own view changed, and goes back with the bytes.
    const changed = (await app.command('state')).buffers![1]!;
    expect(changed.checksum).not.toBe(buf.checksum);
    const original = before.values.map((b: number) => b.toString(16).padStart(2, '0')).join('');
    expect(box.cli(['poke', String(app.pid), at, original]).code).toBe(0);
    expect((await app.command('state')).buffers).toEqual(ready.buffers);

    const text = peek('32');
    expect(text.code).toBe(0);
    expect(text.stdout.split('\n')[0]).toMatch(new RegExp(`^${at}  ([0-9a-f]{2} ){15}[0-9a-f]{2}$`));
    await app.quit();
  });

  it('refuses in one line what cannot be read or written, and says which routes were tried', async () => {
    const { app, ready } = await box.start(APPS.linked);
    const buf = ready.buffers![0]!;
    const pid = String(app.pid);
    const end = `0x${(BigInt(buf.addr) + BigInt(buf.size) - 4n).toString(16)}`;
    const cases: [string[], RegExp, number, Record<string, string>?][] = [
      [['peek', pid, '0x1000', '16'], /^gpuckpt: process [0-9]+: export the memory at that address failed: 0x1000 \(16 bytes\) is not inside one of its pool's allocations$/, 2],
      [['peek', pid, end, '16'], /is not inside one of its pool's allocations$/, 2],
      [['peek', pid, buf.addr, '0'], /^gpuckpt: LENGTH "0" is out of range/, 2],
      [['peek', pid, buf.addr, '2G'], /^gpuckpt: a length of 2147483648 bytes: from 1 byte to 1\.00 GiB$/, 2],
      [['peek', pid, buf.addr, '6', '--format', 'u32'], /^gpuckpt: 6 bytes are not whole u32 values \(4 bytes each\)$/, 2],
      [['peek', pid, buf.addr, '4', '--format', 'u31'], /^gpuckpt: --format "u31" must be one of hex, /, 2],
      [['peek', pid, 'zz', '4'], /^gpuckpt: "zz" is not an address/, 2],
      [['poke', pid, buf.addr, 'abc'], /^gpuckpt: "abc" is not bytes in hex/, 2],
      [['peek', pid, buf.addr, '4'], /^gpuckpt: no route maps GPU memory into the CPU here: Vulkan: .+; gdrcopy: .+$/, 3, { GPUCKPT_BAR_ROUTES: 'vulkan' }],
      [['peek', pid, buf.addr, '4'], /^gpuckpt: GPUCKPT_BAR_ROUTES="dma" must be routes to try in order/, 2, { GPUCKPT_BAR_ROUTES: 'dma' }],
    ];
    for (const [args, line, code, env] of cases) {
      const r = box.cli(args, env);
      expect(r.stderr.trimEnd(), args.join(' ')).toMatch(line);
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(r.code, args.join(' ')).toBe(code);
    }
    expect((await app.command('state')).buffers).toEqual(ready.buffers);
    await app.quit();
  });
});
