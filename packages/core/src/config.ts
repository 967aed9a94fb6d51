import { createHash } from 'node:crypto';
import { z } from 'zod';
import { DEFAULT_SLO_CLASSES } from './domain.ts';
import { RESTRICTED_ENGINE_FIELDS } from './engine-fields.ts';
import { parseWith, readStructuredFile } from './validate.ts';

/**
 * Ids of tenants, apps, pools, engines and SLO classes: a safe alphabet without "/" (see
 * `tenantUserId`), usable in store keys, metric labels and logs without escaping.
 */
export const configIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/, 'must be 1-64 letters, digits, ".", "_", ":" or "-"');
const id = configIdSchema;

/** `sha256:<hex>` of an API key, the only form in which keys are stored and compared. */
export function hashApiKey(key: string): string {
  return `sha256:${createHash('sha256').update(key, 'utf8').digest('hex')}`;
}
const positive = z.number().positive();
const nonNegInt = z.number().int().nonnegative();

/** A browser origin as CORS names it: `scheme://host[:port]`, nothing after. */
const corsOrigin = z.string().refine(
  (o) => {
    try {
      return new URL(o).origin === o;
    } catch {
      return false;
    }
  },
  { message: 'must be an origin: scheme://host[:port], without a path or trailing slash' },
);

/** Per-tenant (or per-user / per-app) limits. RPM/TPM are exact across dispatchers. */
export const limitsSchema = z
  .object({
    /** Requests per minute (sliding 60 s window). */
    rpm: nonNegInt.optional(),
    /**
     * Tokens per minute: the prompt estimate plus the output cap (the predicted output under
     * `FAIRWAY_RESERVE=predicted`) reserved at admission, trued up to the engine's usage at completion.
     */
    tpm: nonNegInt.optional(),
    /** Requests this tenant may have queued at the gateway at once. */
    maxQueued: nonNegInt.optional(),
  })
  .strict();

/**
 * Budgets over UTC calendar windows (usage accounting and quotas): tokens (input + output) and
 * spend (at `pricing`'s prices) per day and per month. A request reserves its estimated tokens
 * (prompt + output cap) or their cost at admission, atomically with the rate limits, and settles
 * with its true usage; one that does not fit is refused with 429 `insufficient_quota`.
 */
export const quotasSchema = z
  .object({
    /** Input + output tokens per UTC day. */
    tokensPerDay: nonNegInt.optional(),
    /** Input + output tokens per UTC month. */
    tokensPerMonth: nonNegInt.optional(),
    /** Cost per UTC day, in the prices' currency (`pricing`). */
    spendPerDay: z.number().nonnegative().optional(),
    /** Cost per UTC month, in the prices' currency (`pricing`). */
    spendPerMonth: z.number().nonnegative().optional(),
    /** Fraction of a budget at which one alert per window is published and logged. @default 0.8 */
    alertAt: z.number().gt(0).max(1).optional(),
  })
  .strict();

/** Prices of one model, per 1M tokens, in one currency (usage cost and spend budgets). */
export const modelPriceSchema = z
  .object({
    /** Price per 1M input (prompt) tokens. */
    input: z.number().nonnegative(),
    /** Price per 1M output (completion) tokens. */
    output: z.number().nonnegative(),
  })
  .strict();

/** An API key (stored as a SHA-256 hash) that authenticates as a tenant. */
export const apiKeySchema = z
  .object({
    /** `sha256:<hex>` of the key; plain keys are accepted only via `key` for demos. */
    hash: z
      .string()
      .regex(/^sha256:[0-9a-f]{64}$/, 'must be "sha256:" followed by 64 hex digits')
      .optional(),
    /** Plain key (demo configs only); hashed at load time and never kept. */
    key: z.string().min(8, 'must be at least 8 characters').optional(),
    /** App the key is bound to: its requests run as that app, and `x-fairway-app` may not name another. */
    app: id.optional(),
    /** SLO class of this key's requests; else its tenant's. */
    sloClass: id.optional(),
    /**
     * Classes this key may also choose per request with `x-fairway-slo-class`, besides any class
     * of a lower priority (a higher band) than its own, which every key may choose. @default none
     */
    sloClasses: z.array(id).max(32).optional(),
    /**
     * Restricted engine fields (`RESTRICTED_ENGINE_FIELDS`: e.g. `chat_template`, `request_id`,
     * `kv_transfer_params`) this key may send; others get 403. @default the tenant's, else none
     */
    engineFields: z.array(z.string().min(1).max(64)).max(32).optional(),
    /** Budgets of this key alone (its tenant's apply as well). */
    quotas: quotasSchema.optional(),
  })
  .strict()
  .refine((k) => (k.hash === undefined) !== (k.key === undefined), {
    message: 'give exactly one of "hash" or "key"',
  });

/**
 * One tenant's share of the Files and Batch API's storage (Redis): what its files may hold, how
 * many batches it may run at once, how long a file lives and how fast it may upload. Every field
 * left out takes the fleet's value from the top-level `storage`.
 */
export const tenantStorageSchema = z
  .object({
    /** Bytes all of the tenant's files (uploads and batch outputs) may hold together. */
    maxBytes: nonNegInt.optional(),
    /** Files the tenant may hold at once (uploads and batch outputs). */
    maxFiles: nonNegInt.optional(),
    /** Batches the tenant may have open (not yet completed, failed, expired or cancelled) at once. */
    maxOpenBatches: nonNegInt.optional(),
    /** Days a file lives unless its upload asks for less (`expires_after`); then it is deleted. */
    fileRetentionDays: positive.optional(),
    /**
     * Uploads per minute (sliding 60 s window). The tenant's `limits.rpm`, when lower, caps it:
     * an upload is a request too, counted in a window of its own.
     */
    uploadsPerMinute: nonNegInt.optional(),
  })
  .strict();

/** A tenant: the unit of fairness, limits and budgets, and the owner of API keys. */
export const tenantSchema = z
  .object({
    /** The tenant's id, used in metrics, logs and admin commands. */
    id,
    /** Share weight under weighted VTC: a tenant of weight 2 gets twice the service of one of weight 1. @default 1 */
    weight: positive.default(1),
    /** The tenant's limits; unset ones take `defaultLimits`. */
    limits: limitsSchema.default({}),
    /** The tenant's API keys. */
    keys: z.array(apiKeySchema).default([]),
    /** Budgets of the tenant (all its keys together); none means `defaultQuotas` apply. */
    quotas: quotasSchema.optional(),
    /** Default SLO class for this tenant's requests. */
    sloClass: id.optional(),
    /** Classes every key of this tenant may also choose per request (see the key's `sloClasses`). */
    sloClasses: z.array(id).max(32).optional(),
    /** Restricted engine fields every key of this tenant may send (see the key's `engineFields`). */
    engineFields: z.array(z.string().min(1).max(64)).max(32).optional(),
    /**
     * Browser origins this tenant's keys may be called from when `server.cors` is enabled, besides
     * the fleet's `server.cors.origins`. @default none
     */
    corsOrigins: z.array(corsOrigin).max(64).optional(),
    /**
     * FairServe's user priority factor E of this tenant's end users (`x-fairway-user`), under
     * `policy.ordering: wsc`: a user's service counts E times, so a user with E < 1 is served
     * ahead of others. Users not listed have E = 1. @default none
     */
    userPriority: z.record(id, positive).optional(),
    /** The tenant's own Files and Batch storage limits; each one left out is the fleet's (`storage`). */
    storage: tenantStorageSchema.optional(),
  })
  .strict();

const stageSchema = z
  .object({
    /** Expected prompt tokens of the stage's call. */
    input: nonNegInt,
    /** Expected system-prompt tokens of the stage's call. @default 0 */
    system: nonNegInt.default(0),
    /** Expected output tokens of the stage's call. */
    output: nonNegInt,
  })
  .strict();

/** An application (FairServe): its expected tokens per interaction stage and its own limits. */
export const appSchema = z
  .object({
    /** The app's id, as keys bind it and `x-fairway-app` names it. */
    id,
    /** Expected tokens per interaction stage (FairServe WSC normalisation). */
    stages: z.array(stageSchema).min(1, 'an app needs at least one stage'),
    /** The app's limits (all its users together), applied always. */
    limits: limitsSchema.default({}),
    /**
     * Requests per minute all the app's users together may send while the pool is overloaded
     * (FairServe OIT; apps differ by orders of magnitude). @default `policy.oitLimits.appRpm`
     */
    oitRpm: nonNegInt.optional(),
  })
  .strict();

/** An SLO class (QLM): a latency target and a priority band. See `SloClass`. */
export const sloClassSchema = z
  .object({
    /** The class's name, as keys, tenants and `x-fairway-slo-class` name it. */
    name: id,
    /** Time-to-first-token target, seconds. */
    ttftS: positive,
    /** Average token generation time target (Aladdin's ATGT), seconds per output token. @default none */
    atgtS: positive.optional(),
    /** Strict priority band; lower bands are served first. */
    band: nonNegInt,
    /** Whether requests of this class may be evicted or shed under pressure. @default false */
    sheddable: z.boolean().default(false),
    /** See `SloClass.queueDeadlineS`, seconds. @default the dispatcher's queue timeout */
    queueDeadlineS: positive.optional(),
  })
  .strict();

/**
 * An engine known from the config: `fairway up` starts an agent for each (unless `--engine-url`
 * names others), and placement reads its GPU and TP. Engines of `fairway serve` register
 * themselves through their agents.
 */
export const engineSchema = z
  .object({
    /** The replica id its agent registers. */
    id,
    /** Base URL of the engine's OpenAI-compatible API. */
    url: z.url({ message: 'must be an http(s) URL' }),
    /** The pool it serves in (one of `pools[].id`). */
    pool: id,
    /** GPU preset, e.g. `A100-80GB` (performance models are matched on it). @default none */
    gpu: z.string().optional(),
    /** Tensor-parallel degree. @default 1 */
    tp: z.number().int().positive().default(1),
  })
  .strict();

/**
 * How long fairway waits on a pool's engines before it takes a replica for hung: the request is
 * retried on another replica when nothing reached its client yet (else its stream ends with an
 * error event), and the replica is held out of placement fleet-wide until its `/health` answers
 * again. Enforced with about one second of granularity. An engine that stops answering
 * altogether (its replica's heartbeats stop and two health checks in a row go unanswered) has its
 * requests with nothing sent moved sooner, whatever these limits; streams under way keep
 * `streamIdleMs`. One that answers but whose counters show no progress for `streamIdleMs` with
 * requests on it is held out and has those requests moved too.
 */
export const engineTimeoutsSchema = z
  .object({
    /** Longest wait for a streamed answer's response headers (vLLM sends them on accepting the request), ms. @default 30000 */
    firstByteMs: positive.default(30_000),
    /** Longest silence in a streamed answer, before its first chunk or between two, ms. @default 30000 */
    streamIdleMs: positive.default(30_000),
    /** Longest wait for a non-streamed answer (vLLM answers it whole, at the end), ms. @default 600000 */
    answerMs: positive.default(600_000),
  })
  .strict()
  .default({ firstByteMs: 30_000, streamIdleMs: 30_000, answerMs: 600_000 });

/** A pool's engine timeouts (`pools[].engineTimeouts`), ms. */
export type EngineTimeoutsConfig = z.infer<typeof engineTimeoutsSchema>;

/** The engine timeouts of a pool the config does not name (replicas that registered themselves). */
export const DEFAULT_ENGINE_TIMEOUTS: EngineTimeoutsConfig = engineTimeoutsSchema.parse(undefined);

/** A pool: the replicas that serve one model, with one queue per SLO band. */
export const poolSchema = z
  .object({
    /** The pool's id (agents register replicas into it with `--pool`). */
    id,
    /** The model name clients send (vLLM's served model name). */
    model: z.string().min(1),
    /**
     * The pool's engines run `--scheduling-policy priority`: fairway sets each request's vLLM
     * `priority` to its SLO class's band (lower runs first). Off, no priority is sent (vLLM refuses
     * a non-zero one under its default FCFS policy). @default false
     */
    enginePriority: z.boolean().default(false),
    /** See {@link engineTimeoutsSchema}. */
    engineTimeouts: engineTimeoutsSchema,
    /** Requests that may wait at the gateway for this pool before new ones get 429. */
    maxQueued: nonNegInt.default(10_000),
    /**
     * Most choices (`n`) one request may ask for; a request reserves and is charged output for
     * every choice, so this bounds what one request can hold. @default 8
     */
    maxChoices: z.number().int().min(1).max(128).default(8),
    /**
     * Output tokens (per choice) a request without `max_tokens` / `max_completion_tokens` reserves
     * on its replica and against token limits, instead of the whole output cap the engine is told
     * (the dispatcher's `defaultMaxTokens`): its answer is not cut, its reservation grows as it
     * streams past this, and it is settled at its true usage. Under a token budget the engine cap
     * is what the budget still holds. @default 256
     */
    reserveOutputTokens: z.number().int().positive().default(256),
    /**
     * Prefix-cache affinity: a request whose prompt starts like an earlier one of its tenant goes
     * to the replica that served it (its KV blocks are likely still cached there, so its prefill
     * is mostly skipped). `bounded` only while that replica holds at most
     * `policy.prefixAffinity.loadFactor` × the pool's mean reserved KV tokens, so fairness and
     * load balance hold; `unbounded` whenever it has room (affinity only: one hot prefix can pile
     * onto one replica); `off` places by `policy.placement` alone. vLLM caches prefixes by
     * default (V1), so the default suits a vLLM fleet; set `off` for engines without prefix
     * caching. @default 'bounded'
     */
    prefixAffinity: z.enum(['off', 'bounded', 'unbounded']).default('bounded'),
    /**
     * The pool model's tokenizer: admission, token limits and engine reservations count prompts
     * with it (over an approximate chat template) instead of the estimate. Nothing is downloaded.
     * @default none: the estimate
     */
    tokenizer: z
      .object({
        /** Local path of the model's Hugging Face `tokenizer.json` (relative to the working directory). */
        path: z.string().min(1),
        /**
         * Prompts estimated above this many tokens are counted by the estimate instead (tokenizing
         * in JavaScript costs about 5 µs per character on the request path). @default 2048
         */
        maxPromptTokens: z.number().int().positive().default(2048),
      })
      .strict()
      .optional(),
    /**
     * Placement by the engines' KV cache events: the pool's engines run vLLM with
     * `--kv-events-config` (publisher `zmq`), `--prefix-caching-hash-algo sha256_cbor` and
     * `PYTHONHASHSEED` set to `hashSeed`, and each agent relays its engine's events
     * (`fairway agent --kv-events-endpoint`). Every dispatcher then knows which KV blocks each
     * replica holds; a request's prompt is tokenized by one of the pool's engines (vLLM's
     * `/tokenize`, one extra call before admission), hashed as vLLM hashes it, and placed on the
     * replica holding the longest run of its blocks (within `prefixAffinity`'s load bound), its
     * prompt charged for the tokens held there as cached. Needs `prefixAffinity` other than `off`.
     * @default none: placement by the prefix index alone
     */
    kvEvents: z
      .object({
        /** The engines' `PYTHONHASHSEED`, which seeds vLLM's block hashes. */
        hashSeed: z.string().min(1),
        /**
         * How long the engine's `/tokenize` may take, ms; a request not tokenized in time is
         * placed by the prefix index alone. @default 250
         */
        tokenizeTimeoutMs: z.number().int().positive().max(10_000).default(250),
        /**
         * Most leading blocks of a prompt hashed and looked up (hashing costs the dispatcher 3–5 µs
         * per block, in slices of 128 blocks between which other requests run). @default 2048
         */
        maxBlocks: z.number().int().positive().max(4096).default(2048),
      })
      .strict()
      .optional(),
  })
  .strict();

/**
 * The SLO-class control plane of `policy.ordering: edf | qlm` (QLM's global scheduler serving live
 * traffic): one dispatcher, the holder of a lease in the store, plans every `intervalMs` from the
 * reports all dispatchers publish, and every dispatcher routes by its plan.
 */
export const controlConfigSchema = z
  .object({
    /** How often dispatchers report what they hold and the leader plans, ms. @default 500 */
    intervalMs: positive.default(500),
    /** Leader lease in the store; a new leader takes over within it when one dies, ms. @default 3000 */
    leaseMs: positive.default(3000),
    /** Reports older than this many intervals are dropped from the leader's view. @default 4 */
    staleIntervals: z.number().int().min(1).default(4),
    /**
     * Most queued requests one report carries, earliest admitted first (about 130 bytes each: a
     * report must stay under NATS's 1 MB default payload). @default 4000
     */
    maxReportedQueued: z.number().int().positive().default(4000),
    /** QLM serving operations; turning one off is QLM's ablation. @default all on */
    pull: z.boolean().default(true),
    /** QLM's eviction of lower-band running requests. @default true */
    evict: z.boolean().default(true),
    /** QLM's load balancing across replicas. @default true */
    loadBalance: z.boolean().default(true),
    /** QLM's model swap (see `swappable`). @default true */
    swap: z.boolean().default(true),
    /**
     * Under `ordering: qlm`: each SLO class's queue is split by prompt length (the request groups'
     * buckets: up to 256, 1,024 and 4,096 tokens, and longer), so the plan's order of a class's
     * groups and their assignment to replicas are carried out, not only its order of classes. Each
     * bucket is then its own fair queue: tenants share a class fairly within a bucket. @default false
     */
    groupBands: z.boolean().default(false),
    /** Output-length prior (tokens) of a request group with too little history. @default 256 ± 256 */
    outputMean: positive.default(256),
    /** Standard deviation of that prior, tokens. @default 256 */
    outputStd: z.number().nonnegative().default(256),
    /** Mean prompt length the estimator profiles assume before any history, tokens. @default 512 */
    inputMean: positive.default(512),
    /**
     * Cost preset (sim `costModelPreset`) used when a replica's (model, gpu) has none: engines
     * report their served-model name, which need not name a preset. @default llama-2-7b on A100-80GB
     */
    profileModel: z.string().min(1).default('llama-2-7b'),
    /** GPU of that fallback preset. @default 'A100-80GB' */
    profileGpu: z.string().min(1).default('A100-80GB'),
    /** Engines run this many times faster than the preset (engine-sim `--speed`). @default 1 */
    speedup: positive.default(1),
    /**
     * QLM's global scheduler solves its MILP (HiGHS, loaded when a dispatcher first leads) at most
     * every `milpIntervalMs`, within `milpMaxNodes` branch-and-bound nodes and `milpTimeLimitS`;
     * off, it plans with EDF improved by local search (milliseconds). The solve runs on the leader's
     * event loop, so the time limit bounds the pause its own requests see. @default false
     */
    milp: z.boolean().default(false),
    /** Least time between two MILP solves, ms. @default 10000 */
    milpIntervalMs: positive.default(10_000),
    /** Branch-and-bound nodes one solve may explore. @default 50 */
    milpMaxNodes: z.number().int().positive().default(50),
    /** Time limit of one solve, seconds. @default 0.2 */
    milpTimeLimitS: positive.default(0.2),
    /** Models every replica may swap to (multi-model pools); none keeps each replica's model. @default [] */
    swappable: z.array(z.string().min(1)).default([]),
  })
  .strict();

/**
 * Aladdin's desired-replicas signal for one pool (`n = ceil(k·r + c)`, fitted by `fairway plan`):
 * the control leader publishes it on the bus and as the `fairway_desired_replicas` gauge.
 */
export const scalingConfigSchema = z
  .object({
    /** The pool the signal is for. */
    pool: id,
    /** Replicas per request/s. */
    k: z.number().nonnegative(),
    /** Constant term of `n = ceil(k·r + c)`, replicas. */
    c: z.number(),
    /** Arrival-rate window, seconds. @default 60 */
    windowS: positive.default(60),
    /** Fewest replicas the signal asks for. @default 1 */
    minReplicas: nonNegInt.default(1),
    /** Most replicas the signal asks for. @default none */
    maxReplicas: z.number().int().positive().optional(),
  })
  .strict();

/** How requests are ordered, placed, charged, throttled and timed out. */
export const policyConfigSchema = z
  .object({
    /**
     * Order of service: `fcfs`; `rpm` (FCFS, with the tenants' RPM limits); `lcf` (VTC without the
     * counter lift); `vtc` (weighted VTC); `vtc-predict` (VTC charging predicted output at
     * dispatch); `wsc` (FairServe's weighted service counter, needs `apps`); `edf` (earliest
     * deadline first over the SLO classes); `qlm` (VTC inside each class's band, QLM's global
     * scheduler across bands). `vtc-oracle` needs true output lengths and runs only in the
     * simulator. @default 'vtc'
     */
    ordering: z
      .enum(['fcfs', 'rpm', 'lcf', 'vtc', 'vtc-predict', 'vtc-oracle', 'wsc', 'edf', 'qlm'])
      .default('vtc'),
    /**
     * Which replica a request runs on: `round-robin`; `jsq` (fewest requests on the replica);
     * `least-kv` (smallest fraction of its KV cache reserved or in use); `power-of-two` (of two
     * sampled replicas, the one with the shorter queue); `aladdin` (fullest replica first where
     * the request fits: by the future KV demand of the requests every dispatcher reports running
     * there, and under performance models by the SLO targets, see `performanceModels`).
     * @default 'least-kv'
     */
    placement: z.enum(['round-robin', 'jsq', 'least-kv', 'power-of-two', 'aladdin']).default('least-kv'),
    /** The cost of serving a request, which fairness counters grow by. */
    cost: z
      .object({
        /**
         * `linear` (`wIn·n_in + wOut·n_out`) or `profiled` (VTC's quadratic fit for Llama-2-7B
         * on A10G). @default 'linear'
         */
        fn: z.enum(['linear', 'profiled']).default('linear'),
        /** Weight of an input token under `linear`. @default 1 */
        wIn: positive.default(1),
        /** Weight of an output token under `linear`. @default 2 */
        wOut: positive.default(2),
      })
      .strict()
      .default({ fn: 'linear', wIn: 1, wOut: 2 }),
    /**
     * Weight (0–1) of a prompt token the engine served from its prefix cache, relative to one it
     * prefilled, in the fairness counters of `vtc`, `vtc-predict`, `lcf`, `qlm` and `wsc`. The
     * engine's usage (`prompt_tokens_details.cached_tokens`) says how many a request had; usage
     * records still count every prompt token. @default for each pool, its engines' relative cost
     * from their performance-model preset (model, `gpu`, `tp`; the largest if they differ), else 0.1
     */
    cachedTokenWeight: z.number().min(0).max(1).optional(),
    /** Overload- and interaction-driven throttling (FairServe OIT). */
    oit: z.boolean().default(false),
    /**
     * OIT's limits: requests per minute while the pool is overloaded, outside an open
     * interaction. An app's own `oitRpm` replaces `appRpm` for it.
     */
    oitLimits: z
      .object({
        /** Requests per minute one end user (`x-fairway-user`) may send while overloaded. @default 60 */
        userRpm: nonNegInt.default(60),
        /** Requests per minute one app's users together may send while overloaded. @default 600 */
        appRpm: nonNegInt.default(600),
      })
      .strict()
      .default({ userRpm: 60, appRpm: 600 }),
    /** KV usage (0–1) above which a pool counts as overloaded for OIT. @default 0.9 */
    overloadKv: z.number().min(0).max(1).default(0.9),
    /** Prefix-cache affinity of the pools that use it (`pools[].prefixAffinity`). */
    prefixAffinity: z
      .object({
        /**
         * Under `bounded`: most KV tokens a replica may hold reserved, as a multiple of its pool's
         * mean, and still take a request by affinity. @default 1.25
         */
        loadFactor: z.number().min(1).default(1.25),
        /**
         * Under `bounded`: the bound is never below this fraction of a replica's KV capacity (the
         * pool's mean), so a lightly loaded fleet keeps its affinity. @default 0.05
         */
        floor: z.number().min(0).max(1).default(0.05),
        /**
         * How long a dispatcher trusts where a prefix was sent, seconds: engines evict cached
         * blocks as other prompts need the room. @default 300
         */
        ttlS: positive.default(300),
        /**
         * Most prefix keys each dispatcher remembers per tenant and pool (up to 8 per request; a
         * follow-up turn adds one or two new ones), about 160 bytes each; a tenant's least recently
         * used go first. @default 2048
         */
        entriesPerTenant: z.number().int().positive().default(2048),
        /**
         * Most (tenant, pool) pairs each dispatcher remembers prefixes of; the least recently used
         * pair goes first. With `entriesPerTenant` it bounds the index: 42 MB at the defaults.
         * @default 128
         */
        maxTenants: z.number().int().positive().default(128),
      })
      .strict()
      .default({ loadFactor: 1.25, floor: 0.05, ttlS: 300, entriesPerTenant: 2048, maxTenants: 128 }),
    /**
     * Requests taken out of an engine's queue (Aladdin's re-balancing, section 4.3, where an engine
     * queue allows it): a request the dispatcher streams from its engine that has had no output
     * token `afterS` after its dispatch, while its engine reports requests waiting, is moved —
     * nothing has reached its client yet — to the first replica in placement order whose engine
     * queues nothing and that has room for it: its engine call is aborted and it is placed again
     * there, ahead of its flow's other requests. A request moves at most twice.
     */
    moves: z
      .object({
        /** Move queued requests. @default true under `placement: aladdin`, else false */
        enabled: z.boolean().optional(),
        /**
         * Seconds a request may go without its first output token, after its dispatch, before it
         * counts as waiting in its engine's queue (longer than a prefill takes). @default 1
         */
        afterS: positive.default(1),
      })
      .strict()
      .default({ afterS: 1 }),
    /** How often streamed output tokens are charged to the store, ms. @default 50 */
    chargeFlushMs: positive.default(50),
    /** Gateway queue timeout, seconds. @default 300 */
    queueTimeoutS: positive.default(300),
    /** Control plane of `ordering: edf | qlm` (and of `scaling`). */
    control: controlConfigSchema.default(controlConfigSchema.parse({})),
    /** Desired-replicas signals per pool. @default none */
    scaling: z.array(scalingConfigSchema).default([]),
    /**
     * Performance-model files written by `fairway profile` (paths relative to the working
     * directory), one per (model, GPU, TP). `placement: aladdin` bounds each replica whose model,
     * GPU and TP match one by its SLO constraints; other replicas keep KV and sequence capacity.
     * A replica's GPU and TP are what its agent registers (`fairway agent --gpu A100-80GB --tp 2`;
     * `fairway engine-sim` registers those it simulates), else its `engines` entry's.
     * @default none
     */
    performanceModels: z.array(z.string().min(1)).default([]),
    /** Targets `placement: aladdin` places for (with `performanceModels`). @default none */
    slo: z
      .object({
        /**
         * Average token generation time, seconds per output token after the first: a replica is
         * given no more sequences and context than keep its decode iterations within it.
         */
        atgtS: positive,
        /**
         * Time to first token, seconds from arrival (Aladdin constraint c): a replica takes a
         * request only if that request's prefill, after the prompts already placed there, ends
         * within what is left of it — unless no replica can, then the one where it ends soonest.
         * @default none
         */
        ttftS: positive.optional(),
      })
      .strict()
      .optional(),
  })
  .strict();

/**
 * How a dispatcher's listeners are run: the operator port (metrics and health apart from the
 * public API) and the limits that keep slow or numerous clients from holding connections.
 */
/**
 * Cross-origin requests from browsers (CORS) to the public API. Off, a browser page on another
 * origin cannot call fairway (its preflight is refused). On, a page whose origin is listed here,
 * or by the tenant of the API key it sends (`tenants[].corsOrigins`), may.
 */
export const corsConfigSchema = z
  .object({
    /** Answer CORS preflights and send `Access-Control-*` headers. @default false */
    enabled: z.boolean().default(false),
    /** Origins every key may be called from; `*` for any origin. @default none */
    origins: z
      .array(z.union([z.literal('*'), corsOrigin]))
      .max(256)
      .default([]),
    /** How long a browser may cache a preflight's answer, seconds. @default 600 */
    maxAgeS: z.number().int().min(0).max(86_400).default(600),
  })
  .strict();

export const serverConfigSchema = z
  .object({
    /**
     * Port of the operator listener (`/metrics`, `/health`, `/ready`); 0 disables it. The public
     * API port never serves `/metrics`. Flag `--operator-port` and env `FAIRWAY_OPERATOR_PORT` win.
     * @default 9464
     */
    operatorPort: z.number().int().min(0).max(65535).default(9464),
    /** Interface the operator listener binds. @default '127.0.0.1' */
    operatorHost: z.string().min(1).default('127.0.0.1'),
    /** When set, `/metrics` requires `Authorization: Bearer <token>`. @default none */
    metricsToken: z.string().min(16, 'must be at least 16 characters').optional(),
    /** Most connections the API listener holds at once; more are closed on accept. @default 10000 */
    maxConnections: z.number().int().positive().default(10_000),
    /**
     * Most connections one client address may hold at once; more are closed on accept, so one
     * host's slow or idle sockets cannot take the whole `maxConnections`. Off by default: behind a
     * load balancer or NAT every client shares an address. @default none
     */
    maxConnectionsPerIp: z.number().int().positive().optional(),
    /**
     * Time a client has to send a whole request (headers and body), seconds; then 408 and the
     * connection is closed. Streaming responses are not limited by it. @default 30
     */
    requestTimeoutS: positive.default(30),
    /** Time a client has to send its request headers, seconds (≤ `requestTimeoutS`). @default 10 */
    headersTimeoutS: positive.default(10),
    /** See {@link corsConfigSchema}. @default off */
    cors: corsConfigSchema.default({ enabled: false, origins: [], maxAgeS: 600 }),
  })
  .strict()
  .refine((s) => s.headersTimeoutS <= s.requestTimeoutS, {
    message: 'headersTimeoutS must not exceed requestTimeoutS',
    path: ['headersTimeoutS'],
  });

/** What the gateway's Prometheus metrics may reveal. */
export const metricsConfigSchema = z
  .object({
    /**
     * Tenant label values: `plain` (the tenant id), `hashed` (a short HMAC of the id keyed by
     * `labelKey`, stable across the deployment's dispatchers, unreadable without the key) or `none`
     * (every tenant reported as one, empty label). @default 'plain'
     */
    tenantLabels: z.enum(['plain', 'hashed', 'none']).default('plain'),
    /** Key of the `hashed` labels; required for `hashed`. */
    labelKey: z.string().min(16, 'must be at least 16 characters').optional(),
  })
  .strict()
  .refine((m) => m.tenantLabels !== 'hashed' || m.labelKey !== undefined, {
    message: 'tenantLabels "hashed" needs labelKey (the same on every dispatcher)',
    path: ['labelKey'],
  });

const path = z.string().min(1, 'must not be empty');

/**
 * How a process proves who it is to NATS (one mechanism at most; the server's config decides which
 * it accepts). Secrets are better given by environment (`NATS_PASSWORD`, `NATS_TOKEN`) or files than
 * written in a config file.
 */
export const natsAuthConfigSchema = z
  .object({
    /** User name (with `password`), as in the server's `authorization.users`. */
    user: z.string().min(1).optional(),
    /** Password of `user` (better given as `NATS_PASSWORD`). */
    password: z.string().min(1).optional(),
    /** A shared token (`authorization.token`). */
    token: z.string().min(1).optional(),
    /** File holding an NKey user seed (`SU…`), for `nkey:` users. */
    nkeySeedFile: path.optional(),
    /** A `.creds` file (user JWT and seed) for operator/JWT-mode servers. */
    credsFile: path.optional(),
  })
  .strict()
  .superRefine((a, ctx) => {
    if (a.password !== undefined && a.user === undefined)
      ctx.addIssue({ code: 'custom', path: ['user'], message: 'give "user" with "password"' });
    const given = [
      a.user !== undefined ? 'user' : undefined,
      a.token !== undefined ? 'token' : undefined,
      a.nkeySeedFile !== undefined ? 'nkeySeedFile' : undefined,
      a.credsFile !== undefined ? 'credsFile' : undefined,
    ].filter((x) => x !== undefined);
    if (given.length > 1)
      ctx.addIssue({ code: 'custom', path: [], message: `give one of ${given.join(', ')}, not several` });
  });

/** TLS to NATS: the CA that signed the server's certificate, and a client certificate if it asks for one. */
export const natsTlsConfigSchema = z
  .object({
    /** CA certificate (PEM) that signed the server's certificate. */
    caFile: path.optional(),
    /** Client certificate (PEM), for servers that verify clients; with `keyFile`. */
    certFile: path.optional(),
    /** The client certificate's private key (PEM). */
    keyFile: path.optional(),
  })
  .strict()
  .refine((t) => (t.certFile === undefined) === (t.keyFile === undefined), {
    message: 'give "certFile" and "keyFile" together',
    path: ['certFile'],
  });

/** The bus: how processes authenticate to NATS and whose admin events and replicas dispatchers accept. */
export const busConfigSchema = z
  .object({
    /** How fairway processes connect to NATS; flags and `NATS_*` variables win. */
    nats: z
      .object({
        auth: natsAuthConfigSchema.optional(),
        tls: natsTlsConfigSchema.optional(),
      })
      .strict()
      .default({}),
    /**
     * Public keys (PEM files from `fairway admin keygen`) whose signatures make an admin event
     * valid. A dispatcher on NATS with none refuses every admin event. @default none
     */
    operatorPublicKeyFiles: z.array(path).default([]),
    /**
     * Replica ids a dispatcher accepts registrations from; any other is refused and logged.
     * @default every replica an agent's NATS identity may publish for
     */
    allowedReplicas: z.array(z.string().min(1)).optional(),
  })
  .strict();

/**
 * Redis behind Redis Sentinel: the primary named `name` is asked of the sentinels, and asked again
 * after a fail-over. Secrets are better given by environment (`REDIS_SENTINEL_PASSWORD`,
 * `REDIS_PASSWORD`) than written in a config file.
 */
export const redisSentinelConfigSchema = z
  .object({
    /** The sentinels to ask for the primary. */
    sentinels: z
      .array(
        z
          .object({
            /** A sentinel's host name or address. */
            host: z.string().min(1),
            /** Its port (Sentinel's default is 26379). */
            port: z.number().int().min(1).max(65535),
          })
          .strict(),
      )
      .min(1),
    /** The monitored primary's name (`sentinel monitor <name> …`). */
    name: z.string().min(1),
    /** Password of the sentinels. @default none */
    sentinelPassword: z.string().min(1).optional(),
    /** Password of the primary and its replicas. @default none */
    password: z.string().min(1).optional(),
    /** TLS to the sentinels and the primary. @default false */
    tls: z.boolean().optional(),
  })
  .strict();

/** OpenTelemetry tracing of requests (the standard `OTEL_*` environment variables also apply). */
export const tracingConfigSchema = z
  .object({
    /** Export a trace per request. `OTEL_SDK_DISABLED=true` turns it off regardless. @default false */
    enabled: z.boolean().default(false),
    /** Fraction of new traces sampled (a client's sampled parent is followed); `OTEL_TRACES_SAMPLER` wins. @default 1 */
    sampleRatio: z.number().min(0).max(1).default(1),
  })
  .strict();

/** Telemetry beyond Prometheus metrics. */
export const telemetryConfigSchema = z
  .object({
    tracing: tracingConfigSchema.default(tracingConfigSchema.parse({})),
  })
  .strict();

/** Slot group names (`store.slotGroups`): the id alphabet, no `{`, `}` or `:` (they become part of a hash tag). */
const slotGroupName = z
  .string()
  .regex(/^[A-Za-z0-9._-]{1,64}$/, 'must be 1-64 letters, digits, ".", "_" or "-"');

/** The shared store: how dispatchers reach Redis when no `REDIS_URL` / `REDIS_SENTINELS` is given. */
export const storeConfigSchema = z
  .object({
    /** Redis through Sentinel. @default none (the environment's `REDIS_URL`, else memory) */
    redis: redisSentinelConfigSchema.optional(),
    /**
     * Slot groups: group name → the pools in it; pools in no group form the default group. Each
     * group's state lives in one Redis Cluster hash slot (`{<prefix>:<group>}`; the default group
     * keeps `{<prefix>}`), so on a cluster (`REDIS_CLUSTER`, `--redis-cluster`) the groups spread
     * over the primaries while every operation on a pool stays one atomic call on one primary.
     * RPM/TPM windows, quotas, usage totals and output histories are exact per group: pools whose
     * shared tenant limits must be exact belong in one group. Usage reads sum every group.
     * @default {} (one group: every pool in one slot, as without a cluster)
     */
    slotGroups: z.record(slotGroupName, z.array(z.string().min(1)).min(1)).default({}),
  })
  .strict();

/**
 * The Files and Batch API's storage: every tenant's limits unless it sets its own
 * (`tenants[].storage`), and the guard that keeps uploads from filling Redis, whose memory chat
 * admission needs too.
 */
export const storageConfigSchema = z
  .object({
    /** Bytes a tenant's files may hold together. @default 268435456 (256 MiB) */
    maxBytes: nonNegInt.default(256 * 1024 * 1024),
    /** Files a tenant may hold at once. @default 100 */
    maxFiles: nonNegInt.default(100),
    /** Batches a tenant may have open at once. @default 10 */
    maxOpenBatches: nonNegInt.default(10),
    /** Days a file lives unless its upload asks for less. @default 30 */
    fileRetentionDays: positive.default(30),
    /** Uploads a tenant may make per minute (capped by its `limits.rpm`). @default 60 */
    uploadsPerMinute: nonNegInt.default(60),
    /**
     * Fraction of Redis's memory (`used_memory` / `maxmemory`) above which new files and batches
     * are refused with 507, well before chat admission runs out of room. @default 0.8
     */
    refuseAbove: z.number().gt(0).max(1).default(0.8),
    /**
     * Redis's memory, bytes, when the server sets no `maxmemory`; with neither, the guard is off.
     * @default none
     */
    redisMemoryBytes: z.number().int().positive().optional(),
  })
  .strict();

/**
 * Other names clients may use for the fleet's models: an alias (`gpt-4o-mini`) or a pattern with
 * `*` wildcards (`gpt-*`) mapped to a model a pool serves. A request for an alias is admitted,
 * queued, limited and charged as a request for its model, and answered with the name it asked for.
 */
export const modelsConfigSchema = z
  .object({
    /**
     * Alias or `*` pattern → the model it stands for (a pool's `model`). A model a pool serves is
     * never an alias; an exact alias wins over a pattern, and of two patterns the one with more
     * characters besides `*` wins. @default none
     */
    aliases: z.record(z.string().min(1).max(256), z.string().min(1).max(256)).default({}),
    /**
     * Model → the models whose pools take its requests, in order, when its own pool cannot: the
     * pool has no replica serving, its queue is at `pools[].maxQueued`, or the request's SLO class
     * cannot start within its queue deadline there. Each refused pool charged nothing; the request
     * is admitted, limited and charged once, in the pool that takes it, and answered with the name
     * the client asked for. A tenant's own limits (rate, budget, its queue share) never fall back.
     * @default none
     */
    fallbacks: z
      .record(z.string().min(1).max(256), z.array(z.string().min(1).max(256)).min(1).max(8))
      .default({}),
  })
  .strict();

/** The fairway config file: tenants, apps, SLO classes, pools, engines, policies and limits. */
export const fairwayConfigSchema = z
  .object({
    /** The tenants and their API keys. */
    tenants: z.array(tenantSchema).default([]),
    /** Applications (FairServe's WSC and OIT). */
    apps: z.array(appSchema).default([]),
    /** SLO classes. @default QLM's interactive (20 s), batch-1 (60 s) and batch-2 (1 h) */
    sloClasses: z.array(sloClassSchema).default(DEFAULT_SLO_CLASSES.map((c) => ({ ...c }))),
    /** Pools of replicas, one model each. */
    pools: z.array(poolSchema).default([]),
    /** Engines named in the config (`fairway up`; GPU and TP for placement). */
    engines: z.array(engineSchema).default([]),
    /** Ordering, placement, cost, throttling and the control plane. */
    policy: policyConfigSchema.default(policyConfigSchema.parse({})),
    /** Limits applied to every tenant that sets none of its own. */
    defaultLimits: limitsSchema.default({}),
    /** Budgets of every tenant that sets none of its own. @default none */
    defaultQuotas: quotasSchema.optional(),
    /** Other names clients may use for the pools' models: aliases and `*` patterns. */
    models: modelsConfigSchema.default({ aliases: {}, fallbacks: {} }),
    /** Prices per 1M tokens by model name (usage cost, spend budgets). @default none: cost 0 */
    pricing: z.record(z.string().min(1), modelPriceSchema).default({}),
    /** Listeners: operator port, connection limits, request timeouts. */
    server: serverConfigSchema.default(serverConfigSchema.parse({})),
    /** What the Prometheus metrics reveal of tenants. */
    metrics: metricsConfigSchema.default(metricsConfigSchema.parse({})),
    /** NATS credentials, operator keys and the replica allow-list. */
    bus: busConfigSchema.default({ nats: {}, operatorPublicKeyFiles: [] }),
    /** The shared store: Redis through Sentinel, and slot groups on a Redis Cluster. */
    store: storeConfigSchema.default({ slotGroups: {} }),
    /** OpenTelemetry tracing (see {@link telemetryConfigSchema}). */
    telemetry: telemetryConfigSchema.default(telemetryConfigSchema.parse({})),
    /** Files and Batch storage limits and the Redis memory guard (see {@link storageConfigSchema}). */
    storage: storageConfigSchema.default(storageConfigSchema.parse({})),
  })
  .strict()
  .superRefine((cfg, ctx) => {
    const dup = (items: readonly { id?: string; name?: string }[], key: string) => {
      const seen = new Set<string>();
      items.forEach((it, i) => {
        const v = it.id ?? it.name ?? '';
        if (seen.has(v)) ctx.addIssue({ code: 'custom', path: [key, i], message: `duplicate "${v}"` });
        seen.add(v);
      });
    };
    dup(cfg.tenants, 'tenants');
    dup(cfg.apps, 'apps');
    dup(cfg.sloClasses, 'sloClasses');
    dup(cfg.pools, 'pools');
    dup(cfg.engines, 'engines');
    const pools = new Set(cfg.pools.map((p) => p.id));
    const grouped = new Map<string, string>();
    for (const [group, members] of Object.entries(cfg.store.slotGroups))
      members.forEach((pool, i) => {
        const path = ['store', 'slotGroups', group, i];
        if (!pools.has(pool)) ctx.addIssue({ code: 'custom', path, message: `unknown pool "${pool}"` });
        const other = grouped.get(pool);
        if (other !== undefined)
          ctx.addIssue({ code: 'custom', path, message: `pool "${pool}" is in slot group "${other}" too` });
        grouped.set(pool, group);
      });
    cfg.engines.forEach((e, i) => {
      if (!pools.has(e.pool))
        ctx.addIssue({ code: 'custom', path: ['engines', i, 'pool'], message: `unknown pool "${e.pool}"` });
    });
    const models = new Set(cfg.pools.map((p) => p.model));
    for (const [alias, target] of Object.entries(cfg.models.aliases)) {
      const path = ['models', 'aliases', alias];
      if (models.has(alias))
        ctx.addIssue({ code: 'custom', path, message: `"${alias}" is a model a pool serves, not an alias` });
      if (cfg.models.aliases[target] !== undefined)
        ctx.addIssue({
          code: 'custom',
          path,
          message: `"${target}" is an alias itself: name the model it stands for`,
        });
    }
    for (const [model, chain] of Object.entries(cfg.models.fallbacks)) {
      const path = ['models', 'fallbacks', model];
      if (!models.has(model))
        ctx.addIssue({ code: 'custom', path, message: `"${model}" is no model a pool serves` });
      const seen = new Set([model]);
      chain.forEach((to, i) => {
        if (!models.has(to))
          ctx.addIssue({ code: 'custom', path: [...path, i], message: `"${to}" is no model a pool serves` });
        else if (seen.has(to))
          ctx.addIssue({
            code: 'custom',
            path: [...path, i],
            message: `"${to}" is named twice in the chain`,
          });
        seen.add(to);
      });
    }
    const classes = new Set(cfg.sloClasses.map((c) => c.name));
    const apps = new Set(cfg.apps.map((a) => a.id));
    // A key authenticates as one tenant: the same key (plain or hashed) under two tenants is an
    // error naming both, never "the later tenant wins" (which would bill the wrong one).
    const keyOwner = new Map<string, string>();
    cfg.tenants.forEach((t, i) => {
      t.keys.forEach((k, j) => {
        const hash = k.hash ?? hashApiKey(k.key ?? '');
        const owner = keyOwner.get(hash);
        if (owner !== undefined && owner !== t.id)
          ctx.addIssue({
            code: 'custom',
            path: ['tenants', i, 'keys', j],
            message: `this API key is also a key of tenant "${owner}"; a key may belong to one tenant only ("${owner}" and "${t.id}")`,
          });
        keyOwner.set(hash, owner ?? t.id);
      });
    });
    const grants = (path: (string | number)[], g: { sloClasses?: string[]; engineFields?: string[] }) => {
      g.sloClasses?.forEach((c, k) => {
        if (!classes.has(c))
          ctx.addIssue({
            code: 'custom',
            path: [...path, 'sloClasses', k],
            message: `unknown SLO class "${c}"`,
          });
      });
      g.engineFields?.forEach((f, k) => {
        if (!RESTRICTED_ENGINE_FIELDS.has(f))
          ctx.addIssue({
            code: 'custom',
            path: [...path, 'engineFields', k],
            message: `"${f}" is not a restricted engine field; those are ${[...RESTRICTED_ENGINE_FIELDS].join(', ')}`,
          });
      });
    };
    cfg.tenants.forEach((t, i) => {
      grants(['tenants', i], t);
      t.keys.forEach((k, j) => {
        grants(['tenants', i, 'keys', j], k);
      });
      if (t.sloClass && !classes.has(t.sloClass))
        ctx.addIssue({
          code: 'custom',
          path: ['tenants', i, 'sloClass'],
          message: `unknown SLO class "${t.sloClass}"`,
        });
      t.keys.forEach((k, j) => {
        if (k.sloClass && !classes.has(k.sloClass))
          ctx.addIssue({
            code: 'custom',
            path: ['tenants', i, 'keys', j, 'sloClass'],
            message: `unknown SLO class "${k.sloClass}"`,
          });
        if (k.app && !apps.has(k.app))
          ctx.addIssue({
            code: 'custom',
            path: ['tenants', i, 'keys', j, 'app'],
            message: `unknown app "${k.app}"`,
          });
      });
    });
  });

export type FairwayConfig = z.infer<typeof fairwayConfigSchema>;
/** One `pools[]` entry of the config. */
export type PoolConfig = z.infer<typeof poolSchema>;
export type TenantConfig = z.infer<typeof tenantSchema>;
export type LimitsConfig = z.infer<typeof limitsSchema>;
export type TenantStorageConfig = z.infer<typeof tenantStorageSchema>;
export type StorageConfig = z.infer<typeof storageConfigSchema>;
/** Token and spend budgets of a tenant or key (`quotas`). */
export type QuotasConfig = z.infer<typeof quotasSchema>;
/** A model's prices per 1M tokens (`pricing`). */
export type ModelPrice = z.infer<typeof modelPriceSchema>;
export type PolicyConfig = z.infer<typeof policyConfigSchema>;
/** A dispatcher's listener settings (`server`). */
export type ServerConfig = z.infer<typeof serverConfigSchema>;
/** What the gateway's metrics reveal (`metrics`). */
export type MetricsConfig = z.infer<typeof metricsConfigSchema>;
/** The bus section of the config. */
export type BusConfig = z.infer<typeof busConfigSchema>;
export type RedisSentinelConfig = z.infer<typeof redisSentinelConfigSchema>;
/** NATS credentials. */
export type NatsAuthConfig = z.infer<typeof natsAuthConfigSchema>;
/** TLS to NATS. */
export type NatsTlsConfig = z.infer<typeof natsTlsConfigSchema>;
/** The SLO-class control plane's settings. */
export type ControlConfig = z.infer<typeof controlConfigSchema>;
/** One pool's desired-replicas model. */
export type ScalingConfig = z.infer<typeof scalingConfigSchema>;

/** Validates config data (already parsed from YAML/JSON). */
export function parseConfig(data: unknown, source?: string): FairwayConfig {
  return parseWith(fairwayConfigSchema, data, source);
}

/** Reads and validates a fairway config file (YAML or JSON). */
export function loadConfig(path: string): FairwayConfig {
  return parseConfig(readStructuredFile(path), path);
}
