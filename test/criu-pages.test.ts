/**
 * CRIU's page images packed into zstd frames after a dump and unpacked for
 * a restore (controller/engine/criu-pages.ts): the bytes CRIU reads back
 * are the bytes it wrote, zero pages become holes, zero pages of private
 * anonymous memory are left out with the pagemaps rewritten (and the
 * memory CRIU rebuilds is the same), damage is refused, and a failed
 * packing leaves CRIU's files as they were.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { appendFileSync, existsSync, fstatSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { imageFile, message } from './fake-criu/criu-image.mjs';
import { hugeTmpfsRefused } from './helpers/huge-tmpfs.js';

const engine = (m: string) => import(new URL(`../dist/controller/engine/${m}.js`, import.meta.url).href);
const { unpackCriuDir, verifyCriuPages, describePacked, PACKED_INDEX } = await engine('criu-pages');
const { packCriuPages, CriuPagesPacker } = await engine('criu-pages-pack');
const { CodecPool, describeSpent } = await engine('codec-pool');
const { zeroDropTasks, planZeroDrop, frameLayout, intersect } = await engine('criu-zero-pages');
/** What a restore from dir leaves out: each file's drop planned in turn (the restore plans them on its codec workers). */
const planZeroDrops = (dir: string, zero: Map<string, number[]>, bytes: Map<string, number>) => zeroDropTasks(dir, zero, bytes).flatMap((t: unknown) => planZeroDrop(dir, t) ?? []);
const { installFaultInjector } = await import(new URL('../dist/controller/base/faults.js', import.meta.url).href);
const { protoFields } = await import(new URL('../dist/controller/adapters/criu-image-file.js', import.meta.url).href);
const { pagemapBytes, processPagemaps } = await import(new URL('../dist/controller/adapters/criu-memory.js', import.meta.url).href);
const { native } = await import(new URL('../dist/native/index.js', import.meta.url).href);

const root = mkdtempSync(join(tmpdir(), 'gpuckpt-criu-pages-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const PAGE = 4096;

/** A CRIU directory: pages-1.img over two 4 MiB frames (a third of its pages zero), pages-2.img of one page, and a file that is not pages. */
function criuDir(name: string): { dir: string; files: Record<string, Buffer> } {
  const dir = join(root, name);
  mkdirSync(dir);
  const big = Buffer.alloc(2100 * PAGE);
  let x = 12345;
  for (let p = 0; p < 2100; p++) {
    if (p % 3 === 0) continue;
    for (let k = 0; k < PAGE; k += 4) {
      x = (x * 1103515245 + 12345) >>> 0;
      big.writeUInt32LE(p % 3 === 1 ? p : x, p * PAGE + k);
    }
  }
  const files = { 'pages-1.img': big, 'pages-2.img': Buffer.alloc(PAGE, 7), 'core-1.img': Buffer.from('core') };
  for (const [n, b] of Object.entries(files)) writeFileSync(join(dir, n), b);
  return { dir, files };
}

/** The fake CRIU's memory images (test/fake-criu/pages-img.mjs): `dump DIR PID...`, `check DIR`. */
function fakeMemory(...args: string[]) {
  return spawnSync(process.execPath, [new URL('./fake-criu/pages-img.mjs', import.meta.url).pathname, ...args], { encoding: 'utf8' });
}

/** A CRIU image file without its last entry (entries: a u32 length and its bytes, after two magics). */
function withoutLastEntry(b: Buffer): Buffer {
  let at = 8;
  let last = at;
  while (at < b.length) {
    last = at;
    at += 4 + b.readUInt32LE(at);
  }
  return b.subarray(0, last);
}

/** The mount options of the mount on path (/proc/self/mountinfo), undefined where none is. */
function mountedAt(path: string): string | undefined {
  const line = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').find((l) => l.split(' ')[4] === path);
  return line?.split(' - ')[1];
}

/** This process's scratch directories in /dev/shm (other test files restore at the same time). */
const shmScratch = () => (existsSync('/dev/shm') ? readdirSync('/dev/shm').filter((n) => n.startsWith(`.criu-restore.gpuckpt-tmp-${process.pid}-`)) : []);

describe('CRIU pages', () => {
  it('pack: frames replace the raw files; unpack: the same bytes, zero pages as holes, other files linked', async () => {
    const { dir, files } = criuDir('round-trip');
    const s = await packCriuPages(dir, { workers: 2 });
    expect(s).toMatchObject({ files: 2, rawBytes: 2101 * PAGE });
    expect(s.storedBytes).toBeLessThan(s.rawBytes);
    expect(readdirSync(dir).sort()).toEqual(['core-1.img', PACKED_INDEX, 'pages-1.img.zst', 'pages-2.img.zst']);
    expect(describePacked(dir)).toEqual({ files: 2, rawBytes: s.rawBytes, storedBytes: s.storedBytes });

    const before = shmScratch();
    process.env.GPUCKPT_HUGE_SCRATCH = '0'; // pages of 4 KiB, where the holes show
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 }).finally(() => delete process.env.GPUCKPT_HUGE_SCRATCH);
    expect(scratch.huge).toBe(false);
    expect(scratch.pages).toMatchObject({ files: 2, rawBytes: s.rawBytes, storedBytes: s.storedBytes });
    for (const [n, b] of Object.entries(files)) expect(readFileSync(join(scratch.dir, n)).equals(b)).toBe(true);
    expect(lstatSync(join(scratch.dir, 'core-1.img')).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(scratch.dir, 'core-1.img'))).toBe(join(dir, 'core-1.img'));
    const big = statSync(join(scratch.dir, 'pages-1.img'));
    expect(big.blocks * 512).toBeLessThan(big.size); // a third of it zero pages, never written
    await scratch.cleanup();
    expect(existsSync(scratch.dir)).toBe(false);
    expect(shmScratch()).toEqual(before);

    const codecs = new CodecPool(2);
    try {
      await verifyCriuPages(dir, codecs);
    } finally {
      await codecs.close();
    }
  });

  it("the scratch is a tmpfs of its own with huge pages where this process may mount one, unmounted at cleanup, and so is a dead restore's; GPUCKPT_HUGE_SCRATCH=0: plain /dev/shm", async () => {
    const { dir, files } = criuDir('huge');
    await packCriuPages(dir, { workers: 2 });
    const mayMount = !hugeTmpfsRefused(); // else the plain directory
    // A dead restore's scratch, still mounted where mounts are allowed.
    const dead = spawnSync('true').pid!;
    const stale = join('/dev/shm', `.criu-restore.gpuckpt-tmp-${dead}-0123456789abcdef`);
    mkdirSync(stale);
    if (mayMount) native().mountHugeTmpfs(stale, 4 << 20);
    writeFileSync(join(stale, 'pages-1.img'), 'left by a restore that died');

    const scratch = await unpackCriuDir(dir, { workers: 2 }); // the default
    expect(existsSync(stale)).toBe(false);
    expect(mountedAt(stale)).toBeUndefined();
    expect(scratch.huge).toBe(mayMount);
    if (mayMount) expect(mountedAt(scratch.dir)).toMatch(/huge=always/);
    for (const [n, b] of Object.entries(files)) expect(readFileSync(join(scratch.dir, n)).equals(b)).toBe(true);
    await scratch.cleanup();
    expect(existsSync(scratch.dir)).toBe(false);
    expect(mountedAt(scratch.dir)).toBeUndefined();

    process.env.GPUCKPT_HUGE_SCRATCH = '0';
    const plain = await unpackCriuDir(dir, { workers: 2 }).finally(() => delete process.env.GPUCKPT_HUGE_SCRATCH);
    expect(plain.huge).toBe(false);
    expect(plain.dir.startsWith('/dev/shm/')).toBe(true);
    expect(mountedAt(plain.dir)).toBeUndefined();
    await plain.cleanup();
  });

  it("each unpacked frame answers with its worker's time, which the trace sums by phase and by worker", async () => {
    const { dir } = criuDir('spent');
    await packCriuPages(dir, { workers: 2 });
    const index = JSON.parse(readFileSync(join(dir, PACKED_INDEX), 'utf8'));
    const big = index.files.find((f: { name: string }) => f.name === 'pages-1.img');
    const out = join(root, 'spent-out');
    writeFileSync(out, Buffer.alloc(big.rawBytes));
    const codecs = new CodecPool(2);
    try {
      const spent = await codecs.decompressToFile(join(dir, 'pages-1.img.zst'), 0, big.frames[0], out, 0, index.frameBytes, 'frame 0');
      expect(spent).toEqual({ thread: expect.any(Number), steps: { read: expect.any(Number), 'decompress and check': expect.any(Number), write: expect.any(Number) } });
      expect(spent.thread).toBeGreaterThan(0); // a worker's, not the main thread's
    } finally {
      await codecs.close();
    }
    const line = describeSpent(
      [
        { thread: 1, steps: { read: 100, 'decompress and check': 200, write: 300 } },
        { thread: 2, steps: { read: 10, 'decompress and check': 20, write: 30 } },
        { thread: 1, steps: { read: 1, 'decompress and check': 2, write: 3 } },
      ],
      900,
    );
    expect(line).toBe('3 frames on 2 workers in 0.900 s: read 0.111 s, decompress and check 0.222 s, write 0.333 s in all; each worker busy 0.060-0.606 s');
  });

  it("zero pages of private anonymous memory are left out, the pagemaps rewritten; the memory CRIU rebuilds is the one dumped", async () => {
    const dir = join(root, 'memory');
    mkdirSync(dir);
    fakeMemory('dump', dir, '101', '102');
    const raw = statSync(join(dir, 'pages-1.img')).size + statSync(join(dir, 'pages-2.img')).size;
    const s = await packCriuPages(dir, { workers: 2 });
    const index = JSON.parse(readFileSync(join(dir, PACKED_INDEX), 'utf8'));
    expect(index.files.find((f: { name: string }) => f.name === 'pages-1.img').zeroPages.slice(0, 4)).toEqual([0, 1, 3, 1]); // every third page
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 });
    const left = scratch.pages.leftOutBytes;
    // Zero pages in the file mapping stay: not all zero pages are left out.
    const zeroBytes = index.files.reduce((n: number, f: { zeroPages: number[] }) => n + f.zeroPages.filter((_, i) => i % 2).reduce((a, b) => a + b, 0) * PAGE, 0);
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThan(zeroBytes);
    // The first process's heap, all zero, fills its file's second frame: nothing of that frame is kept.
    expect(statSync(join(scratch.dir, 'pages-1.img')).size).toBeLessThan(1024 * PAGE);
    expect(statSync(join(scratch.dir, 'pages-1.img')).size + statSync(join(scratch.dir, 'pages-2.img')).size).toBe(raw - left);
    expect(lstatSync(join(scratch.dir, 'pagemap-101.img')).isSymbolicLink()).toBe(false);
    expect(lstatSync(join(scratch.dir, 'mm-101.img')).isSymbolicLink()).toBe(true);
    expect(fakeMemory('check', scratch.dir).status).toBe(0);
    // The check can fail: a pagemap without its last run names fewer pages than its file holds.
    const pagemap = join(scratch.dir, 'pagemap-101.img');
    writeFileSync(pagemap, withoutLastEntry(readFileSync(pagemap)));
    expect(fakeMemory('check', scratch.dir)).toMatchObject({ status: 1, stdout: expect.stringMatching(/Error .*fake-criu: pages-1\.img holds \d+ bytes, its pagemap \d+/) });
    await scratch.cleanup();
    expect(s.rawBytes).toBe(raw);
  });

  it('fewer zero pages than a plan is worth (64 MiB) are unpacked as they are, every pagemap linked as CRIU wrote it', async () => {
    const dir = join(root, 'memory-few-zeros');
    mkdirSync(dir);
    fakeMemory('dump', dir, '401');
    const raw = statSync(join(dir, 'pages-1.img')).size;
    await packCriuPages(dir, { workers: 2 });
    expect(JSON.parse(readFileSync(join(dir, PACKED_INDEX), 'utf8')).files[0].zeroPages.length).toBeGreaterThan(0);
    const scratch = await unpackCriuDir(dir, { workers: 2 });
    expect(scratch.pages.leftOutBytes).toBeUndefined();
    expect(statSync(join(scratch.dir, 'pages-1.img')).size).toBe(raw);
    expect(lstatSync(join(scratch.dir, 'pagemap-401.img')).isSymbolicLink()).toBe(true);
    expect(fakeMemory('check', scratch.dir).status).toBe(0);
    await scratch.cleanup();
  });

  it("counts zero pages by file: a process's file below the plan's worth is unpacked as it is, beside one above it left out", async () => {
    const dir = join(root, 'memory-by-file');
    mkdirSync(dir);
    fakeMemory('dump', dir, '501', '502');
    await packCriuPages(dir, { workers: 2 });
    const index = JSON.parse(readFileSync(join(dir, PACKED_INDEX), 'utf8'));
    const zeroBytes = (name: string) => index.files.find((f: { name: string }) => f.name === name).zeroPages.filter((_: number, i: number) => i % 2).reduce((a: number, b: number) => a + b, 0) * PAGE;
    const [more, fewer] = ['pages-1.img', 'pages-2.img'].sort((a, b) => zeroBytes(b) - zeroBytes(a));
    expect(zeroBytes(fewer!)).toBeGreaterThan(0);
    expect(zeroBytes(more!)).toBeGreaterThan(zeroBytes(fewer!));
    // Above the fewer file's zero pages, below the other's, and below both together.
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: zeroBytes(fewer!) + PAGE });
    const pagemapOf = (file: string) => processPagemaps(dir).find((pm: { pagesFile: string }) => pm.pagesFile === file).name;
    expect(lstatSync(join(scratch.dir, pagemapOf(more!))).isSymbolicLink()).toBe(false);
    expect(lstatSync(join(scratch.dir, pagemapOf(fewer!))).isSymbolicLink()).toBe(true);
    expect(statSync(join(scratch.dir, fewer!)).size).toBe(index.files.find((f: { name: string }) => f.name === fewer).rawBytes);
    expect(scratch.pages.leftOutBytes).toBeGreaterThan(0);
    expect(fakeMemory('check', scratch.dir).status).toBe(0);
    await scratch.cleanup();
  });

  it('decodes the entries of the pagemaps it is asked for only', () => {
    const dir = join(root, 'memory-heads');
    mkdirSync(dir);
    fakeMemory('dump', dir, '601', '602');
    const all = processPagemaps(dir);
    const some = processPagemaps(dir, (file: string) => file === 'pages-1.img');
    expect(some.map((pm: { name: string; pagesFile: string }) => [pm.name, pm.pagesFile])).toEqual(all.map((pm: { name: string; pagesFile: string }) => [pm.name, pm.pagesFile]));
    for (const pm of some) expect(pm.entries).toEqual(pm.pagesFile === 'pages-1.img' ? all.find((a: { name: string }) => a.name === pm.name).entries : []);
    expect(all.every((pm: { entries: unknown[] }) => pm.entries.length > 0)).toBe(true);
  });

  it("a page the index calls zero that is not is refused as damage; a pagemap with a parent image's pages is left as it is", async () => {
    const dir = join(root, 'memory-damaged');
    mkdirSync(dir);
    fakeMemory('dump', dir, '201');
    await packCriuPages(dir, { workers: 2 });
    const indexPath = join(dir, PACKED_INDEX);
    const index = JSON.parse(readFileSync(indexPath, 'utf8'));
    index.files[0].zeroPages.splice(0, 2, 0, 2); // page 1 holds data
    writeFileSync(indexPath, JSON.stringify(index));
    const falseZero = { code: 'IMAGE_DATA_CORRUPT', message: expect.stringMatching(/^image data is corrupt: pages-1\.img\.zst frame 0: the page at byte 4096 is not zero, as its index says$/) };
    await expect(unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 })).rejects.toMatchObject(falseZero);
    const codecs = new CodecPool(2);
    try {
      await expect(verifyCriuPages(dir, codecs)).rejects.toMatchObject(falseZero); // inspect says so too
    } finally {
      await codecs.close();
    }

    const other = join(root, 'memory-parent');
    mkdirSync(other);
    fakeMemory('dump', other, '301');
    const pagemap = join(other, 'pagemap-301.img');
    const b = readFileSync(pagemap);
    // The file mapping's entry (flags, field 4: PE_PRESENT) made PE_PARENT: pages in a parent image, not in this one's file.
    const at = b.indexOf(Buffer.from([0x20, 0x04]), 12);
    b[at + 1] = 0x01;
    writeFileSync(pagemap, b);
    await packCriuPages(other, { workers: 2 });
    const scratch = await unpackCriuDir(other, { workers: 2, leaveOutZerosFrom: 0 });
    expect(scratch.pages.leftOutBytes).toBeUndefined();
    expect(lstatSync(join(scratch.dir, 'pagemap-301.img')).isSymbolicLink()).toBe(true);
    await scratch.cleanup();
  });

  it('the pages left out: runs across pagemap entries and frames, only in private anonymous mappings', () => {
    const dir = join(root, 'plan');
    mkdirSync(dir);
    fakeMemory('dump', dir, '401');
    // Process 1's file (pages-img.mjs): anonymous pages 0-255 and 256-512 (two entries), the file mapping 513-768, the heap 769-1026.
    const [drop] = planZeroDrops(dir, new Map([['pages-1.img', [0, 1027]]]), new Map([['pages-1.img', 1027 * PAGE]]));
    expect(drop).toMatchObject({ file: 'pages-1.img', dropped: [0, 513, 769, 258] });
    expect(drop.pagemap.name).toBe('pagemap-401.img');
    const from = { at: 0, before: 0 };
    expect(frameLayout(drop.dropped, 0, 1024, from)).toEqual({ keep: [513 * PAGE, 769 * PAGE], dstPage: 0 });
    expect(frameLayout(drop.dropped, 1024, 3, from)).toEqual({ keep: [], dstPage: 256 });
    // A frame inside a run, and one starting where a run ends.
    expect(frameLayout([10, 30], 16, 8, { at: 0, before: 0 })).toEqual({ keep: [], dstPage: 10 });
    expect(frameLayout([10, 30, 50, 2], 40, 16, { at: 0, before: 0 })).toEqual({ keep: [0, 10 * PAGE, 12 * PAGE, 16 * PAGE], dstPage: 10 });
    expect(intersect([0, 10, 20, 5], [5, 20])).toEqual([5, 5, 20, 5]);
    // A size the pagemap does not account for: nothing left out.
    expect(planZeroDrops(dir, new Map([['pages-1.img', [0, 1027]]]), new Map([['pages-1.img', 1028 * PAGE]]))).toEqual([]);
  });

  it('the pages left out when entries span mappings, or come out of address order', () => {
    const dir = join(root, 'plan-order');
    mkdirSync(dir);
    const A = 0x7f0000000000n;
    const at = (page: number) => A + BigInt(page * PAGE);
    // Private anonymous mappings: pages 0-9 and 20-29 (between them: not anonymous).
    const vmas = [[at(0), at(10)], [at(20), at(30)]].map(([s, e]) => message([[1, s], [2, e], [7, 1 | (1 << 9)]]));
    const mm = message(vmas.map((v) => [14, v]));
    writeFileSync(join(dir, 'mm-7.img'), imageFile(0x57492820, [mm]));
    // In file order: 5 pages at 20 (anonymous), then 25 pages at 0 (0-9 anonymous, 10-19 not, 20-24 anonymous).
    const entry = (page: number, n: number) => message([[1, at(page)], [2, 0], [4, 4 | 2], [5, n]]);
    writeFileSync(join(dir, 'pagemap-7.img'), imageFile(0x56084025, [message([[1, 3]]), entry(20, 5), entry(0, 25)]));
    const [drop] = planZeroDrops(dir, new Map([['pages-3.img', [0, 30]]]), new Map([['pages-3.img', 30 * PAGE]]));
    // File pages 0-4 (addresses 20-24), 5-14 (0-9) and 25-29 (20-24): anonymous; 15-24 (10-19): not.
    expect(drop.dropped).toEqual([0, 15, 25, 5]);
    expect(drop.pagemap.name).toBe('pagemap-7.img');
  });

  it('varints: Numbers where exact, BigInts beyond 2^53, up to 64 bits, read back as written; pagemaps written back as read', () => {
    const values = [0n, 1n, 127n, 128n, 300n, 0x7fff12345000n, BigInt(Number.MAX_SAFE_INTEGER), BigInt(Number.MAX_SAFE_INTEGER) + 1n, 2n ** 64n - 1n];
    const fields = [...protoFields(message(values.map((v, i) => [i + 1, v])))];
    expect(fields.map((f) => BigInt(f.value))).toEqual(values);
    expect(fields.map((f) => typeof f.value)).toEqual([...Array(7).fill('number'), 'bigint', 'bigint']);
    expect([...protoFields(message([[1, 5], [2, undefined], [3, 2 ** 40]]))]).toEqual([{ field: 1, value: 5 }, { field: 3, value: 2 ** 40 }]);

    // A pagemap read and written back is the same file, whatever its entries' form.
    const dir = join(root, 'pagemap-round-trip');
    mkdirSync(dir);
    const entries = [
      message([[1, 3]]),
      message([[1, 0x7fff12345000n], [2, 0], [4, 4 | 2], [5, 300]]),
      message([[1, 0x10000n], [2, 7], [4, 4]]), // an old CRIU's: compat_nr_pages only
      message([[1, 2n ** 56n + 3n * 4096n], [2, 0], [4, 4], [5, 1]]), // 5-level paging's addresses, above 2^53
    ];
    const bytes = imageFile(0x56084025, entries);
    writeFileSync(join(dir, 'pagemap-9.img'), bytes);
    const [pm] = processPagemaps(dir);
    expect(pm.entries.map((e: any) => [e.vaddr, e.pages, e.compat])).toEqual([[0x7fff12345000, 300, false], [0x10000, 7, true], [2 ** 56 + 3 * 4096, 1, false]]);
    expect(Buffer.from(pagemapBytes(pm, pm.entries)).equals(bytes)).toBe(true);
    // An entry at no page's address is damage, not something to round.
    writeFileSync(join(dir, 'pagemap-9.img'), imageFile(0x56084025, [entries[0], message([[1, 0x10001n], [2, 0], [4, 4], [5, 1]])]));
    expect(() => processPagemaps(dir)).toThrow(/pagemap-9\.img: pagemap entry at 10001, not a page's address/);
  });

  it('packing follows CRIU as it writes: whole frames are packed before CRIU is done, the rest after', async () => {
    const dir = join(root, 'follow');
    mkdirSync(dir);
    const { files } = criuDir('follow-source');
    const big = files['pages-1.img'];
    const packer = new CriuPagesPacker(dir, { workers: 2 }).follow();
    // CRIU appends: the first frame and a bit, then (later) the rest and a second file.
    writeFileSync(join(dir, 'pages-1.img'), big.subarray(0, 4 * 1024 * 1024 + 3 * PAGE));
    const packed = join(dir, 'pages-1.img.zst');
    for (let i = 0; i < 100 && !(existsSync(packed) && statSync(packed).size > 0); i++) await new Promise((r) => setTimeout(r, 20));
    expect(statSync(packed).size).toBeGreaterThan(0); // frame 0, packed while CRIU writes on
    appendFileSync(join(dir, 'pages-1.img'), big.subarray(4 * 1024 * 1024 + 3 * PAGE));
    writeFileSync(join(dir, 'pages-2.img'), files['pages-2.img']);
    const s = await packer.finish();
    expect(s).toMatchObject({ files: 2, rawBytes: big.length + PAGE });
    expect(readdirSync(dir).sort()).toEqual([PACKED_INDEX, 'pages-1.img.zst', 'pages-2.img.zst']);
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 });
    expect(readFileSync(join(scratch.dir, 'pages-1.img')).equals(big)).toBe(true);
    expect(readFileSync(join(scratch.dir, 'pages-2.img')).equals(files['pages-2.img'])).toBe(true);
    await scratch.cleanup();
  });

  it("the packed files' writeback is started as they grow, and finish waits for the last one before closing them", async () => {
    const dir = join(root, 'writeback');
    mkdirSync(dir);
    const raw = randomBytes(40 << 20); // incompressible: 40 MiB packed, past two 16 MiB steps
    const calls: { fd: number; packedBytes: number }[] = [];
    let open = 0;
    const startWriteback = async (fd: number) => {
      calls.push({ fd, packedBytes: fstatSync(fd).size });
      open++;
      await new Promise((r) => setTimeout(r, 50));
      fstatSync(fd); // still open: finish has waited
      open--;
    };
    const packer = new CriuPagesPacker(dir, { workers: 2, startWriteback }).follow();
    writeFileSync(join(dir, 'pages-1.img'), raw);
    await packer.finish();
    expect(open).toBe(0);
    expect(calls.length).toBeGreaterThanOrEqual(1);
    expect(calls[0].packedBytes).toBeGreaterThanOrEqual(16 << 20);
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 });
    expect(readFileSync(join(scratch.dir, 'pages-1.img')).equals(raw)).toBe(true);
    await scratch.cleanup();
  });

  it('a packer grown while CRIU writes (the pool images done) sends frames to its new workers too, and writes every file in order', async () => {
    const dir = join(root, 'grown');
    mkdirSync(dir);
    const raw = randomBytes(48 << 20); // 12 incompressible frames
    const pools = new Set<unknown>();
    const compressFile = CodecPool.prototype.compressFile;
    CodecPool.prototype.compressFile = function (this: unknown, ...args: unknown[]) {
      pools.add(this);
      return compressFile.apply(this, args as any);
    };
    try {
      const packer = new CriuPagesPacker(dir, { workers: 1 }).follow();
      writeFileSync(join(dir, 'pages-1.img'), raw.subarray(0, 16 << 20));
      packer.grow(3);
      packer.grow(2); // never shrinks
      appendFileSync(join(dir, 'pages-1.img'), raw.subarray(16 << 20));
      const s = await packer.finish();
      expect(s).toMatchObject({ files: 1, rawBytes: raw.length });
      packer.grow(4); // closed: nothing started
    } finally {
      CodecPool.prototype.compressFile = compressFile;
    }
    expect(pools.size).toBe(2);
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 });
    expect(readFileSync(join(scratch.dir, 'pages-1.img')).equals(raw)).toBe(true);
    await scratch.cleanup();
  });

  it('a refused writeback costs nothing but the final sync: the pages are packed as without it', async () => {
    const dir = join(root, 'writeback-refused');
    mkdirSync(dir);
    const raw = randomBytes(40 << 20);
    let calls = 0;
    const startWriteback = async () => {
      calls++;
      throw Object.assign(new Error('ESPIPE: sync_file_range'), { code: 'ESPIPE' });
    };
    const packer = new CriuPagesPacker(dir, { workers: 2, startWriteback }).follow();
    writeFileSync(join(dir, 'pages-1.img'), raw);
    await packer.finish();
    expect(calls).toBe(1); // not asked again once refused
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 });
    expect(readFileSync(join(scratch.dir, 'pages-1.img')).equals(raw)).toBe(true);
    await scratch.cleanup();
  });

  it('a packing given up (the dump failed) leaves CRIU\'s files and nothing of its own', async () => {
    const { dir, files } = criuDir('abandoned');
    const packer = new CriuPagesPacker(dir, { workers: 2 }).follow();
    await new Promise((r) => setTimeout(r, 100));
    await packer.abandon();
    expect(readdirSync(dir).sort()).toEqual(Object.keys(files).sort());
    for (const [n, b] of Object.entries(files)) expect(readFileSync(join(dir, n)).equals(b)).toBe(true);
  });

  it('unpack of raw pages (--raw-criu-pages): everything linked as it is', async () => {
    const { dir, files } = criuDir('raw');
    const scratch = await unpackCriuDir(dir, { workers: 1, leaveOutZerosFrom: 0 });
    expect(scratch.pages).toBeUndefined();
    for (const [n, b] of Object.entries(files)) {
      expect(lstatSync(join(scratch.dir, n)).isSymbolicLink()).toBe(true);
      expect(readFileSync(join(scratch.dir, n)).equals(b)).toBe(true);
    }
    await scratch.cleanup();
  });

  it("leaves out what CRIU writes at a restore, so that a plain `criu restore` run in the image's directory before cannot make it write there", async () => {
    const { dir } = criuDir('restored-before');
    writeFileSync(join(dir, 'stats-restore'), 'from an earlier restore');
    writeFileSync(join(dir, 'restore.log'), 'from an earlier restore');
    const scratch = await unpackCriuDir(dir, { workers: 1, leaveOutZerosFrom: 0 });
    expect(existsSync(join(scratch.dir, 'stats-restore'))).toBe(false);
    expect(existsSync(join(scratch.dir, 'restore.log'))).toBe(false);
    expect(lstatSync(join(scratch.dir, 'core-1.img')).isSymbolicLink()).toBe(true);
    await scratch.cleanup();
  });

  it('a damaged frame is refused by unpack and verify, naming it; no scratch is left', async () => {
    const { dir } = criuDir('damaged');
    await packCriuPages(dir, { workers: 2 });
    const path = join(dir, 'pages-1.img.zst');
    const bytes = readFileSync(path);
    const index = JSON.parse(readFileSync(join(dir, PACKED_INDEX), 'utf8'));
    const second = index.files.find((f: { name: string }) => f.name === 'pages-1.img').frames[0];
    bytes[second + 100] ^= 0xff; // inside frame 1
    writeFileSync(path, bytes);
    const before = shmScratch();
    await expect(unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 })).rejects.toMatchObject({ code: 'IMAGE_DATA_CORRUPT', message: expect.stringMatching(/^image data is corrupt: pages-1\.img\.zst frame 1: /) });
    expect(shmScratch()).toEqual(before);
    const codecs = new CodecPool(2);
    try {
      await expect(verifyCriuPages(dir, codecs)).rejects.toMatchObject({ code: 'IMAGE_DATA_CORRUPT' });
    } finally {
      await codecs.close();
    }
  });

  it('an unpacking given up (the restore refused meanwhile) stops and leaves no scratch', async () => {
    const { dir } = criuDir('given-up');
    await packCriuPages(dir, { workers: 2 });
    const before = shmScratch();
    const stop = new AbortController();
    const unpacking = unpackCriuDir(dir, { workers: 1, signal: stop.signal });
    stop.abort();
    await expect(unpacking).rejects.toThrow(/unpacking given up/);
    expect(shmScratch()).toEqual(before);
  });

  it('a truncated file and a bad index are refused before anything is unpacked', async () => {
    const { dir } = criuDir('truncated');
    await packCriuPages(dir, { workers: 2 });
    const path = join(dir, 'pages-1.img.zst');
    truncateSync(path, statSync(path).size - 1);
    await expect(unpackCriuDir(dir)).rejects.toMatchObject({ code: 'IMAGE_TRUNCATED', message: expect.stringContaining('pages-1.img.zst holds') });
    writeFileSync(join(dir, PACKED_INDEX), '{"format": "something else"}');
    await expect(unpackCriuDir(dir)).rejects.toMatchObject({ code: 'IMAGE_DATA_CORRUPT', message: expect.stringMatching(/format "something else"/) });
    expect(() => describePacked(dir)).toThrow(/format/);
  });

  it('a raw file that cannot be removed once packed stays beside its packed form, named; the restore takes the packed one', async () => {
    const { dir, files } = criuDir('unlink-fails');
    installFaultInjector({ failStep: (step: string) => (step === 'criu-pages-unlink' ? 'test' : undefined), failDriverCall: () => false });
    const packer = new CriuPagesPacker(dir, { workers: 2 });
    try {
      expect(await packer.finish()).toMatchObject({ files: 2 });
    } finally {
      installFaultInjector({ failStep: () => undefined, failDriverCall: () => false });
    }
    expect(packer.rawLeft.sort()).toEqual([
      "pages-1.img (injected fault at criu-pages-unlink (test))",
      "pages-2.img (injected fault at criu-pages-unlink (test))",
    ]);
    expect(readdirSync(dir).sort()).toEqual([PACKED_INDEX, ...Object.keys(files), 'pages-1.img.zst', 'pages-2.img.zst'].sort());
    // Damage in the raw file is not what the restore reads: the packed frames are.
    writeFileSync(join(dir, 'pages-1.img'), Buffer.alloc(PAGE, 1));
    const scratch = await unpackCriuDir(dir, { workers: 2, leaveOutZerosFrom: 0 });
    try {
      expect(readFileSync(join(scratch.dir, 'pages-1.img')).equals(files['pages-1.img'])).toBe(true);
      expect(readFileSync(join(scratch.dir, 'pages-2.img')).equals(files['pages-2.img'])).toBe(true);
      expect(readlinkSync(join(scratch.dir, 'core-1.img'))).toBe(join(dir, 'core-1.img'));
    } finally {
      await scratch.cleanup();
    }
  });

  it('a packing that fails leaves CRIU\'s files as they were', async () => {
    const { dir, files } = criuDir('pack-fails');
    installFaultInjector({ failStep: (step: string) => (step === 'compress' ? 'test' : undefined), failDriverCall: () => false });
    try {
      await expect(packCriuPages(dir, { workers: 2 })).rejects.toMatchObject({ code: 'IMAGE_WRITE_FAILED', message: expect.stringMatching(/^cannot compress CRIU's pages: /) });
    } finally {
      installFaultInjector({ failStep: () => undefined, failDriverCall: () => false });
    }
    expect(readdirSync(dir).sort()).toEqual(Object.keys(files).sort());
    for (const [n, b] of Object.entries(files)) expect(readFileSync(join(dir, n)).equals(b)).toBe(true);
  });
});
