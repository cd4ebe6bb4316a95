// Whole-process checkpoints of jobs started the ways users start them
// (part of npm run test:gpu; real CRIU). Each launch mode runs a program
// that speaks the line protocol, reading commands from a named pipe we
// write and answering into a file we read:
//   launch/script-bg     a script's background job (`gpuckpt run -- APP ... &`,
//                        the script ends): session and group outside the tree
//   launch/nohup         under nohup, output with `>` (truncated, so CRIU checks
//                        its size: the job writes on after --leave-running)
//   launch/timeout       under timeout(1), which stays its parent
//   launch/setsid        its own session leader (what the suite did before)
//   launch/stdin-pipe    stdin a pipe from a process outside (`cat | gpuckpt run`)
//   launch/service       a service's main process: own session, stdin /dev/null
//                        style, stdout and stderr a Unix socket to its supervisor
//                        (a journal)
//   launch/terminal-bg   a background job of an interactive shell in a terminal,
//                        answering on the terminal
// Verbs in each: checkpoint --leave-running (A), mutate, checkpoint (B, the
// job stops and its GPUs are free), restore B --detach (on GPU 1 where there
// are two), state == after mutate; the job ended, restore A attached, state
// == at start, quit, the attached restore returns 0. One `measure` line per
// mode, and a table line: mode, then each verb's pass or one-line error.
//
// Job shapes (a PyTorch job, torch_train.py; trajectories bit-identical to an
// uninterrupted run of the same shape):
//   launch/torch-workers  DataLoader workers (fork, after CUDA started):
//                         checkpoint, restore --detach onto GPU 1, train,
//                         migrate to GPU 0, suspend, resume, train,
//                         checkpoint --leave-running, train
//   launch/torch-plain    the same job without workers, the same verbs: its
//                         times beside the workers' job
//   launch/torch-issue23  the plain job at the size of issue 23's report
//                         (166M parameters, a 2 GiB buffer), the same verbs:
//                         the sequence that once failed its --leave-running
//                         checkpoint with "copy out failed"
//   launch/torch-spawn    a child started with spawn that uses CUDA: both pools
//                         saved and restored
//   launch/refused        a TCP listening socket and a Unix socket to this
//                         runner: refused in one line, the job trains on
//   launch/fork-cost      what a fork of a CUDA process costs under the shim,
//                         which lets go of the device files in the child

import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';

export async function runLaunch(h) {
  const { ROOT, BIN_DIR, GPUCKPT, test, selected, Skip, failure, sleep, cliJson, runCli, expectSame, measure, track, tmpRoot, gpuUuids, say, running, endPids } = h;
  const criuMissing = () => spawnSync('criu', ['--version']).status !== 0 && 'criu not on PATH (source .device/setup.sh)';
  const APP = process.env.GPU_TEST_LAUNCH_APP ?? path.join(BIN_DIR, 'static_cudart');
  const twoGpus = gpuUuids().length >= 2;
  const started = new Set(); // PIDs this scenario made (launched or restored): ended by PID at the end
  const endAll = () => endPids(started);
  const waitGone = async (pid, what) => {
    for (let i = 0; i < 400 && running(pid); i++) await sleep(25);
    if (running(pid)) throw failure(`${what}: process ${pid} still runs`);
  };
  const sh = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;

  /**
   * Reads JSON events from a file the job writes (a plain log, or a
   * terminal's, where they sit among echoed input and escape codes).
   */
  function reader(file) {
    let seen = 0;
    return async (what, ms = 120_000) => {
      const t0 = Date.now();
      for (;;) {
        const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
        const events = text
          .slice(0, text.lastIndexOf('\n') + 1)
          .split(/\r?\n/)
          .map((l) => l.slice(Math.max(0, l.indexOf('{"event"'))))
          .filter((l) => l.startsWith('{"event"'));
        if (events.length > seen) return JSON.parse(events[seen++]);
        if (Date.now() - t0 > ms) throw failure(`${what}: no answer in ${ms / 1000} s`, text.trimEnd().split('\n').slice(-6));
        await sleep(40);
      }
    };
  }

  /**
   * Starts APP (with args) in one of the launch modes. Returns the job:
   * send(cmd, expect), its PID (from its ready line), and restore(args,
   * {attached}) running `gpuckpt restore` so that the restored job gets what
   * that mode's launch gave it.
   */
  async function launch(mode, prog, args = [], extraEnv = {}) {
    const dir = fs.mkdtempSync(path.join(tmpRoot, `launch-${mode}-`));
    const fifo = path.join(dir, 'in');
    const out = path.join(dir, 'out');
    spawnSync('mkfifo', [fifo]);
    const runLine = [GPUCKPT, 'run', '--', prog, ...args].map(sh).join(' ');
    const env = { ...process.env, ...extraEnv, IN: fifo, OUT: out };
    let supervisor;
    let terminal;
    const bash = (script, opts = {}) => track(spawn('bash', ['-c', script], { cwd: ROOT, env, stdio: 'ignore', ...opts }));
    switch (mode) {
      case 'script-bg':
        bash(`${runLine} <"$IN" >>"$OUT" 2>&1 &`);
        break;
      case 'nohup':
        bash(`nohup ${runLine} <"$IN" >"$OUT" 2>"$OUT.err" &`);
        break;
      case 'timeout':
        bash(`timeout 3600 ${runLine} <"$IN" >>"$OUT" 2>&1 &`);
        break;
      case 'setsid':
        bash(`setsid ${runLine} <"$IN" >>"$OUT" 2>&1 &`);
        break;
      case 'stdin-pipe':
        bash(`cat "$IN" | ${runLine} >>"$OUT" 2>&1 &`);
        break;
      case 'service': {
        // The supervisor: the job's stdout and stderr are a socket it reads into OUT.
        const src = `import socket,subprocess,os,sys\na,b=socket.socketpair()\np=subprocess.Popen(sys.argv[1:],stdin=open(os.environ['IN']),stdout=b,stderr=b,start_new_session=True)\nb.close()\no=open(os.environ['OUT'],'ab',0)\nwhile (d:=a.recv(65536)):\n  o.write(d)\n`;
        supervisor = track(spawn('python3', ['-c', src, GPUCKPT, 'run', '--', prog, ...args], { cwd: ROOT, env, stdio: 'ignore' }));
        break;
      }
      case 'terminal-bg': {
        // An interactive shell in a terminal (script(1)'s pty); the job, in the background, answers on the terminal.
        const keys = path.join(dir, 'keys');
        spawnSync('mkfifo', [keys]);
        terminal = track(spawn('bash', ['-c', 'exec script -qfc "bash --norc -i" "$OUT" <"$KEYS" >/dev/null'], { cwd: ROOT, env: { ...env, KEYS: keys }, stdio: 'ignore', detached: true }));
        const k = fs.openSync(keys, 'w');
        fs.writeSync(k, `${runLine} <"$IN" &\n`);
        terminal.keys = k;
        break;
      }
      default:
        throw new Error(`unknown launch mode ${mode}`);
    }
    const w = fs.openSync(fifo, 'w'); // blocks until the job (or cat) opens its end
    let next = reader(out);
    const job = {
      dir,
      next: (what, ms) => next(what, ms),
      async send(cmd, expect, ms = 120_000) {
        // No reader between a checkpoint and the restore reopening the pipe: wait for it.
        for (let t0 = Date.now(); ; ) {
          try {
            fs.writeSync(w, cmd + '\n');
            break;
          } catch (e) {
            if (e.code !== 'EPIPE' || Date.now() - t0 > ms) throw failure(`${mode}: ${cmd}: cannot write to the job (${e.code ?? e.message})`);
            await sleep(50);
          }
        }
        const e = await next(cmd, ms);
        if (e.event !== expect) throw failure(`${mode}: ${cmd}: got ${JSON.stringify(e).slice(0, 200)}`);
        return e;
      },
      /** gpuckpt restore, given the streams this mode's job needs: resolves {code, stderr} (attached: when the job ends). */
      restore(image, extra, { attached = false } = {}) {
        const cli = [GPUCKPT, 'restore', image, ...extra].map(sh).join(' ');
        let child;
        if (mode === 'stdin-pipe') child = bash(`exec ${cli} < <(exec cat "$IN" 2>/dev/null)`, { stdio: ['ignore', 'ignore', 'pipe'] });
        else if (mode === 'service') {
          // The restoring command's own output stands for the journal now.
          const o = fs.openSync(out, 'a');
          child = track(spawn(GPUCKPT, ['restore', image, ...extra], { cwd: ROOT, env, stdio: ['ignore', o, 'pipe'] }));
          fs.closeSync(o);
        } else if (mode === 'terminal-bg') {
          // A new terminal; after a detached restore it stays open (closing it would hang the job up).
          const log = path.join(dir, `restored-${Date.now()}`);
          const rc = `${log}.rc`;
          const line = attached ? cli : `${cli}; echo $? >${sh(rc)}; exec sleep 3600`;
          const term = track(spawn('script', ['-qfec', line, log], { cwd: ROOT, env, stdio: ['pipe', 'ignore', 'ignore'], detached: true }));
          next = reader(log);
          if (attached) child = term;
          else
            return (async () => {
              for (let i = 0; i < 2400 && !fs.existsSync(rc); i++) await sleep(50);
              const code = fs.existsSync(rc) ? Number(fs.readFileSync(rc, 'utf8')) : null;
              return { code, signal: null, stderr: fs.readFileSync(log, 'utf8').split(/\r?\n/).filter((l) => l.includes('gpuckpt:')).join('\n') };
            })();
        } else child = track(spawn(GPUCKPT, ['restore', image, ...extra], { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] }));
        let stderr = '';
        child.stderr?.on('data', (d) => (stderr += d));
        const done = new Promise((res) => child.on('close', (code, signal) => res({ code, signal, stderr })));
        return attached ? { done } : done;
      },
      /** The job ended: in stdin-pipe mode, the cat that fed it (which we started) goes too, so it reads no more of the pipe. */
      ended() {
        if (mode !== 'stdin-pipe') return;
        for (const name of fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
          try {
            if (fs.readFileSync(`/proc/${name}/cmdline`, 'utf8') === `cat\0${fifo}\0`) process.kill(Number(name), 'SIGKILL');
          } catch {
            // gone
          }
        }
      },
      close() {
        try {
          fs.closeSync(w);
        } catch {}
        if (terminal) {
          try {
            fs.closeSync(terminal.keys);
          } catch {}
        }
        supervisor?.kill('SIGKILL');
      },
    };
    const ready = await job.next('ready', 240_000);
    if (ready.event !== 'ready') throw failure(`${mode}: ${JSON.stringify(ready).slice(0, 200)}`);
    job.pid = ready.pid;
    job.ready = ready;
    started.add(ready.pid);
    return job;
  }

  const table = [];

  /** The verbs of the launch matrix on one mode: each cell pass, or its one-line error. */
  async function launchMatrix(mode) {
    const job = await launch(mode, APP);
    const cells = {};
    const cell = async (name, fn) => {
      try {
        await fn();
        cells[name] = 'pass';
      } catch (e) {
        cells[name] = String(e.message).split('\n')[0];
        throw e;
      }
    };
    const t = {};
    try {
      const R = job.ready.buffers;
      const A = path.join(job.dir, 'A');
      const B = path.join(job.dir, 'B');
      await cell('checkpoint --leave-running', async () => {
        const s = await cliJson(['checkpoint', String(job.pid), '-o', A, '--leave-running', '--json'], 300_000);
        t.leave_pause_s = s.pauseSeconds;
        expectSame((await job.send('state', 'state')).buffers, R, `${mode}: state after checkpoint --leave-running`);
      });
      const M = (await job.send('mutate', 'mutated')).buffers;
      await cell('checkpoint', async () => {
        const s = await cliJson(['checkpoint', String(job.pid), '-o', B, '--json'], 300_000);
        t.ckpt_s = s.seconds;
        await waitGone(job.pid, `${mode}: after checkpoint`);
        job.ended();
      });
      await cell(twoGpus ? 'restore --detach --device 1' : 'restore --detach', async () => {
        const r = await job.restore(B, ['--detach', ...(twoGpus ? ['--device', '1'] : [])]);
        if (r.code !== 0) throw failure(`restore --detach: ${r.stderr.trim().split('\n').at(-1)}`);
        expectSame((await job.send('state', 'state')).buffers, M, `${mode}: state after restore --detach`);
      });
      process.kill(job.pid, 'SIGKILL');
      await waitGone(job.pid, `${mode}: killed`);
      job.ended();
      await cell('restore (attached)', async () => {
        const { done } = job.restore(A, [], { attached: true });
        expectSame((await job.send('state', 'state')).buffers, R, `${mode}: state after the attached restore`);
        await job.send('quit', 'bye');
        const r = await done;
        if (r.code !== 0) throw failure(`attached restore returned ${r.signal ?? r.code}: ${r.stderr.trim().split('\n').at(-1)}`);
      });
    } finally {
      job.close();
      table.push(`# table ${mode}: ${Object.entries(cells).map(([k, v]) => `${k}=${v}`).join(' | ')}`);
      say(table.at(-1));
      endAll();
    }
    measure(`launch/${mode}`, t);
    return `checkpoint --leave-running, checkpoint, restore --detach${twoGpus ? ' onto GPU 1' : ''}, attached restore: data bit for bit each time`;
  }

  for (const mode of ['script-bg', 'nohup', 'timeout', 'setsid', 'stdin-pipe', 'service', 'terminal-bg']) {
    await test(`launch/${mode}`, async () => {
      const why = criuMissing() || (mode === 'terminal-bg' && spawnSync('script', ['--version']).status !== 0 && 'script(1) not installed');
      if (why) throw new Skip(why);
      return launchMatrix(mode);
    });
  }

  // ------------------------------------------------------------ job shapes --

  const TORCH = path.join(ROOT, 'test', 'gpu', 'apps', 'torch_train.py');
  const steps = Number(process.env.GPU_TEST_TORCH_STEPS ?? 4);
  const torchMissing = () => spawnSync('python3', ['-c', 'import torch; assert torch.cuda.is_available()']).status !== 0 && 'no PyTorch with CUDA here';
  const shapes = {
    'torch-workers': { TORCH_WORKERS: '2' },
    'torch-plain': {},
    'torch-spawn': { TORCH_SPAWN_CHILD: '1' },
    'torch-issue23': { TORCH_PARAMS_M: '166', TORCH_BUFFER_GIB: '2' },
  };
  // Uninterrupted runs of each shape to be tested, all at once, first.
  let references;
  const referenceOf = (shape) => {
    references ??= Object.fromEntries(
      Object.entries(shapes)
        .filter(([name]) => selected(`launch/${name}`))
        .map(([name, envs]) => [
          name,
          (async () => {
            const job = await launch('setsid', 'python3', [TORCH], envs);
            try {
              const losses = [];
              for (let i = 0; i < 4; i++) losses.push(...(await job.send(`train ${steps}`, 'trained', 300_000)).losses);
              await job.send('quit', 'bye');
              return losses;
            } finally {
              job.close();
            }
          })(),
        ]),
    );
    return references[shape];
  };

  const times = {};
  /** Mappings of /dev/nvidia* in pid's children (DataLoader workers): the shim lets them go at fork; any left is a failure. */
  const workersDeviceMaps = (pid) => {
    const kids = fs.readdirSync(`/proc/${pid}/task`).flatMap((t) => fs.readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').split(' ').filter(Boolean));
    if (kids.length < 2) throw failure(`torch-workers: ${kids.length} children, not the 2 DataLoader workers`);
    const left = kids.map((k) => fs.readFileSync(`/proc/${k}/maps`, 'utf8').split('\n').filter((l) => l.includes('/dev/nvidia')).length);
    if (left.some((n) => n > 0)) throw failure(`DataLoader workers ${kids.join(', ')} still map /dev/nvidia* (${left.join(', ')} mappings)`);
    return left.reduce((a, b) => a + b, 0);
  };
  async function shapeScenario(shape) {
    const why = criuMissing() || torchMissing();
    if (why) throw new Skip(why);
    const want = referenceOf(shape);
    want.catch(() => undefined);
    const job = await launch('script-bg', 'python3', [TORCH], shapes[shape]);
    const got = [];
    const train = async () => got.push(...(await job.send(`train ${steps}`, 'trained', 300_000)).losses);
    const m = {};
    const ckpt = path.join(job.dir, 'C');
    const leave = path.join(job.dir, 'L');
    try {
      await train();
      if (shape === 'torch-workers') m.worker_nvidia_maps = workersDeviceMaps(job.pid);
      const c = await cliJson(['checkpoint', String(job.pid), '-o', ckpt, '--json'], 300_000);
      m.ckpt_s = c.seconds;
      m.gpu_free_s = c.gpuFreeSeconds;
      m.stored_GB = c.storedBytes / 1e9;
      m.members = c.members.length;
      await waitGone(job.pid, `${shape}: after checkpoint`);
      job.ended();
      const onOther = shape !== 'torch-spawn' && twoGpus;
      const t0 = Date.now();
      const r = await job.restore(ckpt, ['--detach', '--json', ...(onOther ? ['--device', '1'] : [])]);
      if (r.code !== 0) throw failure(`restore: ${r.stderr.trim().split('\n').at(-1)}`);
      m.restore_s = (Date.now() - t0) / 1000;
      await train();
      if (onOther) m.migrate_s = (await cliJson(['migrate', String(job.pid), '--to-device', '0', '--json'], 300_000)).downtimeSeconds;
      const s = await cliJson(['suspend', String(job.pid), '--json'], 300_000);
      m.suspend_s = s.seconds;
      m.resume_s = (await cliJson(['resume', String(job.pid), '--json'], 300_000)).seconds;
      await train();
      const l = await cliJson(['checkpoint', String(job.pid), '-o', leave, '--leave-running', '--json'], 300_000);
      m.leave_pause_s = l.pauseSeconds;
      await train();
      const ref = await want;
      const diff = ref.findIndex((x, i) => got[i] !== x);
      if (diff >= 0 || got.length !== ref.length) throw failure(`${shape}: step ${diff} differs: ${got[diff]} vs ${ref[diff]} uninterrupted`);
      await job.send('quit', 'bye');
    } finally {
      job.close();
      endAll();
    }
    times[shape] = m;
    measure(`launch/${shape}`, m);
    return `${got.length} steps bit-identical to an uninterrupted run across checkpoint, restore${shape !== 'torch-spawn' && twoGpus ? ' onto GPU 1, migrate to GPU 0' : ''}, suspend/resume and checkpoint --leave-running (${m.members} CUDA process${m.members > 1 ? 'es' : ''})`;
  }
  for (const shape of Object.keys(shapes)) await test(`launch/${shape}`, () => shapeScenario(shape));

  // What letting go of the device files costs a fork: a CUDA process forking
  // 20 children that exit at once, under the shim and without it.
  await test('launch/fork-cost', async () => {
    const why = torchMissing();
    if (why) throw new Skip(why);
    const src = 'import torch,os,time,json,statistics\ntorch.zeros(1,device="cuda")\nts=[]\nfor i in range(20):\n  t=time.perf_counter(); p=os.fork()\n  if p==0: os._exit(0)\n  os.waitpid(p,0); ts.append(time.perf_counter()-t)\nprint(json.dumps({"ms":statistics.median(ts)*1e3}))';
    const run = (cmd, args) => {
      const r = spawnSync(cmd, args, { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
      if (r.status !== 0) throw failure(`${cmd}: ${(r.stderr || '').trim().split('\n').at(-1)}`);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)).ms;
    };
    const shim = run(GPUCKPT, ['run', '--', 'python3', '-c', src]);
    const plain = run('python3', ['-c', src]);
    measure('launch/fork-cost', { fork_exit_ms_shim: shim, fork_exit_ms_plain: plain });
    return `fork + exit + wait of a CUDA process: ${shim.toFixed(2)} ms under the shim (device files let go in the child), ${plain.toFixed(2)} ms without`;
  });

  await test('launch/refused', async () => {
    const why = criuMissing() || torchMissing();
    if (why) throw new Skip(why);
    const job = await launch('script-bg', 'python3', [TORCH]);
    const server = net.createServer(() => undefined);
    const sock = path.join(job.dir, 'outside.sock');
    await new Promise((res) => server.listen(sock, res));
    const lines = [];
    try {
      // The Unix socket first: a listening TCP socket is carried where CRIU can (then the job is checkpointed).
      for (const [cmd, expect] of [
        [`connect ${sock}`, /^gpuckpt: process \d+ \(python3\) fd \d+ is a Unix socket connected to process \d+ \(node\), outside the job/],
        ['listen', /^gpuckpt: process \d+ \(python3\) holds a TCP socket listening on port \d+, and CRIU .* cannot save TCP or UDP sockets|holds a TCP socket listening/],
      ]) {
        await job.send(cmd, 'socket');
        const out = path.join(job.dir, `refused-${lines.length}`);
        const r = await runCli(['checkpoint', String(job.pid), '-o', out], 120_000);
        const line = r.stderr.trim();
        if (r.code === 0) {
          lines.push(`${cmd.split(' ')[0]}: carried (CRIU can here)`);
          await waitGone(job.pid, 'checkpointed');
          return lines.join('; ');
        }
        if (!expect.test(line) || line.includes('\n') || fs.existsSync(out)) throw failure(`${cmd}: ${line}`);
        lines.push(line);
        say(`# refused: ${line}`);
        await job.send('train 1', 'trained', 300_000); // untouched: it trains on
        await job.send('close', 'closed');
      }
      await job.send('quit', 'bye');
    } finally {
      server.close();
      job.close();
      endAll();
    }
    return `refused in one line, nothing touched, the job trained on: ${lines.map((l) => `"${l.slice(9, 120)}…"`).join('; ')}`;
  });

  if (times['torch-workers'] && times['torch-plain'])
    say(`# torch-workers vs torch-plain: checkpoint ${times['torch-workers'].ckpt_s} vs ${times['torch-plain'].ckpt_s} s, restore ${times['torch-workers'].restore_s} vs ${times['torch-plain'].restore_s} s`);
}
