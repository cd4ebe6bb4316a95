/**
 * What CRIU's images say of a process's memory: its pagemap (which runs of
 * pages its pages-N.img holds, at which addresses) and which of its
 * mappings are private anonymous memory, where a page left out of the
 * pagemap restores as zeros (CRIU maps them fresh, and drops with
 * MADV_DONTNEED what a child does not have of its parent's). A pagemap can
 * be written back with pages left out (criu-zero-pages.ts).
 *
 * pagemap-PID.img (images/pagemap.proto): a pagemap_head (pages_id 1),
 * then pagemap_entry's: vaddr 1, compat_nr_pages 2, in_parent 3, flags 4,
 * nr_pages 5. mm-PID.img (images/mm.proto): one mm_entry whose field 14
 * holds the vma_entry's: start 1, end 2, status 7.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { criuEntries, decodeCriu, protoFields, varintMessagesImage } from './criu-image-file.js';

const PAGEMAP_MAGIC = 0x56084025;
const MM_MAGIC = 0x57492820;
export const PAGE_BYTES = 4096;

/** Pagemap entry flags (criu/include/pagemap.h). */
const PE_PARENT = 1;
const PE_PRESENT = 4;

/** vma_entry status bits (criu/include/image.h) a plain private anonymous mapping may carry: regular, stack, heap, private anonymous, mapped without PROT_WRITE. */
const VMA_AREA_REGULAR = 1 << 0;
const VMA_ANON_PRIVATE = 1 << 9;
const PLAIN_ANON = VMA_AREA_REGULAR | (1 << 1) | (1 << 5) | VMA_ANON_PRIVATE | (1 << 29);

/**
 * Addresses are Numbers: page-aligned values below 2^65 are exact in a
 * double, and BigInt's arithmetic made a restore's plan mostly garbage
 * collection (a 2-rank DDP job's: 0.17 s with BigInts, 0.11 s without,
 * 2x H200).
 */
export interface PagemapEntry {
  vaddr: number;
  pages: number;
  /** PE_* flags, as CRIU reads them (an old image's in_parent made PE_PARENT, no flags PE_PRESENT). */
  flags: number;
  /** Written by a CRIU before nr_pages (field 5) existed: its count is in compat_nr_pages. */
  compat: boolean;
}

export interface ProcessPagemap {
  pid: number;
  /** pagemap-PID.img */
  name: string;
  /** pages-ID.img, which holds the pages of its present entries in order. */
  pagesFile: string;
  pagesId: number;
  entries: PagemapEntry[];
}

/**
 * The pagemap of every process CRIU dumped into dir (its pagemap-PID.img;
 * shared memory's pagemaps are not a process's). Entries are decoded only
 * for the pages files entriesOf takes (all by default): a rank's pagemap
 * has tens of thousands.
 */
export function processPagemaps(dir: string, entriesOf: (pagesFile: string) => boolean = () => true): ProcessPagemap[] {
  return readdirSync(dir)
    .map((name) => /^pagemap-(\d+)\.img$/.exec(name))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => decodeCriu(dir, m[0], () => readPagemap(dir, m[0], Number(m[1]), entriesOf)));
}

/** One process's pagemap (pagemap-PID.img), its entries decoded. */
export function processPagemap(dir: string, name: string, pid: number): ProcessPagemap {
  return decodeCriu(dir, name, () => readPagemap(dir, name, pid, () => true));
}

function readPagemap(dir: string, name: string, pid: number, entriesOf: (pagesFile: string) => boolean): ProcessPagemap {
  const [head, ...rest] = criuEntries(dir, name, PAGEMAP_MAGIC, false);
  if (!head) throw new Error('no pagemap head');
  let pagesId = -1;
  for (const f of protoFields(head)) if (f.field === 1 && f.value !== undefined) pagesId = Number(f.value);
  if (pagesId < 0) throw new Error('pagemap head without pages_id');
  const pagesFile = `pages-${pagesId}.img`;
  const entries = entriesOf(pagesFile) ? rest.map(readPagemapEntry) : [];
  return { pid, name, pagesFile, pagesId, entries };
}

/** One pagemap_entry, its varints read in Number arithmetic (no generator, no BigInt: there are tens of thousands). */
function readPagemapEntry(b: Uint8Array): PagemapEntry {
  let at = 0;
  const varint = (): number => {
    let v = 0;
    for (let scale = 1, i = 0; i < 10; i++, scale *= 0x80) {
      if (at >= b.length) throw new Error('truncated varint');
      const byte = b[at++]!;
      v += (byte & 0x7f) * scale;
      if (!(byte & 0x80)) return v;
    }
    throw new Error('varint too long');
  };
  let vaddr: number | undefined;
  let compatPages = 0;
  let pages: number | undefined;
  let flags: number | undefined;
  let inParent = false;
  while (at < b.length) {
    const key = varint();
    const wire = key % 8;
    const field = Math.floor(key / 8);
    if (wire === 0) {
      const value = varint();
      if (field === 1) vaddr = value;
      else if (field === 2) compatPages = value;
      else if (field === 3) inParent = value !== 0;
      else if (field === 4) flags = value;
      else if (field === 5) pages = value;
    } else if (wire === 1) at += 8;
    else if (wire === 2) at += varint();
    else if (wire === 5) at += 4;
    else throw new Error(`wire type ${wire}`);
    if (at > b.length) throw new Error('truncated field');
  }
  if (vaddr === undefined) throw new Error('pagemap entry without vaddr');
  if (vaddr % PAGE_BYTES || vaddr >= 2 ** 64) throw new Error(`pagemap entry at ${vaddr.toString(16)}, not a page's address`);
  // As CRIU's init_compat_pagemap_entry reads an entry.
  const read = inParent ? (flags ?? 0) | PE_PARENT : (flags ?? PE_PRESENT);
  return { vaddr, pages: pages ?? compatPages, flags: read, compat: pages === undefined };
}

/**
 * True when every entry's pages are in the pages file (none in a parent
 * image): a pagemap whose pages may be left out. CRIU marks the pages of
 * private anonymous memory PE_LAZY as well (a lazy restore may fetch them
 * later), and reads them like the others otherwise.
 */
export function pagesAllInFile(pm: ProcessPagemap): boolean {
  return pm.entries.every((e) => e.flags & PE_PRESENT && !(e.flags & PE_PARENT));
}

/** The private anonymous mappings of pid, [start, end) in address order, from its mm-PID.img; none if there is no such file. */
export function anonPrivateRanges(dir: string, pid: number): [number, number][] {
  const name = `mm-${pid}.img`;
  if (!existsSync(join(dir, name))) return [];
  return decodeCriu(dir, name, () => {
    const out: [number, number][] = [];
    for (const mm of criuEntries(dir, name, MM_MAGIC, false))
      for (const f of protoFields(mm)) {
        if (f.field !== 14 || !f.bytes) continue;
        let start: number | undefined;
        let end: number | undefined;
        let status = 0;
        for (const v of protoFields(f.bytes)) {
          if (v.field === 1 && v.value !== undefined) start = Number(v.value);
          else if (v.field === 2 && v.value !== undefined) end = Number(v.value);
          else if (v.field === 7) status = Number(v.value ?? 0);
        }
        if (start === undefined || end === undefined) throw new Error('vma without start or end');
        if ((status & VMA_ANON_PRIVATE) && (status & VMA_AREA_REGULAR) && !(status & ~PLAIN_ANON)) out.push([start, end]);
      }
    return out.sort((a, b) => a[0] - b[0]);
  });
}

/** pm's file with entries in place of its own (same head, same flags). */
export function pagemapBytes(pm: ProcessPagemap, entries: PagemapEntry[]): Buffer {
  return varintMessagesImage(PAGEMAP_MAGIC, (put, end) => {
    put(1, pm.pagesId);
    end();
    for (const e of entries) {
      put(1, e.vaddr);
      put(2, e.compat ? e.pages : 0);
      put(4, e.flags);
      if (!e.compat) put(5, e.pages);
      end();
    }
  });
}
