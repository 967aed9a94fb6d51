/**
 * The scenario file format (JSON or YAML): how long to simulate, the cluster, the tenants, and
 * either synthetic request streams or a trace with a tenant split. Validated with zod; every error
 * names the offending field by path (e.g. `streams[1].arrival.rate`).
 */
import { DEFAULT_SLO_CLASSES, GPUS, MODELS, sloClassSchema } from '@fairway/core';
import { stepNoiseSchema } from '@fairway/perf';
import { z } from 'zod';

const id = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$/, 'must be 1-64 letters, digits, ".", "_", ":", "/" or "-"');
const pos = z.number().positive();
const posInt = z.number().int().positive();
const nonNeg = z.number().nonnegative();

/** A token-length distribution; a bare number means that many tokens, always. */
export const lengthSpecSchema = z.union([
  posInt.transform((value) => ({ kind: 'fixed' as const, value })),
  z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('fixed'), value: posInt }).strict(),
    z
      .object({ kind: z.literal('uniform'), min: posInt, max: posInt })
      .strict()
      .refine((u) => u.max >= u.min, { message: 'max must be ≥ min', path: ['max'] }),
    z
      .object({
        kind: z.literal('lognormal'),
        mean: pos.optional(),
        sigma: pos.optional(),
        median: pos.optional(),
        p90: pos.optional(),
        min: posInt.optional(),
        max: posInt.optional(),
      })
      .strict()
      .superRefine((l, ctx) => {
        const byMean = l.mean !== undefined && l.sigma !== undefined;
        const byMedian = l.median !== undefined && l.p90 !== undefined;
        if (byMean === byMedian)
          ctx.addIssue({ code: 'custom', message: 'give either mean and sigma, or median and p90' });
        if (byMedian && l.p90! <= l.median!)
          ctx.addIssue({ code: 'custom', path: ['p90'], message: 'p90 must be greater than median' });
        if (l.min !== undefined && l.max !== undefined && l.max < l.min)
          ctx.addIssue({ code: 'custom', path: ['max'], message: 'max must be ≥ min' });
      }),
    z
      .object({ kind: z.literal('zipf'), min: posInt.optional(), max: posInt, s: pos })
      .strict()
      .refine((l) => l.max >= (l.min ?? 1), { message: 'max must be ≥ min', path: ['max'] }),
    z
      .object({ kind: z.literal('empirical'), values: z.array(posInt).min(1, 'needs at least one value') })
      .strict(),
    /** Resample a column of a trace (built-in name or CSV path): empirical lengths from real traffic. */
    z
      .object({ kind: z.literal('trace'), trace: z.string().min(1), column: z.enum(['input', 'output']) })
      .strict(),
  ]),
]);

const durationSpecSchema = z.union([
  nonNeg.transform((value) => ({ kind: 'fixed' as const, value })),
  z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('fixed'), value: nonNeg }).strict(),
    z
      .object({ kind: z.literal('uniform'), min: nonNeg, max: nonNeg })
      .strict()
      .refine((u) => u.max >= u.min, { message: 'max must be ≥ min', path: ['max'] }),
    z.object({ kind: z.literal('exponential'), mean: pos }).strict(),
  ]),
]);

const phaseSchema = z
  .object({ durationS: pos, rate: nonNeg.optional(), from: nonNeg.optional(), to: nonNeg.optional() })
  .strict()
  .refine((p) => (p.rate !== undefined) !== (p.from !== undefined && p.to !== undefined), {
    message: 'give either rate, or from and to',
  });

/** Arrival process and rate shape of a stream. */
export const arrivalSchema = z
  .object({
    process: z.enum(['uniform', 'poisson', 'gamma'], {
      message: 'must be one of "uniform", "poisson", "gamma"',
    }),
    rate: pos.optional(),
    cv: pos.optional(),
    ramp: z.object({ from: nonNeg, to: nonNeg }).strict().optional(),
    phases: z.array(phaseSchema).min(1, 'needs at least one phase').optional(),
    onOff: z.object({ onS: pos, offS: pos, offFirst: z.boolean().optional() }).strict().optional(),
  })
  .strict()
  .superRefine((a, ctx) => {
    const shapes = [a.rate, a.ramp, a.phases].filter((x) => x !== undefined).length;
    if (shapes !== 1) ctx.addIssue({ code: 'custom', message: 'give exactly one of rate, ramp or phases' });
    if (a.cv !== undefined && a.process !== 'gamma')
      ctx.addIssue({ code: 'custom', path: ['cv'], message: 'cv applies only to process "gamma"' });
  });

const interactionSchema = z
  .object({
    size: z.union([
      z.literal('fairserve').transform(() => ({ kind: 'fairserve' as const })),
      lengthSpecSchema,
    ]),
    followUp: z
      .discriminatedUnion('mode', [
        z
          .object({
            mode: z.literal('after-expected-completion'),
            thinkS: durationSpecSchema.optional(),
            ttftS: nonNeg.optional(),
            tpotS: nonNeg.optional(),
          })
          .strict(),
        z.object({ mode: z.literal('fixed-gap'), gapS: nonNeg }).strict(),
        z.object({ mode: z.literal('after-completion'), thinkS: durationSpecSchema.optional() }).strict(),
      ])
      .optional(),
  })
  .strict();

/** One synthetic request stream. */
export const streamSchema = z
  .object({
    tenant: id,
    name: id.optional(),
    app: id.optional(),
    users: posInt.optional(),
    sloClass: id.optional(),
    model: z.string().min(1).optional(),
    arrival: arrivalSchema,
    input: lengthSpecSchema,
    output: lengthSpecSchema,
    maxTokens: z.union([posInt, z.literal('output')]).optional(),
    systemTokens: z.number().int().nonnegative().optional(),
    startS: nonNeg.optional(),
    endS: pos.optional(),
    interaction: interactionSchema.optional(),
    prefix: z
      .object({
        sharedTokens: z.number().int().nonnegative().optional(),
        sharedPrefix: id.optional(),
        conversation: z.boolean().optional(),
        blockSize: posInt.optional(),
        maxContextTokens: posInt.optional(),
      })
      .strict()
      .optional(),
  })
  .strict()
  .refine((s) => s.endS === undefined || s.endS > (s.startS ?? 0), {
    message: 'endS must be after startS',
    path: ['endS'],
  });

const gpuNames = Object.keys(GPUS);
const modelNames = Object.keys(MODELS);

/** Engine options a scenario may set (see `EngineConfig`). */
export const engineOptionsSchema = z
  .object({
    blockSize: posInt.optional(),
    watermark: z.number().min(0).max(1).optional(),
    maxNumSeqs: posInt.optional(),
    maxNumBatchedTokens: posInt.optional(),
    batchPolicy: z.enum(['prefill-priority', 'decode-priority']).optional(),
    chunkedPrefill: z.boolean().optional(),
    preemption: z.enum(['recompute', 'eviction-free']).optional(),
    maxNumPrefillTokens: posInt.optional(),
    preemptionVictim: z.enum(['newest', 'cheapest-refill']).optional(),
    priorityScheduling: z.boolean().optional(),
    /** vLLM's `--enable-prefix-caching`: requests with block hashes (stream `prefix`) share KV blocks. */
    enablePrefixCaching: z.boolean().optional(),
    /** Step-time jitter, e.g. `{ distribution: lognormal }` (CV 0.10, vLLM's measured decode jitter). */
    stepNoise: stepNoiseSchema.optional(),
    /** S-LoRA's admission cadence: admit every k decode steps with a future-peak KV check (0: off). */
    admitEverySteps: z.number().int().min(0).optional(),
  })
  .strict();

/** A group of identical engines. */
export const engineGroupSchema = z
  .object({
    gpu: z.string().refine((g) => gpuNames.includes(g), { message: `must be one of ${gpuNames.join(', ')}` }),
    model: z
      .string()
      .refine((m) => modelNames.includes(m), { message: `must be one of ${modelNames.join(', ')}` }),
    tp: posInt.default(1),
    count: posInt.default(1),
    kvCapacityTokens: posInt.optional(),
    options: engineOptionsSchema.optional(),
  })
  .strict();

const tenantSchema = z
  .object({
    id,
    weight: pos.default(1),
    app: id.optional(),
    /** FairServe's user priority factor E (the tenant's requests are its user's): service counts E times. */
    priority: pos.optional(),
  })
  .strict();

/** A trace-driven workload. */
export const traceSourceSchema = z
  .object({
    /** `azure-conv`, `azure-code`, or a CSV path (relative to the scenario file). */
    name: z.string().min(1),
    /** Seeded Zipf split over N tenants; left out, the trace's own `tenant` column names them. */
    split: z
      .object({ tenants: posInt.max(1000), zipfS: nonNeg.default(1), seed: z.number().int().optional() })
      .strict()
      .optional(),
    /** `output`: each request's `max_tokens` is its true output length (the VTC artifact's client). */
    maxTokens: z.literal('output').optional(),
    rateScale: pos.default(1),
    startS: nonNeg.default(0),
    sloClass: id.optional(),
  })
  .strict();

/** A whole scenario file. */
export const scenarioSchema = z
  .object({
    name: id.optional(),
    description: z.string().optional(),
    durationS: pos,
    seed: z.number().int().default(1),
    cluster: z.object({ engines: z.array(engineGroupSchema).min(1, 'needs at least one engine') }).strict(),
    tenants: z.array(tenantSchema).optional(),
    streams: z.array(streamSchema).min(1, 'needs at least one stream').optional(),
    trace: traceSourceSchema.optional(),
    /**
     * SLO classes the run's requests belong to, with their TTFT targets: attainment is scored
     * against them and SLO-aware policies plan with them. @default QLM's three classes
     */
    sloClasses: z.array(sloClassSchema).min(1, 'needs at least one class').optional(),
    /**
     * Prefix-cache affinity of the gateways (`off`, `bounded`, `unbounded`; see the gateway's
     * `prefixAffinity`): requests with shared prefixes go back to the replica that served them.
     * @default 'off'
     */
    prefixAffinity: z.enum(['off', 'bounded', 'unbounded']).optional(),
    /** Load bound of `bounded` affinity, × the pool's mean reserved KV tokens. @default 1.25 */
    affinityLoadFactor: z.number().min(1).optional(),
    /** Least bound of `bounded` affinity, × the pool's mean KV capacity. @default 0.05 */
    affinityFloor: z.number().min(0).max(1).optional(),
    /**
     * Affinity by the engines' KV cache events (`runSimulation`'s `kvEvents`): a request goes to
     * the replica holding the longest run of its prompt's blocks and is charged for them as cached.
     * With `prefixAffinity` other than `off`. @default false
     */
    kvEvents: z.boolean().optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    const classes = (s.sloClasses ?? DEFAULT_SLO_CLASSES).map((c) => c.name);
    const classSeen = new Set<string>();
    s.sloClasses?.forEach((c, i) => {
      if (classSeen.has(c.name))
        ctx.addIssue({
          code: 'custom',
          path: ['sloClasses', i, 'name'],
          message: `duplicate SLO class "${c.name}"`,
        });
      classSeen.add(c.name);
    });
    // A stream or trace without a class sends 'interactive' requests.
    const unknownClass = (name: string | undefined, path: (string | number)[]) => {
      if (!classes.includes(name ?? 'interactive'))
        ctx.addIssue({
          code: 'custom',
          path,
          message: `unknown SLO class "${name ?? 'interactive'}"${name === undefined ? ' (the default)' : ''}; ${s.sloClasses ? 'declared in "sloClasses"' : 'known (no "sloClasses" given)'}: ${classes.join(', ')}`,
        });
    };
    s.streams?.forEach((st, i) => {
      unknownClass(st.sloClass, ['streams', i, 'sloClass']);
    });
    if (s.trace) unknownClass(s.trace.sloClass, ['trace', 'sloClass']);
    if ((s.streams === undefined) === (s.trace === undefined))
      ctx.addIssue({ code: 'custom', message: 'give exactly one of "streams" or "trace"' });
    const seen = new Set<string>();
    (s.tenants ?? []).forEach((t, i) => {
      if (seen.has(t.id))
        ctx.addIssue({ code: 'custom', path: ['tenants', i, 'id'], message: `duplicate tenant "${t.id}"` });
      seen.add(t.id);
    });
    if (s.tenants && s.streams)
      s.streams.forEach((st, i) => {
        if (!seen.has(st.tenant))
          ctx.addIssue({
            code: 'custom',
            path: ['streams', i, 'tenant'],
            message: `unknown tenant "${st.tenant}" (not in "tenants")`,
          });
      });
    const models = new Set(s.cluster.engines.map((e) => e.model));
    s.streams?.forEach((st, i) => {
      if (st.model !== undefined && !models.has(st.model))
        ctx.addIssue({
          code: 'custom',
          path: ['streams', i, 'model'],
          message: `no engine in the cluster serves "${st.model}"`,
        });
      if (st.startS !== undefined && st.startS >= s.durationS)
        ctx.addIssue({
          code: 'custom',
          path: ['streams', i, 'startS'],
          message: `starts at or after the end of the run (${s.durationS} s)`,
        });
      // Hashes made for another block size would never match an engine's blocks.
      const hashed = st.prefix?.blockSize ?? 16;
      const sizes = new Set(s.cluster.engines.map((e) => e.options?.blockSize ?? 16));
      if (st.prefix && [...sizes].some((b) => b !== hashed))
        ctx.addIssue({
          code: 'custom',
          path: ['streams', i, 'prefix', 'blockSize'],
          message: `is ${hashed}, the engines' block size is ${[...sizes].join(', ')}`,
        });
    });
  });

/** A scenario as written (input to the schema). */
export type ScenarioInput = z.input<typeof scenarioSchema>;
/** A validated scenario with defaults applied. */
export type Scenario = z.infer<typeof scenarioSchema>;
