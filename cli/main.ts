#!/usr/bin/env node
/**
 * The gpuckpt command line. Thin: parses arguments, calls the controller,
 * prints. A GpuckptError becomes one line on stderr and the exit status of
 * its kind (errors.ts: 2 usage, 3 refused untouched, 1 failure); anything
 * else is a bug and keeps its stack.
 */
import { log } from '../controller/base/log.js';
import { Command, CommanderError, Option } from 'commander';
import { checkpointJobGpuOnly, resumeJob, suspendJob } from '../controller/verbs/job.js';
import { parseTarget } from '../controller/verbs/job-target.js';
import { runDemo } from '../controller/verbs/demo.js';
import { checkEnvironment } from '../controller/base/environment.js';
import { EXIT_USAGE, exitStatusOf, GpuckptError } from '../controller/base/errors.js';
import { inspectImage } from '../controller/verbs/inspect.js';
import { parsePid } from '../controller/adapters/processes.js';
import { listProcesses } from '../controller/verbs/ps.js';
import { restoreInto, restoreStreamInto } from '../controller/verbs/rollback.js';
import { makeRunPlan, planAsShell, type RunOptions } from '../controller/verbs/run-plan.js';
import { criuPluginStep, PLUGIN_STEPS, type PluginStep } from '../controller/verbs/criu-plugin.js';
import { checkpointProcess } from '../controller/verbs/process-checkpoint.js';
import { restoreProcess } from '../controller/verbs/process-restore.js';
import { checkpointStreamed, imageBytesBound, restoreStreamed, STDIO, type StreamedSummary } from '../controller/verbs/image-stream.js';
import { migrateProcess } from '../controller/verbs/migrate.js';
import { isGpuSnapshotName, releaseGpuSnapshots, restoreFromGpu, snapshotToGpu } from '../controller/verbs/gpu-held.js';
import { peekMemory, pokeMemory } from '../controller/verbs/peek.js';
import { ELEMENT_FORMATS, encodeElements, parseElementFormat } from '../controller/base/element-format.js';
import { parseSize, round } from '../controller/base/units.js';
import { isWorkerCount, MAX_WORKERS } from '../controller/engine/codec-pool.js';
import {
  inspectJson,
  printCheckpoint,
  printGpuRollback,
  printGpuSnapshot,
  printInspect,
  printPeek,
  printPoke,
  printJobCheckpoint,
  printJobResume,
  printJobSuspend,
  printMigrate,
  printProcessCheckpoint,
  printProcesses,
  printProcessRestore,
  printRelease,
  restoredJobStatus,
  printResume,
  printRollback,
  printStream,
  printSuspend,
  toJson,
} from './output.js';
import type { CheckpointOptions, CheckpointSummary } from '../controller/engine/pool-image.js';
import type { JobCheckpointSummary } from '../controller/verbs/job.js';
import type { ProcessCheckpointSummary } from '../controller/verbs/process-checkpoint.js';
import { completionScript } from './completion.js';
import { runWithoutExec } from './run-fallback.js';

function examples(lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`;
}

/** Whether a command printed its JSON result: a failure after it (inspect's verdict) prints no second document. */
let jsonPrinted = false;

/** When the command's action began, from this process's start (node's time origin), in ms. */
let actionStarted = 0;

/**
 * A timed result (one with seconds) gets startSeconds: what node's start
 * and loading the CLI took before the command's work, and its seconds,
 * began. Their sum is the command's time from its exec.
 */
function printJson(value: unknown): void {
  const timed = value !== null && typeof value === 'object' && !Array.isArray(value) && typeof (value as { seconds?: unknown }).seconds === 'number';
  printJsonText(toJson(timed ? { ...value, startSeconds: round(actionStarted / 1000) } : value));
}

/** What f prints goes to standard error: standard output carries an image stream. */
function onStderr(f: () => void): void {
  const log = console.log;
  console.log = console.error;
  try {
    f();
  } finally {
    console.log = log;
  }
}

function printJsonText(text: string): void {
  console.log(text);
  jsonPrinted = true;
}

/**
 * A required option's value. Checked in the action, not by commander's
 * requiredOption, so that an unknown option is reported first (the cause
 * of a mistyped command line).
 */
function required(value: string | undefined, flags: string): string {
  if (value === undefined) throw new GpuckptError('BAD_ARGUMENT', `required option '${flags}' not specified (run with --help for usage)`);
  return value;
}

/** A repeatable option's values, in order. */
function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/** A device address: hex with 0x, or decimal. */
function parseAddress(text: string): bigint {
  if (!/^(0x[0-9a-f]+|[0-9]+)$/i.test(text)) throw new GpuckptError('BAD_ARGUMENT', `"${text}" is not an address (0x... or a decimal number)`);
  return BigInt(text);
}

function parseWorkers(v: string): number {
  const n = Number(v);
  if (!isWorkerCount(n)) throw new GpuckptError('BAD_ARGUMENT', `--workers "${v}" must be a whole number from 1 to ${MAX_WORKERS}`);
  return n;
}

interface TransferFlags {
  json?: boolean;
  staging?: string;
  workers?: string;
}

/** --staging and --workers, shared by the commands that move pool data. */
function withTransferOptions(cmd: Command, workersWhat: string): Command {
  return cmd
    .option('--staging <size>', 'most host memory to use for staging (default: half of free memory)')
    .option('--workers <n>', `${workersWhat} threads (default: cores - 1)`);
}

/** Progress goes to stderr only when it is a terminal and stdout is not JSON. */
function showProgress(opts: { json?: boolean }): boolean {
  return !opts.json && process.stderr.isTTY;
}

/** Staging limit, worker count, and whether to show progress. */
function transfer(opts: TransferFlags) {
  return {
    stagingLimit: opts.staging ? parseSize(opts.staging, '--staging') : undefined,
    workers: opts.workers ? parseWorkers(opts.workers) : undefined,
    progress: showProgress(opts),
  };
}

function buildProgram(): Command {
  const program = new Command('gpuckpt')
    .description('Checkpoint and restore CUDA applications: device memory in a fixed-address pool, saved and put back at identical addresses')
    .version('0.1.0')
    .showHelpAfterError('(run with --help for usage)')
    .configureOutput({ outputError: (s, write) => write(s.startsWith('error:') ? `gpuckpt: ${s.slice(7)}` : s) })
    // Help, version and usage errors end by returning, never process.exit:
    // the driver warm-up (driver-warmup.ts) may still be inside cuInit.
    .exitOverride()
    .hook('preAction', () => {
      actionStarted = performance.now();
    });

  program
    .command('run')
    .description('start a program under the gpuckpt shim (it keeps its own PID, exit status and signals)')
    .option('--pool-size <size>', 'virtual size of the pool per GPU (default 256G)')
    .option('--pool-base <addr>', 'fixed virtual base address of the pool (default 0x600000000000)')
    .option('--name <name>', 'name the job, for the verbs to take instead of its PID')
    .option('--no-framework-hook', "start no hook in the job's Python processes (it lets images leave out what PyTorch's allocator holds unused)")
    .argument('<program...>', 'program and its arguments, after --')
    .addHelpText(
      'after',
      examples(['gpuckpt run -- ./train --epochs 10', 'gpuckpt run --pool-size 64G -- python3 serve.py', 'gpuckpt run --name ddp -- torchrun --standalone --nproc_per_node=2 train.py']),
    )
    .action(async (command: string[], opts: RunOptions) => {
      // Reached only without bin/gpuckpt's exec (e.g. node dist/cli/main.js run).
      process.exitCode = await runWithoutExec(makeRunPlan(command, opts));
    });

  program
    .command('ps')
    .description('list processes running under gpuckpt, with their pool use')
    .option('--json', 'print JSON on stdout')
    .addHelpText('after', examples(['gpuckpt ps', 'gpuckpt ps --json']))
    .action(async (opts: { json?: boolean }) => {
      const rows = await listProcesses();
      if (opts.json) printJson(rows);
      else printProcesses(rows);
    });

  withTransferOptions(program.command('checkpoint'), 'compression')
    .description('save a running process: its GPU memory, and (without --gpu-only) the whole process with CRIU')
    .argument('<job>', 'process ID of an application started with gpuckpt run, or of a job\'s launcher (every rank), or a job\'s --name')
    .option('-o, --output <dir>', "image directory to create, or - to stream the image to standard output (restore - takes it)")
    .option('--export <file>', 'write the image as one file (restore --import takes it)')
    .addOption(new Option('--gpu-only', 'save the device memory pool only; the process keeps running').default(false))
    .option('--leave-running', 'whole-process image, and the process carries on afterwards')
    .option('--criu <path>', 'CRIU to use (default: $GPUCKPT_CRIU, else criu on PATH)')
    .option('--criu-opt <option>', 'pass an option to criu dump, e.g. --criu-opt=--tcp-established (repeatable; CRIU also reads its own config files)', collect, [])
    .option('--force', 'replace an existing image at the output path')
    .option('--parent <image>', 'store only the blocks changed since this image (restore then needs it, and its own parents)')
    .option('--live', 'copy while the application runs, again where it changed, and pause it only for the last changes (needs host memory for the whole pool)')
    .option('--json', 'print a JSON summary on stdout')
    .option('--level <n>', 'zstd compression level, 1 (fastest) to 19', '1')
    .option('--raw-criu-pages', "keep CRIU's memory pages as CRIU wrote them, for tools that read CRIU images (default: compressed like the pool)")
    .option('--whole-pool', "take every byte of the pool, even what the framework's allocator (PyTorch's) holds unused")
    .option('--to-gpu [gpu]', "with --gpu-only: keep the snapshot in GPU memory (the process's own GPUs, or all on this one), to roll back to in milliseconds (restore gpu:ID --into PID)")
    .addHelpText(
      'after',
      examples([
        'gpuckpt checkpoint 4242 --gpu-only -o /ckpt/step1000',
        'gpuckpt checkpoint 4242 --gpu-only -o /ckpt/step1100 --parent /ckpt/step1000',
        'gpuckpt checkpoint 4242 --gpu-only --live -o /ckpt/step1200   # pauses for what changed during the copy',
        'gpuckpt checkpoint 4242 -o /ckpt/job   # the process stops',
        'gpuckpt checkpoint 4242 -o /ckpt/job --leave-running --json',
        'gpuckpt checkpoint 4242 -o /ckpt/job --criu-opt=--tcp-established   # a job with open TCP connections',
        'gpuckpt checkpoint 4242 -o - | ssh other gpuckpt restore -   # move the job to another host',
        'gpuckpt checkpoint 4242 --gpu-only --export /ckpt/step1000.gpuckpt',
        'gpuckpt checkpoint 4242 --gpu-only --to-gpu   # an undo point in GPU memory: restore gpu:1 --into 4242',
      ]),
    )
    .action(async (pidText: string, opts: TransferFlags & { output?: string; export?: string; gpuOnly: boolean; leaveRunning?: boolean; criu?: string; criuOpt: string[]; force?: boolean; parent?: string; live?: boolean; level: string; rawCriuPages?: boolean; wholePool?: boolean; toGpu?: string | boolean }) => {
      if (opts.toGpu !== undefined) {
        if (!opts.gpuOnly) throw new GpuckptError('BAD_ARGUMENT', '--to-gpu keeps a --gpu-only snapshot: add --gpu-only');
        const other = (['output', 'export', 'parent', 'live', 'force', 'staging', 'workers', 'wholePool'] as const).find((k) => opts[k] !== undefined && opts[k] !== false);
        if (other) throw new GpuckptError('BAD_ARGUMENT', `--${other.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} is for images in files; a --to-gpu snapshot stays in GPU memory`);
        const summary = await snapshotToGpu(parsePid(pidText), { gpu: typeof opts.toGpu === 'string' ? opts.toGpu : undefined });
        if (opts.json) printJson(summary);
        else printGpuSnapshot(summary);
        return;
      }
      if (opts.output !== undefined && opts.export !== undefined) throw new GpuckptError('BAD_ARGUMENT', '-o and --export both say where the image goes: give one');
      const output = opts.export ?? required(opts.output, '-o, --output <dir>');
      const streamed = opts.export !== undefined || output === STDIO;
      if (output === STDIO && opts.json) throw new GpuckptError('BAD_ARGUMENT', '--json prints on standard output, where -o - streams the image: use --export FILE with --json');
      if (streamed && opts.parent) throw new GpuckptError('BAD_ARGUMENT', '--parent makes an image that needs its parent beside it: stream a full image');
      const pid = parseTarget(pidText);
      const level = Number(opts.level);
      if (!Number.isInteger(level) || level < 1 || level > 19) throw new GpuckptError('BAD_ARGUMENT', `--level "${opts.level}" must be 1 to 19`);
      if (opts.gpuOnly && opts.leaveRunning) throw new GpuckptError('BAD_ARGUMENT', '--leave-running is for whole-process images; a --gpu-only checkpoint always leaves the process running');
      if (opts.gpuOnly && opts.rawCriuPages) throw new GpuckptError('BAD_ARGUMENT', '--raw-criu-pages is for whole-process images; a --gpu-only image holds no CRIU files');
      const common = { ...transfer(opts), force: opts.force, level, parent: opts.parent, live: opts.live, wholePool: opts.wholePool };
      const make = (dir: string, more: Pick<CheckpointOptions, 'onWriter' | 'force'> = {}): Promise<CheckpointSummary | JobCheckpointSummary | ProcessCheckpointSummary> =>
        opts.gpuOnly
          ? checkpointJobGpuOnly(pid, dir, { ...common, ...more })
          : checkpointProcess(pid, dir, { ...common, ...more, leaveRunning: opts.leaveRunning, criu: opts.criu, criuOpts: opts.criuOpt, rawCriuPages: opts.rawCriuPages });
      const print = (s: CheckpointSummary | JobCheckpointSummary | ProcessCheckpointSummary) => {
        if ('criuVersion' in s) printProcessCheckpoint(s);
        else if ('images' in s) printJobCheckpoint(s);
        else printCheckpoint(s);
      };
      if (streamed) {
        // The passing directory is fresh; --force is about the file.
        const summary = await checkpointStreamed(output, !!opts.force, (dir, more) => make(dir, { ...more, force: false }), await imageBytesBound(pid, opts.gpuOnly));
        if (opts.json) printJson(summary);
        else
          onStderr(() => {
            print(summary);
            printStream(summary.stream);
          });
        return;
      }
      const summary = await make(output);
      if (opts.json) printJson(summary);
      else print(summary);
    });

  withTransferOptions(program.command('restore'), 'decompression')
    .description('bring a process back from its image (or, with --into, roll a running process back)')
    .argument('[image]', 'image directory made by gpuckpt checkpoint, or - to read a stream of one (checkpoint -o -) from standard input')
    .option('--import <file>', 'restore the image of this file (checkpoint --export)')
    .option('--into <pid>', 'write a --gpu-only image into this running process (same pool layout)')
    .option('--device <gpu>', "GPU to restore onto: this host's ordinal or a GPU UUID")
    .option('--detach', 'print the PID and return instead of waiting for the application')
    .option('--criu <path>', 'CRIU to use (default: $GPUCKPT_CRIU, else criu on PATH)')
    .option('--json', 'print a JSON summary on stdout')
    .addHelpText(
      'after',
      examples([
        "gpuckpt restore /ckpt/job              # waits, exits with the application's status",
        'gpuckpt restore /ckpt/job --detach --device 1',
        'gpuckpt restore /ckpt/step1000 --into 4242',
        'ssh other gpuckpt checkpoint 4242 -o - | gpuckpt restore - --detach',
        'gpuckpt restore --import /ckpt/step1000.gpuckpt --into 4242',
        'gpuckpt restore gpu:1 --into 4242     # a snapshot held in GPU memory (checkpoint --to-gpu)',
      ]),
    )
    .action(async (image: string | undefined, opts: TransferFlags & { import?: string; into?: string; device?: string; detach?: boolean; criu?: string }) => {
      const common = transfer(opts);
      if (image !== undefined && opts.import !== undefined) throw new GpuckptError('BAD_ARGUMENT', 'an image and --import both say what to restore: give one');
      const source = opts.import ?? image;
      if (source === undefined) throw new GpuckptError('BAD_ARGUMENT', 'no image: give its directory, - for a stream on standard input, or --import FILE');
      const streamed = opts.import !== undefined || source === STDIO;
      if (isGpuSnapshotName(source)) {
        if (opts.into === undefined) throw new GpuckptError('BAD_ARGUMENT', `${source} is held in GPU memory for a running process: give --into PID`);
        if (opts.device !== undefined || opts.detach || opts.staging || opts.workers) throw new GpuckptError('BAD_ARGUMENT', 'a snapshot in GPU memory goes back into its running process: --into PID only');
        const summary = await restoreFromGpu(source, parsePid(opts.into));
        if (opts.json) printJson(summary);
        else printGpuRollback(summary);
        return;
      }
      if (opts.into !== undefined) {
        if (opts.device !== undefined || opts.detach) throw new GpuckptError('BAD_ARGUMENT', '--device and --detach restore a whole process; --into writes into one that runs');
        const pid = parsePid(opts.into);
        const summary = streamed ? await restoreStreamInto(source, pid, common) : await restoreInto(source, pid, common);
        if (opts.json) printJson(summary);
        else printRollback(summary);
        if ('stream' in summary && !opts.json) onStderr(() => printStream((summary as StreamedSummary).stream));
        return;
      }
      const whole = (dir: string, running?: () => void) => restoreProcess(dir, { ...common, device: opts.device, detach: opts.detach, criu: opts.criu, running });
      const summary = streamed ? await restoreStreamed(source, whole) : await whole(source);
      if ('stream' in summary && !opts.json && !opts.detach) onStderr(() => printStream((summary as StreamedSummary).stream));
      if (opts.json) printJson(summary);
      else if (opts.detach) console.log(summary.pid);
      else printProcessRestore(summary);
      if (!opts.detach) process.exitCode = restoredJobStatus(summary);
    });

  program
    .command('peek')
    .description("read a running process's device memory through a CPU mapping of the GPU's memory, without pausing it")
    .argument('<pid>', 'process ID of an application started with gpuckpt run')
    .argument('<address>', 'device address (0x...), inside one of its allocations')
    .argument('<length>', 'bytes to read (e.g. 64, 4K; at most 1G)')
    .option('--format <f>', `how to show the bytes: ${ELEMENT_FORMATS.join(', ')}`, 'hex')
    .option('--json', 'print JSON on stdout')
    .addHelpText('after', examples(['gpuckpt peek 4242 0x600000000200 64', 'gpuckpt peek 4242 0x600000000200 4K --format f32 --json']))
    .action(async (pidText: string, addrText: string, lengthText: string, opts: { format: string; json?: boolean }) => {
      const format = parseElementFormat(opts.format);
      const r = await peekMemory(parsePid(pidText), parseAddress(addrText), Number(parseSize(lengthText, 'LENGTH')), format);
      if (opts.json) printJson(r);
      else printPeek(r);
    });

  program
    .command('poke')
    .description("write a running process's device memory through a CPU mapping of the GPU's memory, with the process paused for it")
    .argument('<pid>', 'process ID of an application started with gpuckpt run')
    .argument('<address>', 'device address (0x...), inside one of its allocations')
    .argument('<values...>', 'what to write: bytes in hex (--format hex), else one value each')
    .option('--format <f>', `what the values are: ${ELEMENT_FORMATS.join(', ')}`, 'hex')
    .option('--json', 'print JSON on stdout')
    .addHelpText('after', examples(['gpuckpt poke 4242 0x600000000200 deadbeef', 'gpuckpt poke 4242 0x600000000200 1.5 -2 --format f32']))
    .action(async (pidText: string, addrText: string, values: string[], opts: { format: string; json?: boolean }) => {
      const data = encodeElements(values, parseElementFormat(opts.format));
      const r = await pokeMemory(parsePid(pidText), parseAddress(addrText), data);
      if (opts.json) printJson(r);
      else printPoke(r);
    });

  program
    .command('release')
    .description('let snapshots held in GPU memory go (checkpoint --to-gpu); gpuckpt ps lists them')
    .argument('[snapshots...]', 'snapshot names, gpu:ID')
    .option('--pid <pid>', "every snapshot of this process")
    .option('--all', 'every snapshot held')
    .option('--json', 'print a JSON summary on stdout')
    .addHelpText('after', examples(['gpuckpt release gpu:3', 'gpuckpt release --pid 4242', 'gpuckpt release --all']))
    .action(async (names: string[], opts: { pid?: string; all?: boolean; json?: boolean }) => {
      const given = [names.length > 0, opts.pid !== undefined, !!opts.all].filter(Boolean).length;
      if (given !== 1) throw new GpuckptError('BAD_ARGUMENT', 'say what to release: snapshot names (gpu:ID), --pid PID or --all');
      const summary = await releaseGpuSnapshots(names, opts.pid !== undefined ? parsePid(opts.pid) : undefined);
      if (opts.json) printJson(summary);
      else printRelease(summary);
    });

  program
    .command('suspend')
    .description('free the GPU entirely while the process stays alive; its pool is held in host memory (or as an image with --to)')
    .argument('<job>', 'process ID of an application started with gpuckpt run, or of a job\'s launcher (every rank), or a job\'s --name')
    .option('--to <dir>', 'also write the pool as a compressed image to this directory, and hold it there instead of in memory')
    .option('--force', 'replace an existing image at --to')
    .option('--no-keep-driver', 'leave no driver keeper: the resume then pays the CUDA driver\'s cold start (0.3 s) when no other process uses the driver')
    .option('--json', 'print a JSON summary on stdout')
    .addHelpText('after', examples(['gpuckpt suspend 4242', 'gpuckpt suspend 4242 --to /scratch/held', 'gpuckpt suspend ddp   # every rank of the job named ddp']))
    .action(async (pidText: string, opts: { to?: string; force?: boolean; keepDriver: boolean; json?: boolean }) => {
      const s = await suspendJob(parseTarget(pidText), { to: opts.to, force: opts.force, keepDriver: opts.keepDriver, progress: showProgress(opts) });
      if (opts.json) printJson(s);
      else if ('suspended' in s) printJobSuspend(s);
      else printSuspend(s);
    });

  program
    .command('resume')
    .description('bring a suspended process back onto a GPU, pool at identical addresses')
    .argument('<job>', 'process ID of a suspended application, or of a job\'s launcher, or a job\'s --name')
    .option('--device <gpu>', 'GPU to resume on: this host\'s ordinal or a GPU UUID (default: where it was)')
    .option('--json', 'print a JSON summary on stdout')
    .addHelpText('after', examples(['gpuckpt resume 4242', 'gpuckpt resume 4242 --device 1']))
    .action(async (pidText: string, opts: { device?: string; json?: boolean }) => {
      const r = await resumeJob(parseTarget(pidText), { device: opts.device, progress: showProgress(opts) });
      if (opts.json) printJson(r);
      else if ('resumed' in r) printJobResume(r);
      else printResume(r);
    });

  program
    .command('migrate')
    .description('move a running process to another GPU of this host, pointers unchanged')
    .argument('<pid>', 'process ID of an application started with gpuckpt run')
    .option('--to-device <gpu>', "target GPU: this host's ordinal or a GPU UUID (required)")
    .option('--via-host', 'move the pool through host memory even where the GPUs can copy to each other')
    .option('--json', 'print a JSON summary on stdout')
    .addHelpText('after', examples(['gpuckpt migrate 4242 --to-device 1']))
    .action(async (pidText: string, opts: { toDevice?: string; viaHost?: boolean; json?: boolean }) => {
      const m = await migrateProcess(parseTarget(pidText), required(opts.toDevice, '--to-device <gpu>'), { viaHost: opts.viaHost, progress: showProgress(opts) });
      if (opts.json) printJson(m);
      else printMigrate(m);
    });

  program
    .command('inspect')
    .description('show what an image holds and verify every checksum')
    .argument('<image>', 'image directory')
    .option('--json', 'print JSON on stdout')
    .option('--no-verify', 'skip decompressing every frame')
    .addHelpText('after', examples(['gpuckpt inspect /ckpt/step1000', 'gpuckpt inspect snap --json']))
    .action(async (image: string, opts: { json?: boolean; verify: boolean }) => {
      const report = await inspectImage(image, { verify: opts.verify, progress: showProgress(opts) });
      if (opts.json) printJsonText(inspectJson(report));
      else printInspect(report);
      if (report.problem) throw new GpuckptError('IMAGE_DATA_CORRUPT', report.problem);
    });

  program
    .command('demo')
    .description('build a sample CUDA program, checkpoint it live, change it, roll it back, and compare')
    .addHelpText('after', examples(['gpuckpt demo']))
    .action(async () => {
      await runDemo((line) => console.log(`gpuckpt demo: ${line}`));
    });

  program
    .command('completion')
    .description('print a shell completion script')
    .argument('<shell>', 'bash or zsh')
    .addHelpText('after', examples(['eval "$(gpuckpt completion bash)"   # in ~/.bashrc', 'eval "$(gpuckpt completion zsh)"    # in ~/.zshrc']))
    .action((shell: string) => {
      process.stdout.write(completionScript(program, shell));
    });

  // Run by the CRIU plugin (native/criu-plugin/), one step per hook.
  program
    .command('__criu-plugin', { hidden: true })
    .argument('<step>')
    .argument('<pid>')
    .argument('<images>')
    .action(async (step: string, pidText: string, images: string) => {
      if (!(PLUGIN_STEPS as readonly string[]).includes(step)) throw new GpuckptError('BAD_ARGUMENT', `__criu-plugin step "${step}" must be one of ${PLUGIN_STEPS.join(', ')}`);
      process.exitCode = await criuPluginStep(step as PluginStep, parsePid(pidText), images);
    });

  // Used by bin/gpuckpt: prints the sh code that execs `run`'s program.
  program
    .command('__run-plan', { hidden: true })
    .allowUnknownOption()
    .helpOption(false)
    .argument('[args...]')
    .action(() => {
      // The words as given: commander drops the `--` that ends run's own
      // options, and the program's options would then be taken for run's.
      const args = process.argv.slice(process.argv.indexOf('__run-plan') + 1);
      const sub = new Command('run')
        .exitOverride()
        .configureOutput({ writeOut: () => undefined, writeErr: () => undefined })
        .option('--pool-size <size>')
        .option('--pool-base <addr>')
        .option('--name <name>')
        .option('--no-framework-hook')
        .argument('[program...]');
      let parsed: { command: string[]; opts: RunOptions } | undefined;
      sub.action((command: string[], opts) => {
        parsed = { command, opts };
      });
      try {
        sub.parse(args.slice(args[0] === 'run' ? 1 : 0), { from: 'user' });
      } catch {
        // Help or a usage error: print nothing here and let bin/gpuckpt run
        // the real parser, which prints it properly.
        return;
      }
      if (!parsed || parsed.command.length === 0) return;
      process.stdout.write(planAsShell(makeRunPlan(parsed.command, parsed.opts)));
    });

  return program;
}

async function main(): Promise<void> {
  // A reader that went away (gpuckpt --help | head) is not an error of ours.
  // Each worker thread pipes its stdout here with a listener of its own, and
  // a restore's may all have started already (workers-ahead.ts).
  process.stdout.setMaxListeners(0);
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
  });
  // --json anywhere: a failure is a JSON object on stdout too.
  const json = process.argv.includes('--json');
  try {
    checkEnvironment();
    await buildProgram().parseAsync(process.argv);
  } catch (e) {
    if (e instanceof CommanderError) {
      // commander printed what there was to say; its errors are usage errors
      process.exitCode = e.exitCode === 0 ? 0 : EXIT_USAGE;
      if (json && e.exitCode !== 0 && !jsonPrinted) printJson({ error: { code: 'BAD_ARGUMENT', message: e.message.replace(/^error: /, '') } });
      return;
    }
    if (e instanceof GpuckptError) {
      process.stderr.write(`gpuckpt: ${e.message}\n`);
      if (json && !jsonPrinted) printJson({ error: { code: e.code, message: e.message } });
      process.exitCode = exitStatusOf(e);
      return;
    }
    throw e;
  }
}

await main();
// Where the time goes after the command (debug trace): thread pools and handles closing.
log('debug', 'cli', 'command done');
process.once('exit', () => log('debug', 'cli', 'exiting'));
