#!/usr/bin/env node
// npm's install step (package.json "install"): builds what the package runs
// that is machine code — the shim and its helpers (make) and the node addon
// (node-gyp) — with this machine's compiler and CUDA headers (CUDA_HOME,
// default /usr/local/cuda). Needed after `npm install -g gpuckpt-*.tgz` or
// from the git URL; in a checkout, `npm run build` builds them as well.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Runs a build step; needs: what it takes, said when it fails (its own output above says what failed). */
const run = (cmd, args, needs) => {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) {
    console.error(`gpuckpt install: ${cmd} ${args.join(' ')} failed${r.error ? ` (${r.error.message})` : ''}: it needs ${needs}`);
    process.exit(1);
  }
};
run('make', ['-j2', 'all'], 'a C compiler, make and the CUDA headers (CUDA_HOME, default /usr/local/cuda)');
// npm hands its own node-gyp to install scripts; a node-gyp on PATH otherwise.
const gyp = process.env.npm_config_node_gyp;
const addon = 'a C++ compiler, Python 3 and Node\'s headers (node-gyp downloads them once; offline, set npm_config_nodedir to where they are, such as /usr)';
if (gyp) run(process.execPath, [gyp, 'rebuild', '--directory', 'native'], addon);
else run('node-gyp', ['rebuild', '--directory', 'native'], addon);
