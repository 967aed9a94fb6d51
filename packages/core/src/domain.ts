/**
 * fairway's domain model: who sends requests (tenants, apps, users), what a request is, which
 * service it must get (SLO class) and where it can run (pools of replicas of one model).
 */

/** A tenant: the default unit of fairness and of limits. */
export interface Tenant {
  readonly id: string;
  /** Share of the fleet relative to other tenants (weighted VTC). @default 1 */
  readonly weight: number;
}

/**
 * An application as FairServe sees it: its expected token profile per interaction stage, used to
 * normalise service (WSC, FairServe section 4.1).
 */
export interface AppProfile {
  readonly id: string;
  /** Expected tokens per stage of an interaction; stage i uses entry min(i, length-1). */
  readonly stages: readonly { readonly input: number; readonly system: number; readonly output: number }[];
}

/** Service-level class: a TTFT target, an optional decode target, a priority band (0 runs first). */
export interface SloClass {
  readonly name: string;
  /** Time-to-first-token target, seconds. */
  readonly ttftS: number;
  /** Average token generation time target (Aladdin's ATGT), seconds per output token. */
  readonly atgtS?: number | undefined;
  /** Strict priority band; lower bands are served first. */
  readonly band: number;
  /** Whether requests of this class may be evicted or shed under pressure. */
  readonly sheddable: boolean;
  /**
   * Longest a request of this class may wait in the gateway's queue, seconds: one predicted to
   * wait longer (from the queue ahead and the measured drain rate) is refused at once with
   * Retry-After, and one that waited this long is refused then. @default the dispatcher's queue
   * timeout (`policy.queueTimeoutS`, 300 s), past which a wait ends in 504 `queue_timeout`
   */
  readonly queueDeadlineS?: number | undefined;
}

/**
 * The longest a request of `cls` may wait in the gateway's queue, ms: its class's
 * `queueDeadlineS`, never more than the dispatcher's `queueTimeoutMs`.
 */
export function queueDeadlineMs(cls: SloClass | undefined, queueTimeoutMs: number): number {
  return cls?.queueDeadlineS === undefined
    ? queueTimeoutMs
    : Math.min(queueTimeoutMs, cls.queueDeadlineS * 1000);
}

/** QLM's default SLO classes (QLM section 2): interactive 20 s, batch-1 60 s, batch-2 1 h. */
export const DEFAULT_SLO_CLASSES: readonly SloClass[] = [
  { name: 'interactive', ttftS: 20, band: 0, sheddable: false },
  { name: 'batch-1', ttftS: 60, band: 1, sheddable: true },
  { name: 'batch-2', ttftS: 3600, band: 2, sheddable: true },
];

/**
 * What the scheduler knows about one request. Token counts are what admission saw: the prompt
 * length and the cap on output; `outputTokens` is the true length, known only to the engine (and to
 * the simulator and oracle policies).
 */
export interface RequestDescriptor {
  readonly id: string;
  readonly tenant: string;
  /** Id (`sha256:<hex>`) of the API key the request authenticated with, if any (usage accounting). */
  readonly keyId?: string | undefined;
  readonly app?: string | undefined;
  readonly user?: string | undefined;
  /** Model name; requests are served only by replicas of a pool that serves this model. */
  readonly model: string;
  readonly sloClass: string;
  /** Prompt tokens. */
  readonly inputTokens: number;
  /** System-prompt tokens included in `inputTokens` (FairServe's n_sys). @default 0 */
  readonly systemTokens?: number | undefined;
  /**
   * Output tokens the request reserves and is admitted for (every choice together): its
   * `max_tokens` times `n`, or, when the client set no cap, the pool's `reserveOutputTokens`.
   */
  readonly maxTokens: number;
  /**
   * Set when the client gave no output cap: the output tokens the engine may generate (every
   * choice together), at least `maxTokens`. The output may stream past its reservation up to it
   * (the reservation grows as it does, and token budgets are reserved for it). @default maxTokens
   */
  readonly outputCap?: number | undefined;
  /** Choices (`n`) the request asks for. @default 1 */
  readonly choices?: number | undefined;
  /** True output length, when known ahead (simulation, `ignore_eos` tests, oracle). */
  readonly outputTokens?: number | undefined;
  /** Arrival time, ms on the injected clock. */
  readonly arrivalMs: number;
  /** Multi-call interaction this request belongs to (`x-fairway-interaction`). */
  readonly interactionId?: string | undefined;
  /** 0-based position of this call in its interaction. */
  readonly interactionStage?: number | undefined;
  /** Number of calls in the interaction, when known (simulation). */
  readonly interactionSize?: number | undefined;
  /** vLLM `priority` (lower runs first) under `--scheduling-policy priority`. */
  readonly priority?: number | undefined;
  /**
   * Chained hashes of the request's full KV blocks, prompt then answer (simulation): engines with
   * prefix caching skip the prefill of the leading blocks they hold (`EngineSeqInput.blockHashes`);
   * with a KV block index, admission looks the prompt's up as {@link promptBlockKeys}.
   */
  readonly blockHashes?: readonly string[] | undefined;
  /**
   * The prompt's block keys (`kvBlockKeys`), for a pool whose engines publish KV cache events: with
   * a KV block index, admission places the request on the replica holding the longest run of them.
   * Read at admission only and not kept in the queued request (a long prompt has thousands).
   * @default `blockHashes`
   */
  readonly promptBlockKeys?: readonly string[] | undefined;
  /**
   * Prompt tokens the prefix cache of the replica the request is steered to holds, known at
   * admission from its engine's KV cache events: the dispatch charge counts them at the
   * cached-token weight instead of predicting them. @default unknown
   */
  readonly cachedPromptTokens?: number | undefined;
  /**
   * Prefix keys of the prompt, longest first (`promptPrefixOfText` live, `promptPrefixOfBlocks` in
   * simulation): with prefix affinity, admission looks them up to find the replica that likely
   * holds the prompt's start in its prefix cache. @default none: placed without affinity
   */
  readonly prefixKeys?: readonly string[] | undefined;
  /**
   * Tokens of the part of the prompt each prefix key adds to the next shorter one (`PromptPrefix`),
   * one per key: requests on one replica share those parts' KV blocks in its prefix cache, so a
   * pool that places by affinity reserves each part once per replica. @default none: every
   * request reserves its whole prompt
   */
  readonly prefixTokens?: readonly number[] | undefined;
  /**
   * Closed-loop follow-up (simulation): the call is sent this many ms after the previous call of
   * its interaction finishes, not at `arrivalMs` (which then only orders the workload).
   */
  readonly thinkMs?: number | undefined;
}

/** Tokens a request consumed. */
export interface Usage {
  readonly inputTokens: number;
  readonly outputTokens: number;
  /**
   * Of `inputTokens`, those the engine found in its prefix cache and did not prefill (vLLM's
   * `usage.prompt_tokens_details.cached_tokens`). Only the engine reports it, never the client;
   * absent when the engine does not say. Fairness counters charge these at a reduced weight.
   */
  readonly cachedTokens?: number | undefined;
}

/** A GPU type. */
export interface GpuSpec {
  readonly name: string;
  /** Device memory, GiB. */
  readonly memoryGiB: number;
}

/** A model architecture, as far as memory and KV cache are concerned. */
export interface ModelSpec {
  readonly name: string;
  /** Parameter count, billions. */
  readonly paramsB: number;
  /** Weight bytes per parameter (2 for fp16/bf16). */
  readonly bytesPerParam: number;
  /** KV-cache bytes per token across all layers, whole model (fp16). */
  readonly kvBytesPerToken: number;
  /** Context window, tokens. */
  readonly maxModelLen: number;
}

/** A pool: the replicas that serve one model. Requests for that model are scheduled within it. */
export interface PoolSpec {
  readonly id: string;
  readonly model: string;
}

/**
 * The id of a tenant's end user as fairway keys it (`RequestDescriptor.user`): `<tenant>/<user>`.
 * Tenant ids contain no "/", so whatever a tenant sends as its user (`x-fairway-user`), it never
 * names another tenant's user, or another tenant: fairness flows (WSC), user windows and
 * throttles stay the tenant's own.
 */
export function tenantUserId(tenant: string, user: string): string {
  return `${tenant}/${user}`;
}
