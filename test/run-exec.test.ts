/**
 * `gpuckpt run` becomes the program (bin/gpuckpt execs it): the PID the
 * caller sees is the job's, whatever options the program takes. It had
 * fallen back to a node parent whenever the program had options of its own
 * (`run -- torchrun --standalone ...`), so the verbs did not know the PID.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { BIN, requireBuilt } from './helpers/e2e.js';

beforeAll(requireBuilt);

/** Runs bin/gpuckpt with args; its PID, stdout and exit status. */
function gpuckpt(args: string[]): Promise<{ pid: number; stdout: string; status: number | null }> {
  return new Promise((resolve) => {
    const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.on('close', (status) => resolve({ pid: child.pid!, stdout, status }));
  });
}

describe('gpuckpt run', () => {
  const report = 'echo "$$ $GPUCKPT_JOB ${GPUCKPT_JOB_NAME:-} $*"';

  it('keeps the PID when the program has options of its own', async () => {
    const r = await gpuckpt(['run', '--', '/bin/sh', '-c', report, 'sh', '--standalone', '--nproc_per_node=2']);
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split(/\s+/)).toEqual([String(r.pid), String(r.pid), '--standalone', '--nproc_per_node=2']);
  });

  it('keeps the PID after options of its own, and passes on those of the program that look like them', async () => {
    const r = await gpuckpt(['run', '--name', 'job1', '--', '/bin/sh', '-c', report, 'sh', '--name', 'other', '--pool-size', '1']);
    expect(r.stdout.trim().split(/\s+/)).toEqual([String(r.pid), String(r.pid), 'job1', '--name', 'other', '--pool-size', '1']);
  });

  it("returns the program's exit status", async () => {
    expect((await gpuckpt(['run', '--', '/bin/sh', '-c', 'exit 7'])).status).toBe(7);
  });
});
