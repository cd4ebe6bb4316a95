/**
 * BENCH_TRACE=1 with $OUT set: where a benchmark's commands spent their
 * time. Each traced command's debug log, and CRIU's own logs, go to $OUT.
 */
import fs from 'node:fs';
import path from 'node:path';

/** $OUT when BENCH_TRACE=1 asks for traces there, else undefined. */
function traceDir() {
  return process.env.BENCH_TRACE === '1' && process.env.OUT ? process.env.OUT : undefined;
}

/**
 * h.cliJson (env: more of the command's environment), and with
 * BENCH_TRACE=1 the command's debug trace (each line stamped with the
 * seconds since it started) kept in $OUT/trace-<name>.log.
 */
export async function traced(h, args, name, env = {}) {
  const dir = traceDir();
  if (!dir) return h.cliJson(args, 600_000, env);
  return h.cliJson(args, 600_000, { ...env, GPUCKPT_LOG: 'debug' }, { stderrTo: path.join(dir, `trace-${name}.log`) });
}

/** A log kept in $OUT as name, when BENCH_TRACE=1 and the log exists. */
function keep(log, name) {
  const dir = traceDir();
  if (dir && log && fs.existsSync(log)) fs.copyFileSync(log, path.join(dir, name));
}

/** BENCH_TRACE=1: CRIU's own log (-v3 unless GPUCKPT_CRIU_VERBOSITY says, each line stamped) beside the command's trace, as $OUT/criu-<name>.log. */
export function keepCriuLog(log, name) {
  keep(log, `criu-${name}.log`);
}

/** The restore log the controller kept at debug (controller/adapters/criu.ts), named in its trace. */
export function keptRestoreLog(name) {
  const dir = traceDir();
  if (!dir) return undefined;
  const trace = fs.readFileSync(path.join(dir, `trace-${name}.log`), 'utf8');
  return /restore log kept at (\S+)/.exec(trace)?.[1];
}

/** BENCH_TRACE=1: the application's environment for its shim to log at debug. */
export function appTraceEnv() {
  return traceDir() ? { GPUCKPT_LOG: 'debug' } : {};
}

/** BENCH_TRACE=1: the application's log (its shim's debug lines), as $OUT/trace-<name>-app.log. */
export function keepAppLog(log, name) {
  keep(log, `trace-${name}-app.log`);
}
