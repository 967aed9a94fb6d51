import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import type { Bus, ReplicaRegistry, Unsubscribe } from '@fairway/bus';
import {
  type Clock,
  DEFAULT_ENGINE_TIMEOUTS,
  type EngineTimeoutsConfig,
  type FairwayConfig,
  type Logger,
} from '@fairway/core';
import type { SchedulingStore } from '@fairway/store';
import type { Tracer } from '@opentelemetry/api';
import Fastify, { type FastifyInstance } from 'fastify';
import { ActivityLog } from './activity-log.ts';
import { AdminEventApplier, type AdminTrust, followAdminEvents } from './admin-events.ts';
import { AppProfileSharing } from './app-profile-sharing.ts';
import { Authenticator, keyRingFromConfig, type Principal } from './auth.ts';
import { answerClientError, answerFrameworkError, checkHost } from './client-errors.ts';
import type { CompletionContext } from './completion-handler.ts';
import { useCors } from './cors.ts';
import { type DispatcherOptions, resolveDispatcherOptions } from './dispatcher-options.ts';
import { type EngineFactory, EnginePool } from './engine-pool.ts';
import { EngineProbe } from './engine-probe.ts';
import { toApiError } from './error-mapping.ts';
import { ApiError } from './errors.ts';
import { bandDepths, replicaSnapshots } from './fleet-view.ts';
import { GatewayMetrics } from './gateway-metrics.ts';
import { GatewayRuntime } from './gateway-runtime.ts';
import { HungEngines } from './hung-engines.ts';
import { InternalCompletions } from './internal-completion.ts';
import { useStrictJsonBodies } from './json-body.ts';
import type { LeaseBackend } from './leader-lease.ts';
import { ModelAliases } from './model-aliases.ts';
import { loadPoolTokenizers } from './pool-tokenizers.ts';
import { PromptBlockKeys } from './prompt-block-keys.ts';
import { RegistryReplicaSource } from './replica-source.ts';
import { withApiKeyHeader } from './request-headers.ts';
import { logAccess, RECORD, type RecordedRequest, RequestRecord, requestIdOf } from './request-record.ts';
import { type AdminApiSettings, adminApiRoutes } from './routes/admin-api.ts';
import { adminOverviewRoute } from './routes/admin-overview.ts';
import { anthropicRoutes } from './routes/anthropic.ts';
import { CONSOLE_PATHS, consoleRoutes } from './routes/console.ts';
import { openAiRoutes } from './routes/openai.ts';
import { healthRoutes, metricsRoute, observeGauges } from './routes/ops.ts';
import { usageApiRoutes } from './routes/usage-api.ts';
import { schedulingFromConfig } from './scheduling-config.ts';
import { SequenceReports } from './sequence-reports.ts';
import { TenantDirectory } from './tenant-directory.ts';
import { TimedStore } from './timed-store.ts';
import { extractTraceContext, RequestTrace } from './tracing.ts';

/** What a dispatcher is built from: everything with I/O or time is injected. */
export interface DispatcherDeps {
  /** This dispatcher's id, unique in the fleet (owner of its requests in the store). */
  readonly id: string;
  readonly config: FairwayConfig;
  /** The shared scheduling store (Redis in production, memory in embedded mode). */
  readonly store: SchedulingStore;
  readonly bus: Bus;
  /** The fleet from agents' registrations and heartbeats; the caller starts and stops it. */
  readonly registry: ReplicaRegistry;
  /** Makes the client of an engine from its URL. */
  readonly engines: EngineFactory;
  /** Wall clock of the store: admission times, windows, leases (ms). */
  readonly clock: Clock;
  /** Monotonic clock for latency measurements (ms). */
  readonly timer: Clock;
  readonly logger: Logger;
  readonly options?: DispatcherOptions;
  /** Request ids. @default random UUIDs */
  readonly newId?: () => string;
  /** The control plane's leader lease (`Infrastructure.lease`). @default this process's memory */
  readonly lease?: LeaseBackend;
  /** Which admin events on the bus this dispatcher applies (see {@link adminTrustOf}). */
  readonly adminTrust: AdminTrust;
  /** Traces requests (see `startTelemetry`). @default none: no span is built */
  readonly tracer?: Tracer | undefined;
  /** The admin HTTP API on the operator port. @default off: every `/admin/v1` route answers 403 */
  readonly adminApi?: AdminApiSettings | undefined;
}

/** A built dispatcher: the fastify apps (not listening) and their parts, for tests and tools. */
export interface Dispatcher {
  /** The public API: OpenAI routes, `/health`, `/ready`. */
  readonly app: FastifyInstance;
  /**
   * The operator listener's app: `/metrics` (with `server.metricsToken` if set), `/health`,
   * `/ready` and the admin API (`/admin/v1`, with the admin token). Closed with `app`; listening
   * on `server.operatorPort` is the caller's.
   */
  readonly operator: FastifyInstance;
  readonly runtime: GatewayRuntime;
  readonly metrics: GatewayMetrics;
  /** Sets the gauges read at scrape time, as `/metrics` does before it answers (the OTLP export calls it). */
  readonly observeMetrics: () => void;
  /** Who a request's `Authorization` header authenticates as (throws the OpenAI-shaped 401s). */
  readonly authenticate: (headers: Record<string, string | string[] | undefined>) => Principal;
  /** Completions run for a tenant through the public route, in process (the Batch API's lines). */
  readonly internal: InternalCompletions;
}

const KNOWN_ROUTES: Record<string, string> = {
  '/v1/chat/completions': 'POST',
  '/v1/completions': 'POST',
  '/v1/embeddings': 'POST',
  '/v1/messages': 'POST',
  '/v1/messages/count_tokens': 'POST',
  '/v1/responses': 'POST',
  '/v1/models': 'GET',
  '/health': 'GET',
  '/ready': 'GET',
};

const OPERATOR_ROUTES: Record<string, string> = {
  '/metrics': 'GET',
  '/health': 'GET',
  '/ready': 'GET',
  ...Object.fromEntries(CONSOLE_PATHS.map((p) => [p, 'GET'])),
};

/** Closes, as it is accepted, a connection from an address that already holds `limit`. */
function capConnectionsPerIp(app: FastifyInstance, limit: number): void {
  const held = new Map<string, number>();
  app.server.on('connection', (socket: Socket) => {
    const ip = socket.remoteAddress ?? '';
    const n = (held.get(ip) ?? 0) + 1;
    if (n > limit) {
      socket.destroy();
      return;
    }
    held.set(ip, n);
    socket.once('close', () => {
      const left = (held.get(ip) ?? 1) - 1;
      if (left <= 0) held.delete(ip);
      else held.set(ip, left);
    });
  });
}

/**
 * Answers every error and unknown route of `app` with an OpenAI-shaped body and its catalogue
 * status (no stack traces); 5xx are logged.
 */
function answerErrorsAsOpenAi(app: FastifyInstance, routes: Record<string, string>, logger: Logger): void {
  app.setErrorHandler((err, request: RecordedRequest, reply) => {
    const api = toApiError(err);
    const record = request[RECORD];
    if (record !== undefined) record.outcome ??= api.kind;
    // 501 is a deployment's answer (a feature it does not run), not a failure to log.
    if (api.status >= 500 && api.status !== 501)
      logger.error({ err: err instanceof Error ? err.message : String(err) }, 'request failed');
    if (api.retryAfterS !== undefined) void reply.header('retry-after', String(api.retryAfterS));
    return reply.code(api.status).send(api.body());
  });
  app.setNotFoundHandler((request: RecordedRequest, reply) => {
    const path = request.url.split('?')[0] ?? '';
    const allowed = routes[path];
    const api =
      allowed === undefined
        ? new ApiError('ROUTE_NOT_FOUND', `no route ${request.method} ${path}`)
        : new ApiError('METHOD_NOT_ALLOWED', `${path} accepts ${allowed} only`);
    if (allowed !== undefined) void reply.header('allow', allowed);
    const record = request[RECORD];
    if (record !== undefined) record.outcome = api.kind;
    return reply.code(api.status).send(api.body());
  });
}

/**
 * Builds a dispatcher (fastify app factory; `listen` is the caller's). The gateway runtime starts
 * when the app is ready (lease, bus subscriptions, timers) and stops when it closes. Every error
 * a client can see is OpenAI-shaped with its catalogue status, and never carries a stack trace.
 */
export function buildDispatcher(deps: DispatcherDeps): Dispatcher {
  const options = resolveDispatcherOptions(deps.options ?? {}, deps.config);
  const tenants = TenantDirectory.fromConfig(deps.config);
  const scheduling = schedulingFromConfig(
    deps.config,
    deps.id,
    tenants,
    (id) => deps.registry.get(id)?.registration,
  );
  const metrics = new GatewayMetrics(
    deps.config.tenants.map((t) => t.id),
    deps.config.metrics,
  );
  const store = new TimedStore(deps.store, metrics.storeLatency, deps.timer);
  const logger = deps.logger.child({ dispatcher: deps.id });
  const configuredPools = new Set(deps.config.pools.map((p) => p.id));
  const poolByModel = new Map(deps.config.pools.map((p) => [p.model, p.id]));
  const replicas = new RegistryReplicaSource(deps.registry, (model) => poolByModel.get(model));
  const poolFor = (model: string): string | undefined => replicas.poolFor(model);
  const aliases = new ModelAliases(deps.config.models.aliases);
  const served = (model: string): boolean => poolFor(model) !== undefined;
  const aliasOf = (model: string): string | undefined => aliases.resolve(model, served);
  const fallbacks = new Map(Object.entries(deps.config.models.fallbacks));
  const engines = new EnginePool(deps.engines);
  const swapTargets: ReadonlySet<string> = new Set(
    scheduling.planner !== undefined && deps.config.policy.control.swap
      ? deps.config.policy.control.swappable
      : [],
  );
  const probe = new EngineProbe(engines, (id) => replicas.urlOf(id), options.probeTimeoutMs);
  const poolTimeouts = new Map(deps.config.pools.map((p) => [p.id, p.engineTimeouts]));
  const timeoutsFor = (pool: string): EngineTimeoutsConfig =>
    poolTimeouts.get(pool) ?? DEFAULT_ENGINE_TIMEOUTS;
  const runtime = new GatewayRuntime({
    id: deps.id,
    config: deps.config,
    store,
    bus: deps.bus,
    registry: deps.registry,
    replicas,
    probe,
    hungEngines: new HungEngines({ answers: (url) => probe.answers(url), timeoutMs: options.probeTimeoutMs }),
    timeoutsFor,
    scheduling,
    poolFor,
    options,
    clock: deps.clock,
    timer: deps.timer,
    logger,
    lease: deps.lease,
    waitsForReplica: (model) => swapTargets.has(model),
    desiredReplicasGauge: (pool, desired) => metrics.desiredReplicas.set({ pool }, desired),
    profileGauge: (model, gpu, tp, profile) => {
      const labels = { model, gpu, tp: String(tp) };
      metrics.qlmEstimatorMs.set({ ...labels, phase: 'decode' }, profile.decodeMsPerIteration);
      metrics.qlmEstimatorMs.set({ ...labels, phase: 'prefill' }, profile.prefillMs);
    },
    affinityCounter: (pool, outcome) => metrics.prefixAffinity.inc({ pool, outcome }),
  });
  const kvBlocks = runtime.kvBlocks;
  if (kvBlocks !== undefined) metrics.kvCachedBlocks = () => kvBlocks.replicaBlocks();
  const sloClasses = new Map(scheduling.sloClasses.map((c) => [c.name, c]));
  const defaultSloClass = sloClasses.has('interactive')
    ? 'interactive'
    : ([...scheduling.sloClasses].sort((a, b) => a.band - b.band)[0]?.name ?? 'interactive');
  const keys = keyRingFromConfig(deps.config, tenants);
  const auth = new Authenticator(keys, () => deps.clock.now());
  const admin = new AdminEventApplier({
    trust: deps.adminTrust,
    fleet: deps.bus.prefix,
    keys,
    tenants,
    sloClasses: new Set(sloClasses.keys()),
    onTenant: (t) => metrics.addTenant(t),
    logger,
  });
  let stopAdmin: Unsubscribe | undefined;
  let stopEvictions: Unsubscribe | undefined;
  const profiles =
    scheduling.appProfiles === undefined
      ? undefined
      : new AppProfileSharing({
          learner: scheduling.appProfiles,
          bus: deps.bus,
          dispatcherId: deps.id,
          clock: deps.clock,
          logger,
        });
  // Aladdin places by every replica's running sequences, which each dispatcher reports.
  const sequences =
    deps.config.policy.placement !== 'aladdin'
      ? undefined
      : new SequenceReports({
          bus: deps.bus,
          dispatcherId: deps.id,
          timer: deps.timer,
          clock: deps.clock,
          local: (firstSeen) => runtime.runningSequences(firstSeen),
          intervalMs: options.sequenceReportMs,
          onMerged: (byReplica) => {
            metrics.placementSequences.reset();
            metrics.placementContextTokens.reset();
            for (const [replica, list] of byReplica) {
              let context = 0;
              for (const q of list) context += q.inputTokens + q.generated;
              metrics.placementSequences.set({ replica }, list.length);
              metrics.placementContextTokens.set({ replica }, context);
            }
          },
          logger,
        });
  if (sequences !== undefined) replicas.reportSequences(sequences);
  const stopBusWatch = deps.bus.onConnectionChange?.((up) => {
    metrics.busConnected.set(up ? 1 : 0);
    if (up) logger.info('dispatcher: bus reconnected; replica states come from heartbeats again');
    else
      logger.warn('dispatcher: bus disconnected; placing on the last known replica states, probed directly');
  });
  const tokenizers = loadPoolTokenizers(deps.config);
  const priorityPools = new Set(deps.config.pools.filter((p) => p.enginePriority).map((p) => p.id));
  const poolConfigs = new Map(deps.config.pools.map((p) => [p.id, p]));
  const blockKeys = new PromptBlockKeys(
    (pool) =>
      deps.registry
        .list({ pool })
        .filter((v) => v.acceptsWork)
        .map((v) => ({ engine: engines.get(v.registration.url), blockSize: v.registration.blockSize })),
    logger,
  );
  const newId = deps.newId ?? (() => `fw-${randomUUID()}`);
  const tracer = deps.tracer;
  // One line per request, on its own logger so operators can route or silence it.
  const access = deps.logger.child({ log: 'access', dispatcher: deps.id });
  // Recent service, throttles and evictions, for the live console.
  const activity = new ActivityLog();
  const ctx: CompletionContext = {
    runtime,
    activity,
    replicas,
    engines,
    auth,
    metrics,
    options,
    sloClasses,
    defaultSloClass,
    cost: scheduling.cost,
    poolFor,
    aliasOf,
    fallbacksOf: (model) => fallbacks.get(model) ?? [],
    tokenizerFor: (pool) => tokenizers.get(pool),
    blockKeysFor: (pool, kvEvents, endpoint, body) => blockKeys.of(pool, kvEvents, endpoint, body),
    enginePriorityFor: (pool) => priorityPools.has(pool),
    poolConfigFor: (pool) => poolConfigs.get(pool),
    timeoutsFor,
    swapTargets,
    clock: deps.clock,
    timer: deps.timer,
    newId,
    logger,
    resume: runtime.resumable
      ? {
          engineFor: (replica) => {
            const url = replicas.urlOf(replica);
            return url === undefined ? undefined : engines.get(url);
          },
          queueTimeoutMs: options.queueTimeoutMs,
        }
      : undefined,
  };

  const server = deps.config.server;
  const requestTimeoutMs = server.requestTimeoutS * 1000;
  const app = Fastify({
    bodyLimit: options.bodyLimitBytes,
    logger: false,
    // The client's x-request-id when sane, else a new one: returned on every response (below).
    genReqId: (raw) => requestIdOf(raw.headers, newId),
    return503OnClosing: true,
    // A client must send its whole request (headers and body) in time, or gets a 408 and loses the
    // connection: without it a client sending headers and a trickle of body held its socket for
    // minutes (fastify's default is no limit). Responses, streams included, are not limited.
    requestTimeout: requestTimeoutMs,
    http: {
      // Every refusal, even of malformed HTTP, is an OpenAI-shaped error (see client-errors.ts).
      requireHostHeader: false,
      headersTimeout: server.headersTimeoutS * 1000,
      // Node checks the two timeouts this often (30 s by default, which would stretch them).
      connectionsCheckingInterval: Math.max(10, Math.min(1000, requestTimeoutMs / 4)),
    },
    clientErrorHandler: answerClientError,
    frameworkErrors: answerFrameworkError,
  });
  // Connections beyond the cap are closed as they are accepted, so slow or idle clients cannot
  // exhaust the process's sockets and memory.
  app.server.maxConnections = server.maxConnections;
  if (server.maxConnectionsPerIp !== undefined) capConnectionsPerIp(app, server.maxConnectionsPerIp);
  // The API takes JSON only; anything else is a 415, not a string body that fails validation.
  app.removeContentTypeParser('text/plain');
  useStrictJsonBodies(app);
  // Before the routes, so its hook and preflight route cover them.
  useCors(app, deps.config, (headers) => auth.principal(withApiKeyHeader(headers)));
  // Requests in flight, so closing can wait for them and then drop every socket left: clients
  // may hold idle or never-used keep-alive connections that would otherwise keep the server open.
  // (By record: a client's x-request-id need not be unique.)
  const inflight = new Set<RequestRecord>();
  const settled = (record: RequestRecord | undefined): void => {
    if (record !== undefined) inflight.delete(record);
  };
  // Callback hooks, not async ones: no promise per request and hook.
  app.addHook('onRequest', (request: RecordedRequest, reply, done) => {
    const arrivedAt = deps.timer.now();
    // On the raw response, so hijacked (streamed) and error answers carry it too.
    reply.raw.setHeader('x-request-id', request.id);
    const route = request.routeOptions.url;
    const trace =
      tracer === undefined
        ? undefined
        : new RequestTrace(
            tracer,
            route === undefined ? request.method : `${request.method} ${route}`,
            extractTraceContext(request.headers),
            {
              'http.request.method': request.method,
              'url.path': request.url.split('?')[0] ?? '',
              ...(route === undefined ? {} : { 'http.route': route }),
              'fairway.request_id': request.id,
            },
          );
    const record = new RequestRecord(arrivedAt, trace);
    request[RECORD] = record;
    inflight.add(record);
    reply.raw.once('close', () => {
      settled(record);
      const finished = reply.raw.writableFinished;
      if (!finished) record.clientLeft?.();
      const status = reply.raw.statusCode;
      trace?.end(status, finished);
      logAccess(access, request, record, status, finished, deps.timer.now());
    });
    try {
      checkHost(request);
    } catch (err) {
      done(err as Error);
      return;
    }
    done();
  });
  app.addHook('onResponse', (request: RecordedRequest, _reply, done) => {
    settled(request[RECORD]);
    done();
  });
  app.addHook('onReady', async () => {
    // Operator changes first, so the first request sees the same tenants and keys as every dispatcher.
    stopAdmin = await followAdminEvents(deps.bus, admin);
    stopEvictions = deps.bus.subscribe('evict', (e) => activity.evicted(e));
    profiles?.start();
    sequences?.start();
    await runtime.start();
  });
  app.addHook('preClose', async () => {
    stopAdmin?.();
    stopEvictions?.();
    stopBusWatch?.();
    profiles?.stop();
    sequences?.stop();
    await runtime.stop();
    const deadline = deps.timer.now() + options.drainTimeoutMs;
    while (inflight.size > 0 && deps.timer.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    app.server.closeAllConnections();
  });
  app.addHook('onClose', async () => engines.close());
  answerErrorsAsOpenAi(app, KNOWN_ROUTES, logger);
  void app.register(healthRoutes, { runtime });
  void app.register(openAiRoutes, {
    ctx,
    models: () => {
      const models = new Set([...scheduling.configuredModels, ...replicas.models()]);
      for (const alias of aliases.listed((m) => models.has(m))) models.add(alias);
      return [...models].sort();
    },
    aliasOf,
  });
  void app.register(anthropicRoutes, { ctx, logger });

  // Metrics apart from the public API: tenants' ids, outcomes and token counts are for operators.
  const operator = Fastify({
    logger: false,
    http: { requireHostHeader: false },
    clientErrorHandler: answerClientError,
    frameworkErrors: answerFrameworkError,
  });
  answerErrorsAsOpenAi(operator, OPERATOR_ROUTES, logger);
  void operator.register(healthRoutes, { runtime });
  void operator.register(adminApiRoutes, {
    settings: deps.adminApi ?? { token: undefined, signer: undefined },
    trust: deps.adminTrust,
    bus: deps.bus,
    tenants,
    keys,
    clock: deps.clock,
  });
  void operator.register(usageApiRoutes, {
    settings: deps.adminApi ?? { token: undefined, signer: undefined },
    trust: deps.adminTrust,
    bus: deps.bus,
    tenants,
    store,
    clock: deps.clock,
  });
  const pools = (): string[] => [...new Set([...configuredPools, ...replicas.pools()])];
  const bands = [...new Set(scheduling.sloClasses.map((c) => c.band))].sort((x, y) => x - y);
  const fleet = () => replicaSnapshots(deps.registry, replicas, runtime, deps.clock.now());
  const queues = () => bandDepths(runtime, pools(), bands);
  void operator.register(adminOverviewRoute, {
    token: deps.adminApi?.token,
    dispatcherId: deps.id,
    tenants,
    activity,
    replicas: fleet,
    queues,
    now: () => deps.clock.now(),
  });
  void operator.register(consoleRoutes);
  const observe = () => {
    metrics.observeReplicas(fleet());
    metrics.observeBands(queues());
    metrics.observeWeights(tenants.ids().map((t) => [t, tenants.weightOf(t)] as const));
  };
  void operator.register(metricsRoute, {
    runtime,
    metrics,
    pools,
    token: deps.config.server.metricsToken,
    observe,
  });
  app.addHook('onClose', async () => operator.close());
  return {
    app,
    operator,
    runtime,
    metrics,
    observeMetrics: () => observeGauges({ runtime, metrics, pools, observe }),
    authenticate: (headers) => auth.principal(headers),
    internal: new InternalCompletions(app, auth),
  };
}
