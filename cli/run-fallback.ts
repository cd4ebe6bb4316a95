/**
 * `run` without the shell entry point's exec (node dist/cli/main.js run):
 * the program runs as a child that inherits stdio; signals are forwarded and
 * its exit status or signal becomes ours. Its PID differs from ours, which
 * is why bin/gpuckpt execs instead.
 */
import { spawn } from 'node:child_process';
import type { RunPlan } from '../controller/verbs/run-plan.js';

export function runWithoutExec(plan: RunPlan): Promise<number> {
  const child = spawn(plan.program, plan.args, { stdio: 'inherit', env: { ...process.env, ...plan.env } });
  const forward = (sig: NodeJS.Signals) => () => child.kill(sig);
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];
  const handlers = signals.map((s) => [s, forward(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  return new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      for (const [s, h] of handlers) process.off(s, h);
      if (signal) {
        process.kill(process.pid, signal);
        resolve(128);
      } else resolve(code ?? 1);
    });
  });
}
