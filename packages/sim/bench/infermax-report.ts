/**
 * InferMax reproduction (`npm run report:infermax`): optimal schedules from the MILP of
 * `optimal-schedule.ts` against the engine model's vLLM-style and Sarathi-style schedulers on the
 * paper's small settings (section 4.5), the value of preemption as the KV cache grows (section
 * 4.4) and the effect of Sarathi's prefill budget P. Writes `reports/infermax-reproduction.md`.
 * Seeded; solve times depend on the machine and are printed, not asserted.
 *
 * `--only section44,sectionP` runs only those sections (see SECTIONS) and prints them instead of
 * writing the report; `--rows 2:1,2:16` runs only those (B, I) rows of section 4.5, `--seeds 2,3`
 * only those seeds of the seeded gaps. The sections without MILP solves print exactly what the
 * report holds, and so does every row whose solves HiGHS proved optimal (less its solve time),
 * whatever the machine: a solve that ends before its time limit takes the same path anywhere
 * (test/reports checks both).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createRng } from '@fairway/core';
import type { EngineConfig } from '@fairway/perf';
import {
  runHeuristic,
  type ScheduleOutcome,
  type ScheduleRequest,
  scheduleLowerBound,
  solveOptimalSchedule,
} from '../src/optimal-schedule.ts';
import { runSections } from './report-sections.ts';

const ROOT = join(import.meta.dirname, '..', '..', '..');
const OUT = join(ROOT, 'reports', 'infermax-reproduction.md');
const A100 = {
  gpu: 'A100-80GB',
  model: 'llama-2-7b',
  blockSize: 1,
  watermark: 0,
  maxNumBatchedTokens: 4096,
} as const;
/** Per-solve HiGHS limit, seconds: a solve it stops is reported as `feasible` with its bound. */
const SOLVE_LIMIT_S = Number(process.env.INFERMAX_SOLVE_LIMIT_S ?? 20);
const SEEDS = [1, 2, 3, 4, 5];
/** Run only these (B, I) rows of section 4.5 (`--rows`) and these seeds of the gaps (`--seeds`). */
let onlyRows: readonly string[] | undefined;
let onlySeeds: readonly number[] | undefined;

/** The paper's schedulers (Table 1) on the engine model. */
const SCHEDULERS: Record<string, Partial<EngineConfig>> = {
  vLLM: { batchPolicy: 'prefill-priority', chunkedPrefill: false },
  'vLLM^ef': { batchPolicy: 'prefill-priority', chunkedPrefill: false, preemption: 'eviction-free' },
  Sarathi: { batchPolicy: 'decode-priority', chunkedPrefill: true, maxNumPrefillTokens: 512 },
  'Sarathi^ef': {
    batchPolicy: 'decode-priority',
    chunkedPrefill: true,
    maxNumPrefillTokens: 512,
    preemption: 'eviction-free',
  },
  'vLLM cost-aware victim': {
    batchPolicy: 'prefill-priority',
    chunkedPrefill: false,
    preemptionVictim: 'cheapest-refill',
  },
};

const lines: string[] = [];
const out = (s = '') => {
  lines.push(s);
  console.log(s);
};
const f1 = (x: number) => x.toFixed(1);
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

function fixed(n: number, I: number, O: number): ScheduleRequest[] {
  return Array.from({ length: n }, (_, i) => ({ id: `r${i}`, inputTokens: I, outputTokens: O }));
}

/** "gap to the best schedule found (≤ gap to the lower bound)"; one number when proven optimal. */
function gapCell(value: number, best: number, bound: number, proven: boolean): string {
  return proven ? pct(value / best - 1) : `${pct(value / best - 1)} (≤ ${pct(value / bound - 1)})`;
}

function heuristicValue(
  requests: readonly ScheduleRequest[],
  engine: EngineConfig,
  name: string,
): number | undefined {
  try {
    return runHeuristic(requests, { ...engine, ...SCHEDULERS[name] }).makespanMs;
  } catch {
    return undefined; // an eviction-free scheduler that cannot reserve input + max_tokens − 1
  }
}

/** One row of the section 4.5 table: the optimum with and without evictions and the heuristics. */
interface Row45 {
  readonly B: number;
  readonly I: number;
  readonly opt: { readonly valueMs: number; readonly status: string; readonly preemptions: number };
  readonly ef: { readonly valueMs: number; readonly status: string } | undefined;
  /** Makespan of each heuristic; undefined when it cannot fit. */
  readonly heuristics: Record<string, number | undefined>;
}

async function section45(): Promise<void> {
  const O = 4;
  const limitB2 = 2 * SOLVE_LIMIT_S;
  const limitB4 = 3 * SOLVE_LIMIT_S;
  out('## Section 4.5: optimal schedules vs the schedulers on the small setting');
  out();
  out(
    `Setting after the paper: O = 4, I from 1 to 1024, M = max(2I, I + O − 1) KV tokens (block size 1, no watermark), C = 4096, llama-2-7b on A100 (the InferMax cost model). B = 2 (HiGHS limit ${limitB2} s per solve) and the paper's B = 4 for the short prompts (limit ${limitB4} s), each with the optimum with and without evictions, and B = 3 (limit ${SOLVE_LIMIT_S} s, with evictions only; where the solver stops at its limit the row says "feasible" and gives its bound). An eviction-free schedule reserves I + O − 1 KV tokens per request: the last token is generated, never fed back. Objective: latency = time to finish all requests (makespan). "optimal" may evict, "optimal^ef" may not; both may chunk prefills and mix them with decodes (the paper's CSP). Gap = scheduler / best schedule − 1; when the solve was stopped by its limit the gap to the lower bound follows in brackets (the true gap to the optimum lies between the two).`,
  );
  out();
  out(
    '| B | I | M | optimal ms (status, evictions) | lower bound ms | optimal^ef ms (status) | evictions save | vLLM | vLLM^ef | Sarathi | Sarathi^ef | solve s |',
  );
  out('|---|---|---|---|---|---|---|---|---|---|---|---|');
  const rows: Row45[] = [];
  const settings = [
    ...[1, 16, 64, 128, 1024].map((I) => ({ B: 2, I, limit: limitB2, ef: true })),
    ...[1, 16, 128, 1024].map((I) => ({ B: 3, I, limit: SOLVE_LIMIT_S, ef: false })),
    ...[1, 16].map((I) => ({ B: 4, I, limit: limitB4, ef: true })),
  ];
  for (const { B, I, limit, ef: solveEf } of settings) {
    if (onlyRows !== undefined && !onlyRows.includes(`${B}:${I}`)) continue;
    const M = Math.max(2 * I, I + O - 1);
    const engine: EngineConfig = { ...A100, kvCapacityTokens: M, chunkedPrefill: true };
    const requests = fixed(B, I, O);
    const opt = await solveOptimalSchedule(requests, { engine, timeLimitS: limit });
    const ef = solveEf
      ? await solveOptimalSchedule(requests, { engine, preemption: false, timeLimitS: limit }).catch(
          () => undefined,
        )
      : undefined;
    const proven = opt.status === 'optimal';
    const heuristics: Record<string, number | undefined> = {};
    for (const name of ['vLLM', 'vLLM^ef', 'Sarathi', 'Sarathi^ef'])
      heuristics[name] = heuristicValue(requests, engine, name);
    rows.push({ B, I, opt, ef, heuristics });
    const cells = Object.values(heuristics).map((v) =>
      v === undefined ? 'cannot fit' : gapCell(v, opt.valueMs, opt.lowerBoundMs, proven),
    );
    const efCell = ef ? `${f1(ef.valueMs)} (${ef.status})` : solveEf ? 'none found' : 'not run';
    const save = ef && ef.status === 'optimal' && proven ? pct(1 - opt.valueMs / ef.valueMs) : '–';
    out(
      `| ${B} | ${I} | ${M} | ${f1(opt.valueMs)} (${opt.status}, ${opt.preemptions}) | ${f1(opt.lowerBoundMs)} | ${efCell} | ${save} | ${cells.join(' | ')} | ${((opt.solveMs + (ef?.solveMs ?? 0)) / 1000).toFixed(1)} |`,
    );
  }
  out();
  claims45(rows);
}

/** Section 4.5's three claims, each judged from the rows measured above. */
function claims45(rows: readonly Row45[]): void {
  const both = rows.filter((r) => r.ef?.status === 'optimal' && r.opt.status === 'optimal');
  const saving = (r: Row45) => 1 - r.opt.valueMs / (r.ef?.valueMs ?? r.opt.valueMs);
  const short = both.filter((r) => r.I < 128);
  const long = rows.filter((r) => r.I >= 128 && r.opt.status === 'optimal');
  const list = (rs: readonly Row45[], f: (r: Row45) => string) =>
    rs.map((r) => `B = ${r.B}, I = ${r.I}: ${f(r)}`).join('; ');
  out("### Section 4.5's claims, as measured here");
  out();
  const evictsShort = short.filter((r) => r.opt.preemptions > 0 && saving(r) > 0);
  const bestSave = Math.max(0, ...short.map(saving));
  out(
    `1. *For I < 128 the optimal schedule evicts short requests and beats the best eviction-free schedule, by up to 35.2 % as I decreases.* ${
      short.length === 0
        ? 'Not applicable: no row with I < 128 was solved to optimality with and without evictions.'
        : `${evictsShort.length === short.length ? 'Reproduced in direction' : evictsShort.length > 0 ? 'Partly reproduced' : 'Not reproduced'}: ${list(short, (r) => `${r.opt.preemptions} evictions, ${pct(saving(r))} faster than optimal^ef`)}; at most ${pct(bestSave)} here against the paper's 35.2 % (this engine model's 9.3 ms batch floor makes short refills nearly free).`
    }`,
  );
  const noEvict = long.filter((r) => r.opt.preemptions === 0);
  // vLLM^ef's makespan against vLLM's where both fit, every row with I ≥ 128 (heuristics need no proof).
  const efGain = rows
    .filter((r) => r.I >= 128)
    .flatMap((r) => {
      const v = r.heuristics.vLLM;
      const e = r.heuristics['vLLM^ef'];
      return v !== undefined && e !== undefined ? [{ r, gain: 1 - e / v }] : [];
    });
  const bestGain = Math.max(0, ...efGain.map((g) => g.gain));
  // "As I grows": for each B, the gain at its largest I is its largest.
  const grows = [...new Set(efGain.map((g) => g.r.B))].every((B) => {
    const ofB = efGain.filter((g) => g.r.B === B);
    const last = ofB[ofB.length - 1];
    return last !== undefined && ofB.every((g) => g.gain <= last.gain);
  });
  const gains = efGain
    .map(
      (g) =>
        `B = ${g.r.B}, I = ${g.r.I}: ${g.gain >= 0 ? `${pct(g.gain)} faster` : `${pct(-g.gain)} slower`}`,
    )
    .join('; ');
  const evictions =
    noEvict.length === long.length
      ? 'The optimum avoids evictions in every proven row'
      : `The optimum still evicts in ${long.length - noEvict.length} of ${long.length} proven rows`;
  const verdict =
    bestGain > 0
      ? `${grows ? 'reproduced' : 'partly reproduced'}, up to ${pct(bestGain)} here against the paper's 27.5 %`
      : 'not reproduced';
  out(
    `2. *For I ≥ 128 the optimal schedule avoids evictions, and eviction-free schedules beat those with evictions by up to 27.5 % as I grows.* ${
      long.length === 0
        ? 'Not applicable: no row with I ≥ 128 was solved to optimality.'
        : `${evictions} (${list(long, (r) => `${r.opt.preemptions} evictions`)}; the best schedules found for I = 1024 evict nothing, unproven). vLLM^ef against vLLM: ${efGain.length === 0 ? 'no row where both fit' : `${gains}: ${verdict}`}.`
    }`,
  );
  const proven = rows.filter((r) => r.opt.status === 'optimal');
  const gapTo = (r: Row45, name: string) => {
    const v = r.heuristics[name];
    return v === undefined ? undefined : v / r.opt.valueMs - 1;
  };
  const vllm = proven.map((r) => gapTo(r, 'vLLM')).filter((x): x is number => x !== undefined);
  // vLLM^ef where the paper says it matches the optimum: I ≥ 128, against the best schedule found.
  const longRows = rows.filter((r) => r.I >= 128);
  const vllmEf = longRows.map((r) => gapTo(r, 'vLLM^ef')).filter((x): x is number => x !== undefined);
  const close = 0.05;
  const holds =
    vllm.length > 0 && Math.max(...vllm) <= close && vllmEf.length > 0 && Math.max(...vllmEf) <= close;
  out(
    `3. *vLLM and its eviction-free version come close to the optimal schedule, with evictions for I < 128 and without for I ≥ 128.* ${
      vllm.length === 0
        ? 'Not applicable: no row was solved to optimality.'
        : `${holds ? 'Reproduced' : 'Not reproduced'} (within ${pct(close)}): vLLM within ${pct(Math.max(...vllm))} of the optimum on the ${vllm.length} rows solved to optimality (median ${pct(median(vllm))}); vLLM^ef within ${pct(Math.max(...vllmEf))} of the best schedule found on the ${vllmEf.length} rows with I ≥ 128 (for I < 128, where the optimum evicts, it is up to ${pct(Math.max(0, ...rows.filter((r) => r.I < 128).map((r) => gapTo(r, 'vLLM^ef') ?? 0)))} slower). The paper's 35.2 % is the optimum with evictions against eviction-free schedules (claim 1), not a gap between vLLM and the optimum.`
    }`,
  );
  out();
}

/** Heterogeneous small instances (the paper's appendix A.3 mix of short and long requests). */
function mixed(seed: number, n: number): ScheduleRequest[] {
  const rng = createRng(seed * 7919 + 13);
  return Array.from({ length: n }, (_, i) => ({
    id: `r${i}`,
    inputTokens: rng.next() < 0.5 ? rng.int(8, 16) : rng.int(256, 512),
    outputTokens: rng.int(2, 4),
  }));
}

async function seededGaps(): Promise<void> {
  const n = 3;
  out('## Gap to optimal over 5 seeds (heterogeneous requests)');
  out();
  out(
    `${n} requests per instance, each short (I 8–16) or long (I 256–512) with equal odds, O 2–4; M = the largest request's peak + 64 tokens, so requests compete for the cache. Value = makespan; gap = scheduler / best schedule − 1, with the gap to the lower bound in brackets when the solve was stopped by its limit.`,
  );
  out();
  out(
    '| seed | requests (I/O) | M | optimal ms (status) | lower bound ms | vLLM | vLLM^ef | Sarathi | Sarathi^ef | vLLM cost-aware victim |',
  );
  out('|---|---|---|---|---|---|---|---|---|---|');
  const gaps: Record<string, number[]> = {};
  const bounds: Record<string, number[]> = {};
  for (const seed of onlySeeds ?? SEEDS) {
    const requests = mixed(seed, n);
    const M = Math.max(...requests.map((r) => r.inputTokens + r.outputTokens)) + 64;
    const engine: EngineConfig = { ...A100, kvCapacityTokens: M, chunkedPrefill: true };
    const opt = await solveOptimalSchedule(requests, { engine, timeLimitS: SOLVE_LIMIT_S });
    const cells: string[] = [];
    for (const [name, cfg] of Object.entries(SCHEDULERS)) {
      let run: ScheduleOutcome;
      try {
        run = runHeuristic(requests, { ...engine, ...cfg });
      } catch {
        cells.push('cannot fit');
        continue;
      }
      const g = run.makespanMs / opt.valueMs - 1;
      gaps[name] = [...(gaps[name] ?? []), g];
      bounds[name] = [...(bounds[name] ?? []), run.makespanMs / opt.lowerBoundMs - 1];
      cells.push(gapCell(run.makespanMs, opt.valueMs, opt.lowerBoundMs, opt.status === 'optimal'));
    }
    out(
      `| ${seed} | ${requests.map((r) => `${r.inputTokens}/${r.outputTokens}`).join(', ')} | ${M} | ${f1(opt.valueMs)} (${opt.status}) | ${f1(opt.lowerBoundMs)} | ${cells.join(' | ')} |`,
    );
  }
  out();
  out('| scheduler | median gap to best found | worst | median gap to lower bound | worst |');
  out('|---|---|---|---|---|');
  for (const [name, g] of Object.entries(gaps)) {
    const b = bounds[name] ?? [];
    out(
      `| ${name} | ${pct(median(g))} | ${pct(Math.max(...g))} | ${pct(median(b))} | ${pct(Math.max(...b))} |`,
    );
  }
  out();
}

/** Offline batch of `n` requests with I and O drawn ±50% around the nominal values. */
function batch(seed: number, n: number, I: number, O: number): ScheduleRequest[] {
  const rng = createRng(seed * 104729 + I * 31 + O);
  return Array.from({ length: n }, (_, i) => ({
    id: `r${i}`,
    inputTokens: Math.max(1, rng.int(Math.ceil(I / 2), Math.floor((3 * I) / 2))),
    outputTokens: Math.max(1, rng.int(Math.ceil(O / 2), Math.floor((3 * O) / 2))),
  }));
}

function tps(requests: readonly ScheduleRequest[], o: ScheduleOutcome): number {
  return requests.reduce((s, r) => s + r.outputTokens, 0) / (o.makespanMs / 1000);
}

function section44(): void {
  const B = 1024;
  const O = 32;
  out('## Section 4.4: the value of preemption as the KV cache grows');
  out();
  out(
    `B = ${B} requests offline, O ≈ ${O}, I ≈ 8 / 32 (each drawn ±50%, 5 seeds), C = 4096; M from 100 to 100K tokens. Ratio = TPS with evictions / TPS eviction-free (the paper: up to 2.2× (vLLM) and 2.3× (Sarathi) at M = 100, 1.2–1.3× at 1K, below 1 (down to 1/1.5) at 10K). Median and worst (lowest) over seeds.`,
  );
  out();
  out(
    '| I | M | vLLM / vLLM^ef median | worst | Sarathi / Sarathi^ef median | worst | vLLM evictions (median) | cost-aware victim / vLLM median |',
  );
  out('|---|---|---|---|---|---|---|---|');
  for (const I of [8, 32]) {
    for (const M of [100, 1000, 10_000, 100_000]) {
      const rv: number[] = [];
      const rs: number[] = [];
      const ev: number[] = [];
      const cv: number[] = [];
      for (const seed of SEEDS) {
        const requests = batch(seed, B, I, O);
        if (requests.some((r) => r.inputTokens + r.outputTokens > M)) continue;
        const engine: EngineConfig = { ...A100, kvCapacityTokens: M };
        const run = (name: string) => runHeuristic(requests, { ...engine, ...SCHEDULERS[name] });
        const v = run('vLLM');
        rv.push(tps(requests, v) / tps(requests, run('vLLM^ef')));
        rs.push(tps(requests, run('Sarathi')) / tps(requests, run('Sarathi^ef')));
        ev.push(v.preemptions);
        cv.push(tps(requests, run('vLLM cost-aware victim')) / tps(requests, v));
      }
      if (rv.length === 0) continue;
      const x = (a: number[]) => `${median(a).toFixed(2)}×`;
      const w = (a: number[]) => `${Math.min(...a).toFixed(2)}×`;
      out(`| ${I} | ${M} | ${x(rv)} | ${w(rv)} | ${x(rs)} | ${w(rs)} | ${median(ev)} | ${x(cv)} |`);
    }
  }
  out();
}

function sectionP(): void {
  const B = 1024;
  out("## Sarathi's prefill budget P");
  out();
  out(
    `Sarathi (decode-priority, chunked prefill) with C = 4096 and P from 128 to C, B = ${B} requests offline, I ≈ 512, O ≈ 32 (±50%, 5 seeds), M = 100K. The paper (sections 4.2, A.1): a smaller P lowers TPOT and raises TTFT and latency; P = C behaves like vLLM. Medians over seeds (worst in brackets).`,
  );
  out();
  out('| P | latency s | mean TTFT s | mean TPOT ms | evictions |');
  out('|---|---|---|---|---|');
  for (const P of [128, 256, 512, 1024, 4096]) {
    const lat: number[] = [];
    const ttft: number[] = [];
    const tpot: number[] = [];
    const ev: number[] = [];
    for (const seed of SEEDS) {
      const requests = batch(seed, B, 512, 32);
      const o = runHeuristic(requests, {
        ...A100,
        kvCapacityTokens: 100_000,
        ...SCHEDULERS.Sarathi,
        maxNumPrefillTokens: P,
      });
      lat.push(o.makespanMs / 1000);
      ttft.push(o.requests.reduce((s, r) => s + r.firstTokenMs, 0) / o.requests.length / 1000);
      tpot.push(
        o.requests.reduce(
          (s, r, i) => s + (r.finishMs - r.firstTokenMs) / Math.max(1, requests[i]!.outputTokens - 1),
          0,
        ) / o.requests.length,
      );
      ev.push(o.preemptions);
    }
    const c = (a: number[], d = 2) => `${median(a).toFixed(d)} (${Math.max(...a).toFixed(d)})`;
    out(`| ${P} | ${c(lat)} | ${c(ttft)} | ${c(tpot, 1)} | ${c(ev, 0)} |`);
  }
  out();
}

async function lowerBounds(): Promise<void> {
  out('## Lower bounds for instances too large to solve');
  out();
  out(
    'For B = 12 requests (I ≈ 64, O ≈ 8, M = 1K; over the solver limit of 8 requests) the exact solver refuses; `scheduleLowerBound` gives the larger of an analytic bound and the LP relaxation of the same MILP. Gap = best heuristic / bound − 1: an upper bound on how far the best heuristic can be from the optimum.',
  );
  out();
  out('| seed | lower bound ms (source) | best heuristic ms | gap ≤ |');
  out('|---|---|---|---|');
  for (const seed of SEEDS.slice(0, 3)) {
    const requests = batch(seed, 12, 64, 8);
    const engine: EngineConfig = { ...A100, kvCapacityTokens: 1000, chunkedPrefill: true };
    const lb = await scheduleLowerBound(requests, { engine, timeLimitS: SOLVE_LIMIT_S });
    out(
      `| ${seed} | ${f1(lb.lowerBoundMs)} (${lb.source}) | ${f1(lb.upperBoundMs)} | ${pct(lb.upperBoundMs / lb.lowerBoundMs - 1)} |`,
    );
  }
  out();
}

/** Sections `--only` can run on their own. */
const SECTIONS: Record<string, () => Promise<void> | void> = {
  section45,
  seededGaps,
  section44,
  sectionP,
  lowerBounds,
};

async function main(): Promise<void> {
  const { values: args } = parseArgs({
    options: { only: { type: 'string' }, rows: { type: 'string' }, seeds: { type: 'string' } },
  });
  onlyRows = args.rows?.split(',');
  onlySeeds = args.seeds?.split(',').map(Number);
  if (args.only !== undefined) {
    await runSections(args.only, SECTIONS);
    return;
  }
  const started = performance.now();
  out('# InferMax reproduction');
  out();
  out(
    "Generated by `npm run report:infermax` (packages/sim/bench/infermax-report.ts). The optimal schedules come from the MILP in `packages/sim/src/optimal-schedule.ts` (InferMax section 3.3, solved with HiGHS); every schedule — optimal or heuristic — is priced by the simulator's engine model (`EngineModel`, the InferMax cost model for llama-2-7b on A100). What the MILP models and simplifies is written at the top of that file and summarised at the end. Measured on a loaded 2-core machine: solve times are indicative only.",
  );
  out();
  out(
    'What the paper reports and where to compare: section 4.5 — the CSP evicts short requests (I < 128) and saves up to 35.2% latency over eviction-free schedules, avoids evictions for I ≥ 128, and vLLM and vLLM^ef come close to the CSP; each claim is judged after the section 4.5 table. Compare with the "evictions save" and gap columns below: the numbers are what this simulator measured, not the paper\'s. Note that in the engine model\'s cost (the InferMax A100 fit) a batch of fewer than about 110 tokens costs the 9.3 ms floor, so short prefills and refills are nearly free and the number of batches decides small instances.',
  );
  out();
  await section45();
  await seededGaps();
  section44();
  sectionP();
  await lowerBounds();
  out('## What the MILP models, and what it simplifies');
  out();
  out(
    "- Modelled from the paper's CSP: per request and batch the computed KV `m`, tokens generated `G`/`g`, evictions `e`, the decode phase `d`, tokens processed (decode 1, or a prefill chunk); constraints (1)–(5): termination, recompute of prompt + output after an eviction, memory zeroed on eviction and grown by what is processed, a decode processes one token, per-batch C, P, M and R_max; the objective is latency (makespan) or total latency; online arrivals as `start of batch ≥ arrival`.",
  );
  out(
    "- Stricter, from the engine model: KV counted in blocks; a prefill holds its whole prompt from the first chunk (vLLM v0); the batch time is the engine's linear cost model exactly (the max of floor and compute line as two lower bounds; chunk² by tangents, exact for whole prompts, within q·(spacing/2)² per chunk when chunking).",
  );
  out(
    '- Simplified: output lengths are known; the number of batches J is bounded by best heuristic / cheapest batch, which keeps the optimum exact unless J is capped (then reported as not exact); the watermark is not applied; eviction-free optimal schedules forbid evictions rather than reserving input + max_tokens − 1 as the eviction-free heuristics do. HiGHS (WebAssembly) replaces Gurobi; a time limit turns "optimal" into "feasible" with a dual bound.',
  );
  out();
  out(`Total run time: ${((performance.now() - started) / 1000).toFixed(0)} s on a loaded 2-core machine.`);
  out();
  writeFileSync(OUT, `${lines.join('\n')}\n`);
  console.error(`wrote ${OUT}`);
}

await main();
