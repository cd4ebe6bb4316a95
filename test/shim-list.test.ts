/**
 * The gated list and the shim agree: every listed entry point is exported
 * under libcuda's own name, nothing else named cu* is, and the list is what
 * the toolkit's cuda.h gives (gen_gated --check, also run by make check).
 */
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './helpers/e2e.js';

describe('gated list', () => {
  const list = readFileSync(join(ROOT, 'shim', 'interpose', 'gated_functions.gen.h'), 'utf8');
  const listed = [...list.matchAll(/^GP_(GATED|ROUTED)\((\w+),/gm)].map((m) => m[2]!).sort();

  it('matches the symbols the shim exports', () => {
    const nm = spawnSync('nm', ['-D', '--defined-only', join(ROOT, 'build', 'libgpuckpt.so')], { encoding: 'utf8' });
    expect(nm.status).toBe(0);
    const exported = nm.stdout
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f[1] === 'T')
      .map((f) => f[2]!)
      .sort();
    expect(exported.filter((n) => n.startsWith('cu'))).toEqual(listed);
    // NCCL's entry points (shim/collective/nccl_functions.h), syscall (io_uring refused), the framework hook's two (control/framework_hook.h)
    // the mapping calls that find the driver's copy of the device state (interpose/driver_mappings.c),
    // and pthread_join, which wakes NCCL's UDS thread in a teardown (collective/proxy_wake.h).
    const nccl = readFileSync(join(ROOT, 'shim', 'collective', 'nccl_functions.h'), 'utf8');
    const ncclListed = [...nccl.matchAll(/^GP_NCCL_(?:OP|COUNTED|OTHER)\((\w+)/gm)].map((m) => m[1]!);
    expect(exported.filter((n) => !n.startsWith('cu'))).toEqual(['dlsym', 'gpuckpt_framework_report', 'gpuckpt_framework_wait', 'mmap', 'mmap64', 'mremap', 'munmap', ...ncclListed, 'pthread_join', 'syscall'].sort());
    expect(Number(list.match(/#define GP_GATED_COUNT (\d+)/)![1])).toBe(listed.length);
  });

  it('routes the allocation entry points through the shim', () => {
    for (const name of ['cuMemAlloc_v2', 'cuMemFree_v2', 'cuMemAllocPitch_v2', 'cuGetProcAddress_v2', 'cuMemGetInfo_v2'])
      expect(list).toMatch(new RegExp(`^GP_ROUTED\\(${name},`, 'm'));
  });

  it('is what cuda.h gives', () => {
    const r = spawnSync('node', [join(ROOT, 'shim', 'interpose', 'gen_gated.mjs'), '--check'], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});
