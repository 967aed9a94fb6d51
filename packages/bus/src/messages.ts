/**
 * The zod schemas of every message on the bus: the source of truth for their TypeScript types and
 * the check every received message passes before a handler sees it. Objects strip unknown fields
 * rather than reject them, so a newer agent can add a field without breaking older dispatchers
 * during a rolling upgrade; unknown message *types* are rejected.
 */
import { limitsSchema, quotasSchema } from '@fairway/core';
import { z } from 'zod';

const id = z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters');
const nonNegInt = z.number().int().nonnegative();
const posInt = z.number().int().positive();
/** Milliseconds on the sender's clock (informational: receivers time freshness on their own clock). */
const timestampMs = z.number().nonnegative();

/** Lifecycle state a replica reports: only `ready` replicas take new work; `gone` leaves the pool. */
export const replicaStateSchema = z.enum(['ready', 'draining', 'sleeping', 'gone']);
/** Lifecycle state a replica reports. */
export type ReplicaState = z.infer<typeof replicaStateSchema>;

/**
 * A replica announcing itself (on start, after a model swap, and whenever a consumer asks with a
 * `discover`). `epoch` changes on every agent start, so a restarted replica is told apart from the
 * one it replaces.
 */
export const registrationSchema = z.object({
  replicaId: id,
  epoch: id,
  /** Base URL of the engine's OpenAI-compatible server. */
  url: z.url({ message: 'must be an http(s) URL' }),
  pool: id,
  model: z.string().min(1, 'must not be empty'),
  gpu: z.string().min(1).optional(),
  /** Tensor-parallel degree. */
  tp: posInt,
  /** KV-cache capacity in tokens: `num_gpu_blocks × block_size` from `vllm:cache_config_info`. */
  kvCapacityTokens: nonNegInt,
  /** Tokens per KV block. */
  blockSize: posInt,
  /** Sequences the engine batches at most (`--max-num-seqs`). */
  maxNumSeqs: posInt,
  /** LoRA adapters loaded at registration time. */
  adapters: z.array(z.string().min(1)).default([]),
  at: timestampMs,
});
/** A replica registration. */
export type Registration = z.infer<typeof registrationSchema>;

/** Load and capacity a replica reports every 100–250 ms, scraped from the engine's `/metrics`. */
export const heartbeatSchema = z.object({
  replicaId: id,
  epoch: id,
  /** Increases by one per heartbeat within an epoch, so reordered heartbeats are ignored. */
  seq: nonNegInt,
  ts: timestampMs,
  state: replicaStateSchema,
  /** `vllm:num_requests_running`. */
  running: nonNegInt,
  /** `vllm:num_requests_waiting`. */
  waiting: nonNegInt,
  /** `vllm:kv_cache_usage_perc`, 0–1. */
  kvUsage: z.number().min(0).max(1),
  /** KV tokens in use: `kvUsage × kvCapacityTokens`, rounded. */
  kvUsedTokens: nonNegInt,
  promptTokensTotal: nonNegInt,
  generationTokensTotal: nonNegInt,
  preemptionsTotal: nonNegInt,
  /** `vllm:request_success_total` over every finish reason: how fast the replica drains. */
  requestsFinishedTotal: nonNegInt.default(0),
  /**
   * Sum (seconds) and count of `vllm:inter_token_latency_seconds` (`time_per_output_token_seconds`
   * before vLLM 0.11): how long the engine's decode iterations take, measured (see `EngineTiming`).
   */
  interTokenSecondsTotal: z.number().min(0).default(0),
  interTokensTotal: nonNegInt.default(0),
  /** Sum (seconds) and count of `vllm:request_prefill_time_seconds`: how long prefills take. */
  prefillSecondsTotal: z.number().min(0).default(0),
  prefillsTotal: nonNegInt.default(0),
  /** LoRA adapters loaded now. */
  adapters: z.array(z.string().min(1)).default([]),
});
/** A replica heartbeat. */
export type Heartbeat = z.infer<typeof heartbeatSchema>;

/** Asks every agent to publish its registration again (a consumer that starts late sends it). */
export const discoverSchema = z.object({
  /** Who asks, for logs. */
  requester: z.string().optional(),
});
/** A discover request. */
export type Discover = z.infer<typeof discoverSchema>;

/**
 * A request picked by one dispatcher whose client connection another dispatcher holds
 * (DESIGN.md, request path step 4): the owner must proxy it to `replicaId`, whose capacity the
 * picker already reserved.
 */
export const assignmentSchema = z.object({
  requestId: id,
  /** The dispatcher that holds the client connection and must serve the request. */
  dispatcherId: id,
  /** The dispatcher that picked it. */
  pickedBy: id,
  replicaId: id,
  /** Tokens reserved on the replica (input + predicted output). */
  reserveTokens: nonNegInt,
  /** What prefix-cache affinity did for it (the owner's access log says it), when it had prefix keys. */
  affinity: z.enum(['hit', 'bounded', 'miss']).optional(),
  at: timestampMs,
});
/** An assignment to a dispatcher. */
export type Assignment = z.infer<typeof assignmentSchema>;

/**
 * Evict named requests from a replica. vLLM aborts a request only when its HTTP connection closes,
 * so the dispatcher holding the connection acts on this by closing it.
 */
export const evictSchema = z.object({
  replicaId: id,
  requestIds: z.array(id).min(1, 'must name at least one request'),
  reason: z.string().optional(),
  at: timestampMs,
});
/** An eviction event. */
export type Evict = z.infer<typeof evictSchema>;

/**
 * A dispatcher saw a replica's engine fail a call (refused or reset the connection, answered 5xx)
 * and tells every other dispatcher, so none of them places work there until the replica shows it
 * is back (its agent registers a new epoch, or a direct health probe of its engine succeeds). Only
 * the registration epoch named here is suspended: a restarted replica is not.
 */
export const replicaUnavailableSchema = z.object({
  replicaId: id,
  /** The registration epoch the failure was seen on. */
  epoch: id,
  /** The dispatcher that saw the failure. */
  reportedBy: id,
  /** What failed, for logs (`connection refused`, `the engine answered 500`). */
  reason: z.string().max(500).optional(),
  /**
   * How long to hold it out before probing it, ms: long when the engine is down, 0 when it
   * answered but failed the call (probe at once). @default the receiver's own hold
   */
  holdMs: z.number().int().nonnegative().max(3_600_000).optional(),
  at: timestampMs,
});
/** A replica-unavailable report. */
export type ReplicaUnavailable = z.infer<typeof replicaUnavailableSchema>;

/** How many replicas a pool should have (scaling advice; consumed by autoscalers later). */
export const desiredReplicasSchema = z.object({
  pool: id,
  desired: nonNegInt,
  current: nonNegInt.optional(),
  reason: z.string(),
  at: timestampMs,
});
/** A desired-replicas signal. */
export type DesiredReplicas = z.infer<typeof desiredReplicasSchema>;

/** A request a dispatcher holds, as its control report describes it (QLM's request groups need these). */
const controlRequest = {
  requestId: id,
  model: z.string().min(1),
  sloClass: z.string().min(1),
  inputTokens: posInt,
  maxTokens: nonNegInt,
  /** Admission time on the store's clock, ms. */
  arrivalMs: timestampMs,
  /** Output tokens it has produced so far (before an eviction, for a queued one), tokens. */
  generated: nonNegInt.default(0),
};

/**
 * What one dispatcher holds, published every control interval (QLM's global queue, built without
 * touching the request path): its queued requests, its running ones with their replica and output
 * so far, and those that finished since its last report (output-length history). The control
 * leader merges the latest report of each dispatcher and ignores reports older than a few
 * intervals (a dead dispatcher's work is reclaimed through the store).
 */
export const controlReportSchema = z.object({
  dispatcherId: id,
  /** Increases by one per report of a dispatcher, so a reordered report is ignored. */
  seq: nonNegInt,
  queued: z.array(z.object(controlRequest)).max(100_000),
  running: z.array(z.object({ ...controlRequest, replicaId: id })).max(100_000),
  finished: z
    .array(z.object({ ...controlRequest, generated: nonNegInt }))
    .max(100_000)
    .default([]),
  at: timestampMs,
});
/** A dispatcher's control report. */
export type ControlReport = z.infer<typeof controlReportSchema>;

/**
 * Settled calls a dispatcher learned app profiles from since its last message (FairServe's WSC
 * expected tokens per app and interaction stage): every dispatcher learns from every other's
 * calls too, so all price the shared counters alike.
 */
export const appSamplesSchema = z.object({
  dispatcherId: id,
  samples: z
    .array(
      z.object({
        app: id,
        /** Interaction stage of the call (the calls before it in its interaction). */
        stage: z.number().int().min(0).max(1023),
        /** Prompt tokens besides the system prompt. */
        input: nonNegInt.max(100_000_000),
        system: nonNegInt.max(100_000_000),
        output: nonNegInt.max(100_000_000),
      }),
    )
    .min(1)
    .max(4096),
  at: timestampMs,
});
/** Settled calls one dispatcher shares for learning app profiles. */
export type AppSamples = z.infer<typeof appSamplesSchema>;

/**
 * The control leader's routes after a planning round (QLM virtual queues projected onto the
 * gateways' priority bands): which bands each replica pulls, in order, and which replicas take
 * nothing (draining for or loading another model). Every dispatcher's gateway routes through it.
 */
export const controlRoutesSchema = z.object({
  leaderId: id,
  /** Increases with every round of a leader; a new leader starts above its predecessor's. */
  round: nonNegInt,
  /** Replica id → bands in pull order. Replicas absent here pull every band in priority order. */
  queues: z.record(z.string().min(1), z.array(z.number().int())),
  /** Replicas held out of dispatch (model swap in progress). */
  held: z.array(id).default([]),
  /** Replicas take only what fits (request pulling); false pushes to engine queues. @default true */
  pull: z.boolean().default(true),
  /** A replica whose queue runs dry takes the other bands too. @default true */
  workConserving: z.boolean().default(true),
  at: timestampMs,
});
/** The control leader's routes. */
export type ControlRoutes = z.infer<typeof controlRoutesSchema>;

const commandBase = { replicaId: id };

/** A command to one replica's agent (QLM section 5 serving operations, plus lifecycle). */
export const nodeCommandSchema = z.discriminatedUnion('type', [
  /** Stop taking new work; running requests finish. */
  z.object({ ...commandBase, type: z.literal('drain') }),
  /** Take new work again after a drain. */
  z.object({ ...commandBase, type: z.literal('resume') }),
  /** Abort the named running requests, freeing their KV cache. */
  z.object({
    ...commandBase,
    type: z.literal('evict'),
    requestIds: z.array(id).min(1, 'must name at least one request'),
  }),
  /** vLLM sleep mode: level 1 offloads weights to CPU, level 2 discards them. */
  z.object({ ...commandBase, type: z.literal('sleep'), level: z.union([z.literal(1), z.literal(2)]) }),
  z.object({ ...commandBase, type: z.literal('wake') }),
  z.object({ ...commandBase, type: z.literal('loadLora'), name: id, path: z.string().min(1) }),
  z.object({ ...commandBase, type: z.literal('unloadLora'), name: id }),
  /** Serve another model; the agent restarts the engine when sleep/wake or LoRA cannot do it. */
  z.object({
    ...commandBase,
    type: z.literal('swapModel'),
    model: z.string().min(1),
    args: z.array(z.string()).default([]),
  }),
]);
/** A node command. */
export type NodeCommand = z.infer<typeof nodeCommandSchema>;
/** A node command as a sender writes it (defaults not yet applied). */
export type NodeCommandInput = z.input<typeof nodeCommandSchema>;

/** The agent's answer to a command. */
export const commandReplySchema = z.object({
  ok: z.boolean(),
  error: z.string().optional(),
  /** The replica's state after the command. */
  state: replicaStateSchema.optional(),
});
/** A command reply. */
export type CommandReply = z.infer<typeof commandReplySchema>;

const keyHash = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'must be "sha256:" followed by 64 hex digits');
const adminBase = {
  at: timestampMs,
  by: z.string().optional(),
  /**
   * Unique per signed event (random, from the signer): a dispatcher applies each nonce once, so a
   * copy of an old event re-published later is refused.
   */
  nonce: z.string().min(16).max(128).optional(),
  /**
   * The fleet (subject prefix) a signed event is for: a dispatcher refuses an event signed for
   * another fleet, so one operator key can serve staging and production without cross-replays.
   */
  fleet: z.string().min(1).max(256).optional(),
};

/**
 * Operator changes every dispatcher must apply, in order and without loss: they live in a
 * JetStream stream whose sequence numbers order them and let a restarted dispatcher replay.
 */
export const adminEventSchema = z.discriminatedUnion('type', [
  z.object({
    ...adminBase,
    type: z.literal('tenantUpsert'),
    tenant: z.object({
      id,
      weight: z.number().positive().default(1),
      sloClass: z.string().min(1).optional(),
      limits: limitsSchema.default({}),
    }),
  }),
  z.object({ ...adminBase, type: z.literal('tenantDelete'), tenantId: id }),
  z.object({
    ...adminBase,
    type: z.literal('keyAdd'),
    tenantId: id,
    keyHash,
    app: id.optional(),
    sloClass: id.optional(),
    /** When the key stops authenticating (ms since the epoch); never when absent. */
    expiresAt: timestampMs.optional(),
  }),
  z.object({ ...adminBase, type: z.literal('keyRevoke'), keyHash }),
  z
    .object({
      ...adminBase,
      type: z.literal('limitsSet'),
      scope: z.enum(['tenant', 'app', 'user', 'default']),
      /** The tenant, app or user; absent for `default`. */
      id: id.optional(),
      limits: limitsSchema,
    })
    .refine((e) => (e.scope === 'default') === (e.id === undefined), {
      message: 'give "id" for scope tenant, app or user, and none for scope default',
      path: ['id'],
    }),
  z
    .object({
      ...adminBase,
      type: z.literal('quotaSet'),
      /** A tenant's budgets, one key's, or those of every tenant that sets none (`default`). */
      scope: z.enum(['tenant', 'key', 'default']),
      /** The tenant id or the key hash (`sha256:<hex>`); absent for `default`. */
      id: id.optional(),
      /** The budgets, replacing the scope's; `{}` removes them. */
      quotas: quotasSchema,
    })
    .refine((e) => (e.scope === 'default') === (e.id === undefined), {
      message: 'give "id" for scope tenant or key, and none for scope default',
      path: ['id'],
    })
    .refine((e) => e.scope !== 'key' || keyHash.safeParse(e.id).success, {
      message: 'a key is named by its hash: "sha256:" followed by 64 hex digits',
      path: ['id'],
    }),
]);
/** An admin event. */
export type AdminEvent = z.infer<typeof adminEventSchema>;
/** An admin event as a sender writes it. */
export type AdminEventInput = z.input<typeof adminEventSchema>;

/**
 * An admin event signed with an operator key, as it travels on the admin stream: the signature
 * covers exactly `payload`, the event's JSON text, so no re-encoding can change what was signed.
 */
export const signedAdminEnvelopeSchema = z
  .object({
    /** The event as JSON text (what is signed and what is applied). */
    payload: z.string().min(2).max(65_536),
    /** Id of the operator key that signed (`ed25519:<16 hex>`). */
    keyId: z.string().min(1).max(64),
    /** Ed25519 signature, base64. */
    sig: z.string().min(1).max(256),
  })
  .strict();
/** A signed admin event on the wire. */
export type SignedAdminEnvelope = z.infer<typeof signedAdminEnvelopeSchema>;

/** An admin event with its position in the stream. */
export interface AdminEventRecord {
  /** Stream sequence number: 1, 2, 3, … in publication order. */
  readonly seq: number;
  readonly event: AdminEvent;
  /** The signed form it arrived in; absent for an unsigned event. */
  readonly signed?: SignedAdminEnvelope;
  /** The subject it was published on, for logs. */
  readonly subject?: string;
}

/**
 * A budget reached its alert fraction (`quotas.alertAt`, default 80%) in a window: published once
 * per budget and window by the dispatcher whose admission reached it. Ids only, never a key.
 */
export const quotaAlertSchema = z.object({
  tenant: id,
  /** The key's hash for a key budget. */
  key: keyHash.optional(),
  scope: z.enum(['tenant', 'key']),
  window: z.enum(['day', 'month']),
  kind: z.enum(['tokens', 'spend']),
  /** The window: `YYYY-MM-DD` or `YYYY-MM` (UTC). */
  bucket: z.string().min(7).max(10),
  budget: z.number().nonnegative(),
  /** Settled usage plus running requests' reservations when the alert was raised (≥ alertAt × budget). */
  used: z.number().nonnegative(),
  at: timestampMs,
  dispatcherId: id,
});
/** A quota alert. */
export type QuotaAlertMessage = z.infer<typeof quotaAlertSchema>;

/**
 * Where a dispatcher placed a request with prefix keys (prefix-cache affinity): every other
 * dispatcher adds the keys to its own prefix index, so a follow-up that shares the prompt's start
 * goes to the same replica through any of them. Fire-and-forget: a lost message only costs hit
 * rate. Bounded: a few short keys, so a hostile publisher cannot make one message costly.
 */
export const prefixRouteSchema = z.object({
  /** The dispatcher that placed the request (routes the subject). */
  dispatcherId: id,
  tenant: id,
  pool: id,
  replicaId: id,
  /** The request's prefix keys, longest first. */
  keys: z.array(z.string().min(1).max(64)).min(1).max(16),
  at: timestampMs,
});
/** A prefix route. */
export type PrefixRoute = z.infer<typeof prefixRouteSchema>;

/**
 * The requests one dispatcher runs, by replica, with their progress (Aladdin's per-sequence
 * reports): every dispatcher sends its own a few times a second, and placement sees each replica's
 * sequences from all of them (time-indexed KV, decode and TTFT slack). Each sequence is
 * `[prompt tokens, output tokens so far, ms since its first output token, prefilled 0/1, KV tokens
 * reserved for it]`.
 */
export const sequenceReportSchema = z.object({
  dispatcherId: id,
  replicas: z
    .array(
      z.object({
        replicaId: id,
        sequences: z
          .array(
            z.tuple([
              nonNegInt.max(100_000_000),
              nonNegInt.max(100_000_000),
              z.number().finite().min(0).max(1e9),
              z.union([z.literal(0), z.literal(1)]),
              nonNegInt.max(1_000_000_000),
            ]),
          )
          .max(4096),
      }),
    )
    .max(4096),
  at: timestampMs,
});
/** A dispatcher's sequence report. */
export type SequenceReport = z.infer<typeof sequenceReportSchema>;

/** A KV block key: the low 64 bits of a vLLM block hash, 16 hex digits (`kvBlockKey` in core). */
const blockKey = z.string().regex(/^[0-9a-f]{16}$/u, 'must be 16 lower-case hex digits');

/**
 * What an engine's prefix cache stored and evicted, relayed by its agent from vLLM's KV cache
 * events (`--kv-events-config`): every dispatcher keeps which blocks each replica holds and places
 * a request on the replica holding the longest run of its prompt's blocks. Events apply in order:
 * `stored` and `removed` name blocks, `cleared` empties the replica's cache. Sequenced per agent
 * run: a message out of sequence, or from a new run, means events were lost, so a receiver forgets
 * the replica's blocks and starts again from the events that follow. Bounded, so a hostile
 * publisher cannot make one message costly.
 */
export const kvEventsSchema = z.object({
  replicaId: id,
  /** The agent run (`Registration.epoch`). */
  epoch: id,
  /** Increases by one per message within an epoch. */
  seq: nonNegInt,
  events: z
    .array(
      z.union([
        z.tuple([z.literal('stored'), z.array(blockKey).max(4096)]),
        z.tuple([z.literal('removed'), z.array(blockKey).max(4096)]),
        z.tuple([z.literal('cleared')]),
      ]),
    )
    .max(256),
  at: timestampMs,
});
/** KV cache events of one replica. */
export type KvEvents = z.infer<typeof kvEventsSchema>;

/** Schemas of the publish/subscribe message kinds. */
export const messageSchemas = {
  registration: registrationSchema,
  heartbeat: heartbeatSchema,
  discover: discoverSchema,
  assignment: assignmentSchema,
  evict: evictSchema,
  desiredReplicas: desiredReplicasSchema,
  controlReport: controlReportSchema,
  controlRoutes: controlRoutesSchema,
  replicaUnavailable: replicaUnavailableSchema,
  quotaAlert: quotaAlertSchema,
  appSamples: appSamplesSchema,
  prefixRoute: prefixRouteSchema,
  sequenceReport: sequenceReportSchema,
  kvEvents: kvEventsSchema,
} as const;
/** A publish/subscribe message kind. */
export type MessageKind = keyof typeof messageSchemas;
/** The message type of a kind, as handlers receive it. */
export type MessageOf<K extends MessageKind> = z.infer<(typeof messageSchemas)[K]>;
/** The message type of a kind, as publishers write it (defaults optional). */
export type MessageInput<K extends MessageKind> = z.input<(typeof messageSchemas)[K]>;

/** Request and reply schemas of the request/reply kinds, and the reply sent when a handler fails. */
export const requestSchemas = {
  command: {
    request: nodeCommandSchema,
    reply: commandReplySchema,
    failure: (error: string): z.input<typeof commandReplySchema> => ({ ok: false, error }),
  },
} as const;
/** A request/reply kind. */
export type RequestKind = keyof typeof requestSchemas;
/** The request type of a kind, as servers receive it. */
export type RequestOf<K extends RequestKind> = z.infer<(typeof requestSchemas)[K]['request']>;
/** The request type of a kind, as requesters write it. */
export type RequestInput<K extends RequestKind> = z.input<(typeof requestSchemas)[K]['request']>;
/** The reply type of a kind, as requesters receive it. */
export type ReplyOf<K extends RequestKind> = z.infer<(typeof requestSchemas)[K]['reply']>;
/** The reply type of a kind, as servers write it. */
export type ReplyInput<K extends RequestKind> = z.input<(typeof requestSchemas)[K]['reply']>;
