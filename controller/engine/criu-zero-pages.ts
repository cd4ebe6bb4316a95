/**
 * The zero pages a restore leaves out of CRIU's pages files: pages that
 * packing found all zero (criu-pages.ts) in a process's private anonymous
 * memory, which CRIU then leaves untouched, reading as zeros, instead of
 * copying zeros into it. On a PyTorch job that is half of CRIU's pages, and
 * the copy of them was half of `criu restore` (docs/ARCHITECTURE.md).
 *
 * Page runs are flat arrays [first, count, first, count, ...] of pages of
 * one file, ascending and apart.
 */
import { anonPrivateRanges, pagesAllInFile, pagemapBytes, PAGE_BYTES, processPagemap, processPagemaps, type PagemapEntry, type ProcessPagemap } from '../adapters/criu-memory.js';

export type PageRuns = number[];

export interface ZeroDrop {
  /** pages-N.img */
  file: string;
  /** Its pages left out. */
  dropped: PageRuns;
  /** The pagemap that leaves them out, in place of CRIU's. */
  pagemap: { name: string; bytes: Buffer };
}

const P = PAGE_BYTES;

/** One pages file's drop to plan on its own (planZeroDrop): the one pagemap that uses it, and what the index says of it. */
export interface DropTask {
  /** pagemap-PID.img */
  pagemap: string;
  pid: number;
  /** Its zero pages. */
  zero: PageRuns;
  /** Its size. */
  bytes: number;
}

/**
 * The drops to plan, given the zero pages of each pages file and its size:
 * one for each such file that one pagemap alone uses (two pagemaps on a
 * file: nothing left out). Only the pagemaps' heads are decoded here;
 * the tasks run apart, each on a codec worker (a rank's pagemap has tens
 * of thousands of entries to decode).
 */
export function zeroDropTasks(dir: string, zeroPages: Map<string, PageRuns>, fileBytes: Map<string, number>): DropTask[] {
  const heads = processPagemaps(dir, () => false);
  const users = new Map<string, number>();
  for (const pm of heads) users.set(pm.pagesFile, (users.get(pm.pagesFile) ?? 0) + 1);
  return heads.flatMap((pm) => {
    const zero = zeroPages.get(pm.pagesFile);
    const bytes = fileBytes.get(pm.pagesFile);
    return zero?.length && bytes !== undefined && users.get(pm.pagesFile) === 1 ? [{ pagemap: pm.name, pid: pm.pid, zero, bytes }] : [];
  });
}

/**
 * What a restore from dir leaves out of one pages file: nothing (undefined)
 * where its pagemap is not plain (pages in a parent image) or does not
 * account for the file exactly.
 */
export function planZeroDrop(dir: string, task: DropTask): ZeroDrop | undefined {
  const pm = processPagemap(dir, task.pagemap, task.pid);
  if (!pagesAllInFile(pm) || pm.entries.reduce((n, e) => n + e.pages, 0) * PAGE_BYTES !== task.bytes) return undefined;
  const { kept, dropped } = leaveOut(pm, anonPageRuns(pm, anonPrivateRanges(dir, pm.pid)), task.zero);
  return dropped.length ? { file: pm.pagesFile, dropped, pagemap: { name: pm.name, bytes: pagemapBytes(pm, kept) } } : undefined;
}

/**
 * The pages of pm's file (in file order) whose addresses lie in the ranges
 * (sorted, apart), as runs. Entries come in address order, so one sweep
 * does, not every entry against every mapping (thousands of each on a
 * PyTorch rank).
 */
function anonPageRuns(pm: ProcessPagemap, ranges: [number, number][]): PageRuns {
  const runs: PageRuns = [];
  let p = 0;
  let from = 0;
  let last = -1;
  for (const e of pm.entries) {
    const end = e.vaddr + e.pages * P;
    if (e.vaddr < last) from = 0; // out of order: search from the start
    last = e.vaddr;
    while (from < ranges.length && ranges[from]![1] <= e.vaddr) from++;
    for (let r = from; r < ranges.length && ranges[r]![0] < end; r++) {
      const [s, t] = ranges[r]!;
      const lo = Math.max(s, e.vaddr);
      const hi = Math.min(t, end);
      addRun(runs, p + Math.floor((lo - e.vaddr) / P), Math.ceil((hi - lo) / P));
    }
    p += e.pages;
  }
  return runs;
}

/** pm's entries without the pages in both run lists, and those pages. */
function leaveOut(pm: ProcessPagemap, a: PageRuns, b: PageRuns): { kept: PagemapEntry[]; dropped: PageRuns } {
  const dropped = intersect(a, b);
  const kept: PagemapEntry[] = [];
  let p = 0;
  let d = 0;
  for (const e of pm.entries) {
    let at = p;
    const end = p + e.pages;
    const keep = (to: number) => {
      if (to > at) kept.push({ ...e, vaddr: e.vaddr + (at - p) * P, pages: to - at });
    };
    while (d < dropped.length && dropped[d]! < end) {
      const first = Math.max(dropped[d]!, p);
      const last = Math.min(dropped[d]! + dropped[d + 1]!, end);
      keep(first);
      at = last;
      if (dropped[d]! + dropped[d + 1]! > end) break; // the run goes on into the next entry
      d += 2;
    }
    keep(end);
    p = end;
  }
  return { kept, dropped };
}

/** The pages in both. */
export function intersect(a: PageRuns, b: PageRuns): PageRuns {
  const out: PageRuns = [];
  for (let i = 0, j = 0; i < a.length && j < b.length; ) {
    const lo = Math.max(a[i]!, b[j]!);
    const ha = a[i]! + a[i + 1]!;
    const hb = b[j]! + b[j + 1]!;
    if (Math.min(ha, hb) > lo) addRun(out, lo, Math.min(ha, hb) - lo);
    if (ha < hb) i += 2;
    else j += 2;
  }
  return out;
}

/** Appends a run (first ascending), merged with the last one where they touch. */
export function addRun(runs: PageRuns, first: number, count: number): void {
  if (count <= 0) return;
  const n = runs.length;
  if (n && runs[n - 2]! + runs[n - 1]! >= first) runs[n - 1] = Math.max(runs[n - 2]! + runs[n - 1]!, first + count) - runs[n - 2]!;
  else runs.push(first, count);
}

/**
 * How frame [first, first + count) of a file lands in its copy without the
 * dropped pages: the pages it keeps, as [from, to) byte ranges of the
 * frame, and the page of the copy where the first of them goes. Frames are
 * asked in order; `from` carries where the search in dropped goes on.
 */
export function frameLayout(dropped: PageRuns, first: number, count: number, from: { at: number; before: number }): { keep: number[]; dstPage: number } {
  while (from.at < dropped.length && dropped[from.at]! + dropped[from.at + 1]! <= first) {
    from.before += dropped[from.at + 1]!;
    from.at += 2;
  }
  // A run begun before the frame and going on into it.
  const straddling = from.at < dropped.length && dropped[from.at]! < first ? first - dropped[from.at]! : 0;
  const keep: number[] = [];
  const end = first + count;
  let at = first;
  for (let d = from.at; d < dropped.length && dropped[d]! < end; d += 2) {
    const lo = Math.max(dropped[d]!, first);
    if (lo > at) keep.push((at - first) * PAGE_BYTES, (lo - first) * PAGE_BYTES);
    at = Math.min(dropped[d]! + dropped[d + 1]!, end);
  }
  if (end > at) keep.push((at - first) * PAGE_BYTES, (end - first) * PAGE_BYTES);
  return { keep, dstPage: first - from.before - straddling };
}
