import type { PlanInstance, QueuePlan } from './plan-instance.ts';

/** A MILP in CPLEX LP text and what is needed to read a plan back out of its solution. */
export interface MilpModel {
  readonly lp: string;
  readonly binaries: number;
  readonly rows: number;
  /** Reads the queue plan from the solver's column values; undefined if they are not a plan. */
  decode(values: (name: string) => number | undefined): QueuePlan | undefined;
  /**
   * The assignment columns of `plan` as a MIP start (1 where a group sits, 0 elsewhere); empty
   * when the plan does not fit the model (a queue longer than its positions, a forbidden pair).
   */
  start(plan: QueuePlan): Map<string, number>;
}

/**
 * Groups that follow the decided positions of one queue in a fixed order (the rolling-horizon
 * MILP decides only the heads of the queues; see `solveGlobalSchedule`'s `headPositions`). Their
 * start is the end of the queue's head, plus a drain and load when the head ends on another model
 * than the tail's first, plus their fixed offset inside the tail.
 */
export interface MilpTail {
  /** Index of the queue in `instance.queues`. */
  readonly queue: number;
  /** Model of the tail's first group. */
  readonly firstModel: string;
  readonly groups: readonly {
    /** Penalty per second late (as `PlanGroup.weight`). */
    readonly weight: number;
    readonly size: number;
    /** Lateness offset on this queue (as `PlanInstance.lateOffsetS`). */
    readonly offsetS: number;
    /** Start after the head's end: services and swaps of the tail groups before it, s. */
    readonly afterHeadS: number;
  }[];
}

/** Options of {@link buildMilp}. */
export interface MilpBuildOptions {
  /**
   * Most positions a virtual queue may hold (QLM's maximum queue length L). Fewer positions make a
   * smaller model; too few can make it infeasible (the scheduler then falls back to EDF).
   * @default ceil(2·groups / queues) + 1, at most the number of groups
   */
  readonly maxPositions?: number | undefined;
  /** Fixed groups after the decided positions of some queues (rolling horizon). @default none */
  readonly tails?: readonly MilpTail[] | undefined;
}

function num(v: number): string {
  // LP format has no "Infinity"; callers never pass non-finite numbers, and round-off noise is dropped.
  const r = Math.abs(v) < 1e-12 ? 0 : v;
  return Number(r.toPrecision(12)).toString();
}

class LpWriter {
  readonly lines: string[] = [];
  rows = 0;

  /** Writes `name: Σ coef·var op rhs`, breaking long expressions over lines. */
  row(name: string, terms: readonly (readonly [number, string])[], op: '<=' | '>=' | '=', rhs: number): void {
    this.rows++;
    this.lines.push(` ${name}: ${expr(terms)} ${op} ${num(rhs)}`);
  }
}

function expr(terms: readonly (readonly [number, string])[]): string {
  const parts: string[] = [];
  for (const [i, [coef, v]] of terms.entries()) {
    if (coef === 0) continue;
    const sign = coef < 0 ? '-' : '+';
    const mag = Math.abs(coef);
    const body = mag === 1 ? v : `${num(mag)} ${v}`;
    parts.push(i === 0 && sign === '+' ? body : `${sign} ${body}`);
    if (parts.length % 8 === 0) parts.push('\n  ');
  }
  const text = parts.join(' ').trim();
  return text.length === 0 ? '0 zero' : text;
}

/**
 * QLM's global-scheduler MILP (section 7), linearised. Binary `x[i,g,j]` puts group i at position j
 * of virtual queue g (Eq. 6, with positions filled from the front); `s[g,j,m]` marks a swap to model
 * m at that position (Eq. 9); the start time of each position accumulates the service times of the
 * groups before it plus drain-and-load time of every swap (Eq. 10) — kept linear by summing
 * `service·x` per position instead of the paper's product of completion time and swap indicator.
 * Each group's start `w[i]` and lateness `l[i] ≥ w[i] + offset − deadline` follow by big-M, and the
 * objective is the weighted lateness (the paper's penalty `wt − slo`, Eqs. 11–13, counted only when
 * positive so an unavoidable violation degrades the plan instead of making it infeasible) plus a
 * small weight on size-weighted start times.
 */
export function buildMilp(instance: PlanInstance, options: MilpBuildOptions = {}): MilpModel {
  const { groups, queues } = instance;
  const G = groups.length;
  const Q = queues.length;
  const defaultPositions = Math.min(G, Math.ceil((2 * G) / Math.max(Q, 1)) + 1);
  const maxPositions = Math.max(1, Math.min(G, options.maxPositions ?? defaultPositions));

  // Which (group, queue) pairs are allowed, and how many positions each queue needs.
  const allowed: boolean[][] = groups.map((group, i) =>
    queues.map((queue, q) => {
      const service = (instance.serviceS[i] as readonly number[])[q] as number;
      if (!Number.isFinite(service)) return false;
      if (group.pinnedQueue !== undefined && group.pinnedQueue !== queue.id) return false;
      return group.model === queue.currentModel || queue.swapS[group.model] !== undefined;
    }),
  );
  const positions = queues.map((_, q) => {
    const n = groups.filter((_, i) => (allowed[i] as boolean[])[q]).length;
    return Math.min(n, maxPositions);
  });
  const x = (i: number, q: number, j: number) => `x${i}_${q}_${j}`;
  const t = (q: number, j: number) => `t${q}_${j}`;
  const w = (i: number) => `w${i}`;
  const l = (i: number) => `l${i}`;
  const canSit = (i: number, q: number, j: number) =>
    (allowed[i] as boolean[])[q] === true &&
    j < (positions[q] as number) &&
    (!groups[i]?.pinnedFirst || j === 0);

  const models = [...new Set(groups.map((g) => g.model))];
  const swapVar = (q: number, j: number, m: number) => `s${q}_${j}_${m}`;
  // Swap variables exist where a swap can happen: to a model other than the loaded one at the head,
  // and between positions when the queue may hold groups of two or more models.
  const queueModels = queues.map((_, q) =>
    models.filter((_, m) => groups.some((g, i) => g.model === models[m] && (allowed[i] as boolean[])[q])),
  );
  const swapAt = (q: number, j: number): number[] => {
    const here = queueModels[q] as string[];
    const cur = (queues[q] as PlanInstance['queues'][number]).currentModel;
    const out: number[] = [];
    for (const model of here) {
      if (j === 0 ? model !== cur : here.length > 1) out.push(models.indexOf(model));
    }
    return out;
  };

  // Horizon for big-M: everything run back to back on the slowest queue, every group swapping.
  let horizon = 0;
  let maxLoad = 0;
  for (const queue of queues) {
    horizon = Math.max(horizon, queue.readyS + queue.firstDrainS);
    for (const v of Object.values(queue.swapS))
      maxLoad = Math.max(maxLoad, v + Math.max(queue.drainS, queue.firstDrainS));
  }
  let maxOffset = 0;
  for (let i = 0; i < G; i++) {
    let worst = 0;
    for (let q = 0; q < Q; q++) {
      if (!(allowed[i] as boolean[])[q]) continue;
      worst = Math.max(worst, (instance.serviceS[i] as readonly number[])[q] as number);
      maxOffset = Math.max(maxOffset, (instance.lateOffsetS[i] as readonly number[])[q] as number);
    }
    horizon += worst;
  }
  horizon += (G + 1) * maxLoad;
  const bigM = horizon + Math.max(0, maxOffset) + 1;
  // Tighter big-M for the start rows: an upper bound on the start of position j of queue q (ready
  // time, the j longest services it could hold, and a swap before every position).
  const startBound = queues.map((queue, q) => {
    const services = groups
      .map((_, i) =>
        (allowed[i] as boolean[])[q] ? ((instance.serviceS[i] as readonly number[])[q] as number) : 0,
      )
      .sort((a, b) => b - a);
    let load = 0;
    for (const v of Object.values(queue.swapS))
      load = Math.max(load, v + Math.max(queue.drainS, queue.firstDrainS));
    const bounds: number[] = [];
    let acc = queue.readyS;
    for (let j = 0; j < (positions[q] as number); j++) {
      acc += load;
      bounds.push(acc + 1);
      acc += services[j] ?? 0;
    }
    return bounds;
  });

  const lp = new LpWriter();
  const objective: [number, string][] = [];
  for (const [i, g] of groups.entries()) {
    if (g.weight > 0) objective.push([g.weight, l(i)]);
    if (instance.waitWeight > 0) objective.push([instance.waitWeight * g.size, w(i)]);
  }

  for (let i = 0; i < G; i++) {
    const terms: [number, string][] = [];
    for (let q = 0; q < Q; q++)
      for (let j = 0; j < (positions[q] as number); j++) if (canSit(i, q, j)) terms.push([1, x(i, q, j)]);
    lp.row(`assign${i}`, terms, '=', 1);
  }
  const binaries: string[] = [];
  const swaps: string[] = [];
  for (let q = 0; q < Q; q++) {
    const queue = queues[q] as PlanInstance['queues'][number];
    const at = (j: number) => {
      const terms: [number, string][] = [];
      for (let i = 0; i < G; i++) if (canSit(i, q, j)) terms.push([1, x(i, q, j)]);
      return terms;
    };
    for (let j = 0; j < (positions[q] as number); j++) {
      const here = at(j);
      for (const [, v] of here) binaries.push(v);
      lp.row(`cap${q}_${j}`, here, '<=', 1);
      if (j > 0)
        lp.row(
          `fill${q}_${j}`,
          [...here, ...at(j - 1).map(([c, v]) => [-c, v] as [number, string])],
          '<=',
          0,
        );
      const swapTerms: [number, string][] = [];
      for (const m of swapAt(q, j)) {
        const model = models[m] as string;
        const s = swapVar(q, j, m);
        swaps.push(s);
        const inModel = (jj: number): [number, string][] =>
          groups.flatMap((g, i) =>
            g.model === model && canSit(i, q, jj) ? [[1, x(i, q, jj)] as [number, string]] : [],
          );
        const prev = j === 0 ? [] : inModel(j - 1).map(([c, v]) => [c, v] as [number, string]);
        lp.row(
          `swap${q}_${j}_${m}`,
          [[1, s], ...inModel(j).map(([c, v]) => [-c, v] as [number, string]), ...prev],
          '>=',
          0,
        );
        swapTerms.push([-((j === 0 ? queue.firstDrainS : queue.drainS) + (queue.swapS[model] ?? 0)), s]);
      }
      if (j === 0) {
        lp.row(`time${q}_0`, [[1, t(q, 0)], ...swapTerms], '=', queue.readyS);
      } else {
        const service: [number, string][] = [];
        for (let i = 0; i < G; i++) {
          if (canSit(i, q, j - 1))
            service.push([-((instance.serviceS[i] as readonly number[])[q] as number), x(i, q, j - 1)]);
        }
        lp.row(`time${q}_${j}`, [[1, t(q, j)], [-1, t(q, j - 1)], ...service, ...swapTerms], '=', 0);
      }
      for (let i = 0; i < G; i++) {
        if (!canSit(i, q, j)) continue;
        // w_i ≥ t_qj − M·(1 − x_iqj)
        lp.row(
          `start${i}_${q}_${j}`,
          [
            [1, w(i)],
            [-1, t(q, j)],
            [-((startBound[q] as number[])[j] as number), x(i, q, j)],
          ],
          '>=',
          -((startBound[q] as number[])[j] as number),
        );
      }
    }
    for (let i = 0; i < G; i++) {
      if (!(allowed[i] as boolean[])[q]) continue;
      const onQueue: [number, string][] = [];
      for (let j = 0; j < (positions[q] as number); j++)
        if (canSit(i, q, j)) onQueue.push([-bigM, x(i, q, j)]);
      if (onQueue.length === 0) continue;
      // l_i ≥ w_i + offset_iq − M·(1 − Σ_j x_iqj)
      const offset = (instance.lateOffsetS[i] as readonly number[])[q] as number;
      lp.row(`late${i}_${q}`, [[1, l(i)], [-1, w(i)], ...onQueue], '>=', offset - bigM);
    }
  }

  // Tails: each queue's fixed remainder starts when its head ends (te), after a boundary swap
  // (bs, drain + load) when the last head group's model differs from the tail's first.
  const tailVars: string[] = [];
  for (const tail of options.tails ?? []) {
    const q = tail.queue;
    const queue = queues[q] as PlanInstance['queues'][number];
    const P = positions[q] as number;
    const te = `te${q}`;
    const bs = `bs${q}`;
    tailVars.push(bs);
    if (P === 0) lp.row(`tend${q}`, [[1, te]], '=', queue.readyS);
    else {
      const service: [number, string][] = [];
      for (let i = 0; i < G; i++)
        if (canSit(i, q, P - 1))
          service.push([-((instance.serviceS[i] as readonly number[])[q] as number), x(i, q, P - 1)]);
      lp.row(`tend${q}`, [[1, te], [-1, t(q, P - 1)], ...service], '=', 0);
    }
    for (let j = 0; j < P; j++) {
      const terms: [number, string][] = [[1, bs]];
      for (let i = 0; i < G; i++) {
        if (canSit(i, q, j) && groups[i]?.model !== tail.firstModel) terms.push([-1, x(i, q, j)]);
        if (j + 1 < P && canSit(i, q, j + 1)) terms.push([1, x(i, q, j + 1)]);
      }
      lp.row(`tbs${q}_${j}`, terms, '>=', 0);
    }
    if (queue.currentModel !== tail.firstModel) {
      const empty: [number, string][] = [[1, bs]];
      for (let i = 0; i < G; i++) if (P > 0 && canSit(i, q, 0)) empty.push([1, x(i, q, 0)]);
      lp.row(`tbe${q}`, empty, '>=', 1);
    }
    const boundary = queue.drainS + (queue.swapS[tail.firstModel] ?? 0);
    let waitCoef = 0;
    for (const [k, g] of tail.groups.entries()) {
      waitCoef += instance.waitWeight * g.size;
      if (g.weight <= 0) continue;
      const l = `tl${q}_${k}`;
      // tl ≥ te + boundary·bs + afterHead + offset (and tl ≥ 0 by its bound)
      lp.row(
        `tlate${q}_${k}`,
        [
          [1, l],
          [-1, te],
          [-boundary, bs],
        ],
        '>=',
        g.afterHeadS + g.offsetS,
      );
      objective.push([g.weight, l]);
    }
    if (waitCoef > 0) objective.push([waitCoef, te], [waitCoef * boundary, bs]);
  }

  // Symmetry breaking: consecutive groups of one kind keep their order on any queue they share,
  // i.e. Σ_j j·x[a,q,j] − Σ_j j·x[b,q,j] + L·Σ_j x[b,q,j] ≤ L.
  const lastOfKind = new Map<string, number>();
  for (let b = 0; b < G; b++) {
    const kind = groups[b]?.orderKey;
    if (kind === undefined) continue;
    const a = lastOfKind.get(kind);
    lastOfKind.set(kind, b);
    if (a === undefined) continue;
    for (let q = 0; q < Q; q++) {
      const L = positions[q] as number;
      const terms: [number, string][] = [];
      for (let j = 0; j < L; j++) {
        if (canSit(a, q, j) && j > 0) terms.push([j, x(a, q, j)]);
        if (canSit(b, q, j)) terms.push([L - j, x(b, q, j)]);
      }
      if (terms.length > 0) lp.row(`kind${a}_${b}_${q}`, terms, '<=', L);
    }
  }

  const text = [
    'Minimize',
    ` obj: ${expr(objective)}`,
    'Subject To',
    ...lp.lines,
    'Bounds',
    ...swaps.map((s) => ` 0 <= ${s} <= 1`),
    ...tailVars.map((v) => ` 0 <= ${v} <= 1`),
    ' zero = 0',
    'Binary',
    ...chunk(binaries, 10).map((c) => ` ${c.join(' ')}`),
    'End',
    '',
  ].join('\n');

  return {
    lp: text,
    binaries: binaries.length,
    rows: lp.rows,
    start(plan) {
      const at = new Map<string, [number, number]>();
      for (const [q, queue] of queues.entries()) {
        for (const [j, id] of (plan[queue.id] ?? []).entries()) at.set(id, [q, j]);
      }
      const values = new Map<string, number>();
      for (let i = 0; i < G; i++) {
        const where = at.get((groups[i] as PlanInstance['groups'][number]).id);
        if (!where || !canSit(i, where[0], where[1])) return new Map();
        for (let q = 0; q < Q; q++) {
          for (let j = 0; j < (positions[q] as number); j++) {
            if (canSit(i, q, j)) values.set(x(i, q, j), where[0] === q && where[1] === j ? 1 : 0);
          }
        }
      }
      return values;
    },
    decode(values) {
      const plan: Record<string, { id: string; j: number }[]> = Object.fromEntries(
        queues.map((qq) => [qq.id, []]),
      );
      for (let i = 0; i < G; i++) {
        let placed = false;
        for (let q = 0; q < Q && !placed; q++) {
          for (let j = 0; j < (positions[q] as number); j++) {
            if (!canSit(i, q, j)) continue;
            const v = values(x(i, q, j));
            if (v !== undefined && v > 0.5) {
              (plan[(queues[q] as PlanInstance['queues'][number]).id] as { id: string; j: number }[]).push({
                id: (groups[i] as PlanInstance['groups'][number]).id,
                j,
              });
              placed = true;
              break;
            }
          }
        }
        if (!placed) return undefined;
      }
      return Object.fromEntries(
        Object.entries(plan).map(([k, v]) => [k, v.sort((a, b) => a.j - b.j).map((e) => e.id)]),
      );
    },
  };
}

function chunk<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
