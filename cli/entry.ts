#!/usr/bin/env node
/**
 * bin/gpuckpt's entry point: starts the driver's initialisation where the
 * command needs it (driver-warmup.ts) and a restore's workers
 * (workers-ahead.ts), then loads the CLI, whose static imports would
 * otherwise all load first.
 */
import { warmDriverFor } from './driver-warmup.js';
import { startWorkersFor } from './workers-ahead.js';

warmDriverFor(process.argv[2], process.argv.slice(3));
startWorkersFor(process.argv[2], process.argv.slice(3));
await import('./main.js');
