/**
 * `npm run chaos`: each fault in turn on a fresh real fleet under streaming load, one table row
 * per fault. Flags: --faults a,b (default all: engine-kill, engine-pause, dispatcher-kill,
 * nats-restart, nats-freeze, redis-restart-aof, redis-restart-none), --rate <req/s>, --pre-s, --post-s,
 * --pause-s, --nats-down-s, --redis-down-s, --timeout-s (client), --fresh (a new fleet per fault
 * instead of one fleet restored between faults), --separate-agents (`fairway agent` beside each
 * engine instead of the agent inside engine-sim), --out <file> (the markdown table), --json (JSON
 * on stdout instead of the table), --records <file> (every request, one JSON line each),
 * --repeat <n> (the fault list n times in a row, e.g. `--faults nats-restart --repeat 20`),
 * --log-dir <dir> (each dispatcher's whole output at `info`, one request per line by the
 * `x-request-id` a record names, appended to <dir>/d<n>.log).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { FAULT_NAMES, FAULTS, type FaultName } from './support/chaos-faults.ts';
import { ChaosFleet } from './support/chaos-fleet.ts';
import { DEFAULT_EXPERIMENT, markdownTable, runChaos } from './support/chaos-run.ts';

const { values } = parseArgs({
  options: {
    faults: { type: 'string', default: FAULT_NAMES.join(',') },
    rate: { type: 'string', default: String(DEFAULT_EXPERIMENT.rate) },
    'pre-s': { type: 'string', default: String(DEFAULT_EXPERIMENT.preMs / 1000) },
    'post-s': { type: 'string', default: String(DEFAULT_EXPERIMENT.postMs / 1000) },
    'pause-s': { type: 'string', default: String(DEFAULT_EXPERIMENT.timing.pauseMs / 1000) },
    'nats-down-s': { type: 'string', default: String(DEFAULT_EXPERIMENT.timing.natsDownMs / 1000) },
    'redis-down-s': { type: 'string', default: String(DEFAULT_EXPERIMENT.timing.redisDownMs / 1000) },
    'timeout-s': { type: 'string', default: String(DEFAULT_EXPERIMENT.clientTimeoutMs / 1000) },
    out: { type: 'string' },
    records: { type: 'string' },
    json: { type: 'boolean', default: false },
    fresh: { type: 'boolean', default: false },
    'separate-agents': { type: 'boolean', default: false },
    repeat: { type: 'string', default: '1' },
    'log-dir': { type: 'string' },
  },
});

function positive(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name}: must be a positive number, got "${v}"`);
  return n;
}

const listed = values.faults.split(',').map((f) => f.trim());
const faults = Array.from({ length: positive('repeat', values.repeat) }, () => listed).flat();
const logDir = values['log-dir'];
if (logDir !== undefined) mkdirSync(logDir, { recursive: true });
for (const f of faults)
  if (!(FAULT_NAMES as readonly string[]).includes(f))
    throw new Error(`--faults: unknown fault "${f}" (known: ${FAULT_NAMES.join(', ')})`);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`chaos: ${signal}, stopping every process of the fleet`);
    void ChaosFleet.closeAll().finally(() => process.exit(130));
  });
}

const started = performance.now();
const results = await runChaos(
  faults.map((f) => FAULTS[f as FaultName]),
  {
    fresh: values.fresh,
    rate: positive('rate', values.rate),
    preMs: positive('pre-s', values['pre-s']) * 1000,
    postMs: positive('post-s', values['post-s']) * 1000,
    clientTimeoutMs: positive('timeout-s', values['timeout-s']) * 1000,
    timing: {
      pauseMs: positive('pause-s', values['pause-s']) * 1000,
      natsDownMs: positive('nats-down-s', values['nats-down-s']) * 1000,
      redisDownMs: positive('redis-down-s', values['redis-down-s']) * 1000,
    },
    fleet: {
      agents: values['separate-agents'] ? 'separate' : 'embedded',
      ...(logDir === undefined ? {} : { logDir, dispatcherLogLevel: 'info' as const }),
    },
    log: (line) => console.error(`chaos: ${line}`),
  },
  (r) => console.error(`chaos: ${markdownTable([r]).split('\n')[2]}`),
);
const table = markdownTable(results);
console.error(`chaos: ${results.length} faults in ${((performance.now() - started) / 1000).toFixed(0)} s`);
if (values.out !== undefined) writeFileSync(values.out, `${table}\n`);
if (values.records !== undefined)
  writeFileSync(
    values.records,
    results.flatMap((r) => r.records.map((x) => JSON.stringify({ fault: r.fault, ...x }))).join('\n'),
  );
const summaries = results.map(({ records: _, ...summary }) => summary);
console.log(values.json ? JSON.stringify(summaries, null, 2) : table);
