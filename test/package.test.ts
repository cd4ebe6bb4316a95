/**
 * The package as users get it: `npm pack` holds only what runs (no tests,
 * no logs, no build outputs of this machine), and the tarball installed
 * into an empty prefix builds its machine code at install and runs. Needs
 * npm's registry for the dependencies, as `npm install` does. Packed
 * without its scripts: dist/ is built already, and rebuilding it here
 * would rewrite files the other suites' commands are reading.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './helpers/e2e.js';

const dir = mkdtempSync(join(tmpdir(), 'gpuckpt-pack-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A long command, without blocking the test worker (vitest talks to it meanwhile). */
function run(cmd: string, args: string[], opts: { cwd?: string; timeout: number }): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((res) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeout);
    child.on('close', (status) => {
      clearTimeout(timer);
      res({ status, stdout, stderr });
    });
  });
}

const SHIPPED = /^(package\.json|README\.md|Makefile|bin\/gpuckpt|dist\/(cli|controller|native)\/.+\.js(\.map)?|cli\/demo\/[^/]+|native\/(binding\.gyp|src\/[^/]+|keeper\/[^/]+|holder\/[^/]+|common\/[^/]+|criu-compat\/[^/]+|criu-plugin\/[^/]+)|shim\/.+|protocol\/[^/]+\.h|scripts\/install-build\.mjs)$/;

describe('the package', () => {
  it('packs only what runs, and installs and runs from the tarball', { timeout: 900_000 }, async () => {
    const pack = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: ROOT, timeout: 300_000 });
    expect(pack.status).toBe(0);
    const [info] = JSON.parse(pack.stdout) as { filename: string; files: { path: string }[] }[];
    const paths = info!.files.map((f) => f.path);
    expect(paths.filter((p) => !SHIPPED.test(p))).toEqual([]);
    expect(paths).toEqual(expect.arrayContaining(['bin/gpuckpt', 'dist/cli/main.js', 'native/binding.gyp', 'shim/collective/wrappers.c', 'Makefile']));
    const prefix = join(dir, 'prefix');
    const install = await run('npm', ['install', '-g', '--no-audit', '--no-fund', '--prefix', prefix, join(dir, info!.filename)], { timeout: 840_000 });
    expect(install.stderr.split('\n').filter((l) => /ERR!/.test(l))).toEqual([]);
    expect(install.status).toBe(0);
    const version = spawnSync(join(prefix, 'bin', 'gpuckpt'), ['--version'], { encoding: 'utf8' });
    expect(version.stdout.trim()).toBe('0.1.0');
    // The shim and the addon were built at install: ps loads the addon, run finds the shim.
    const env = { ...process.env, GPUCKPT_RUN_DIR: join(dir, 'run') };
    expect(spawnSync(join(prefix, 'bin', 'gpuckpt'), ['ps'], { encoding: 'utf8', env }).stdout).toBe('no processes running under gpuckpt\n');
    const preload = spawnSync(join(prefix, 'bin', 'gpuckpt'), ['run', '--', '/bin/sh', '-c', 'echo "$LD_PRELOAD"'], { encoding: 'utf8', env });
    expect(preload.stdout.trim()).toBe(join(prefix, 'lib', 'node_modules', 'gpuckpt', 'build', 'libgpuckpt.so'));
  });
});
