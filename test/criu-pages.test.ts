/**
 * CRIU's page images packed into zstd frames after a dump and unpacked for
 * a restore (controller/engine/criu-pages.ts): the bytes CRIU reads back
 * are the bytes it wrote, zero pages become holes, damage is refused, and
 * a failed packing leaves CRIU's files as they were.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const engine = (m: string) => import(new URL(`../dist/controller/engine/${m}.js`, import.meta.url).href);
const { packCriuPages, unpackCriuDir, verifyCriuPages, describePacked, PACKED_INDEX } = await engine('criu-pages');
const { CodecPool } = await engine('codec-pool');
const { installFaultInjector } = await import(new URL('../dist/controller/base/faults.js', import.meta.url).href);

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
    const scratch = await unpackCriuDir(dir, { workers: 2 });
    expect(scratch.pages).toMatchObject({ files: 2, rawBytes: s.rawBytes, storedBytes: s.storedBytes });
    for (const [n, b] of Object.entries(files)) expect(readFileSync(join(scratch.dir, n)).equals(b)).toBe(true);
    expect(lstatSync(join(scratch.dir, 'core-1.img')).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(scratch.dir, 'core-1.img'))).toBe(join(dir, 'core-1.img'));
    const big = statSync(join(scratch.dir, 'pages-1.img'));
    expect(big.blocks * 512).toBeLessThan(big.size); // a third of it zero pages, never written
    scratch.cleanup();
    expect(existsSync(scratch.dir)).toBe(false);
    expect(shmScratch()).toEqual(before);

    const codecs = new CodecPool(2);
    try {
      await verifyCriuPages(dir, codecs);
    } finally {
      await codecs.close();
    }
  });

  it('unpack of raw pages (--raw-criu-pages): everything linked as it is', async () => {
    const { dir, files } = criuDir('raw');
    const scratch = await unpackCriuDir(dir, { workers: 1 });
    expect(scratch.pages).toBeUndefined();
    for (const [n, b] of Object.entries(files)) {
      expect(lstatSync(join(scratch.dir, n)).isSymbolicLink()).toBe(true);
      expect(readFileSync(join(scratch.dir, n)).equals(b)).toBe(true);
    }
    scratch.cleanup();
  });

  it("leaves out what CRIU writes at a restore, so that a plain `criu restore` run in the image's directory before cannot make it write there", async () => {
    const { dir } = criuDir('restored-before');
    writeFileSync(join(dir, 'stats-restore'), 'from an earlier restore');
    writeFileSync(join(dir, 'restore.log'), 'from an earlier restore');
    const scratch = await unpackCriuDir(dir, { workers: 1 });
    expect(existsSync(join(scratch.dir, 'stats-restore'))).toBe(false);
    expect(existsSync(join(scratch.dir, 'restore.log'))).toBe(false);
    expect(lstatSync(join(scratch.dir, 'core-1.img')).isSymbolicLink()).toBe(true);
    scratch.cleanup();
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
    await expect(unpackCriuDir(dir, { workers: 2 })).rejects.toMatchObject({ code: 'IMAGE_DATA_CORRUPT', message: expect.stringMatching(/^image data is corrupt: pages-1\.img\.zst frame 1: /) });
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
