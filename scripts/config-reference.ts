import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { fairwayConfigSchema } from '@fairway/core';
import ts from 'typescript';

/**
 * Writes `docs/operators/configuration.md`, the configuration reference: every key of the config
 * file with its type, default and description, and the environment variables fairway's processes
 * read. Types and defaults come from the zod schema (`fairwayConfigSchema.toJSONSchema`),
 * descriptions from the TSDoc comments beside each key in `packages/core/src/config.ts`, so the
 * page changes only when the schema does. `npm run docs:config` regenerates it;
 * `test/docs/docs.test.ts` fails when the file is not what this script would write.
 */

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const CONFIG_SOURCE = 'packages/core/src/config.ts';
/** Where the reference is written, relative to the repository root. */
export const CONFIG_REFERENCE_PATH = 'docs/operators/configuration.md';

/** A JSON Schema node as zod writes it for this schema (only the keywords it uses). */
interface JsonSchema {
  type?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  additionalProperties?: JsonSchema | boolean;
  default?: unknown;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  pattern?: string;
  format?: string;
}

/** One key of the config file. */
export interface ConfigKey {
  /** `tenants[].keys[].hash`, `pricing.<name>.input`, … */
  readonly path: string;
  readonly type: string;
  readonly required: boolean;
  readonly default: string;
  readonly description: string;
}

/** The TSDoc of one key: its text and its `@default` tag, if any. */
interface KeyDoc {
  readonly text: string;
  readonly defaultTag: string | undefined;
}

// ---------------------------------------------------------------------------------------------
// Descriptions: the TSDoc beside each key in config.ts, found by following the schema's source.

function docOf(node: ts.Node, source: ts.SourceFile): KeyDoc | undefined {
  const text = source.getFullText();
  const ranges = ts.getLeadingCommentRanges(text, node.getFullStart()) ?? [];
  const jsdoc = ranges.filter((r) => text.startsWith('/**', r.pos)).at(-1);
  if (jsdoc === undefined) return undefined;
  const body = text
    .slice(jsdoc.pos + 3, jsdoc.end - 2)
    .split('\n')
    .map((l) => l.replace(/^\s*\*\s?/, ''))
    .join(' ')
    .replace(/\s+/g, ' ')
    .trim();
  const at = body.search(/@default\b/);
  const main = (at < 0 ? body : body.slice(0, at)).trim();
  const defaultTag = at < 0 ? undefined : body.slice(at + '@default'.length).trim();
  return { text: main, defaultTag: defaultTag === '' ? undefined : defaultTag };
}

/** Each `const` of the file by name, with its TSDoc. */
function constants(source: ts.SourceFile): Map<string, { init: ts.Expression; doc: KeyDoc | undefined }> {
  const found = new Map<string, { init: ts.Expression; doc: KeyDoc | undefined }>();
  for (const stmt of source.statements) {
    if (!ts.isVariableStatement(stmt)) continue;
    for (const decl of stmt.declarationList.declarations)
      if (ts.isIdentifier(decl.name) && decl.initializer !== undefined)
        found.set(decl.name.text, { init: decl.initializer, doc: docOf(stmt, source) });
  }
  return found;
}

type Shape =
  | { kind: 'object'; literal: ts.ObjectLiteralExpression; doc: KeyDoc | undefined }
  | { kind: 'array' | 'record'; inner: ts.Expression; doc: KeyDoc | undefined }
  | { kind: 'leaf'; doc: KeyDoc | undefined };

/** What a schema expression builds, following method chains and named constants. */
function shapeOf(
  expr: ts.Expression,
  consts: ReturnType<typeof constants>,
  doc: KeyDoc | undefined = undefined,
): Shape {
  let e: ts.Expression = expr;
  for (;;) {
    if (ts.isParenthesizedExpression(e)) e = e.expression;
    else if (ts.isCallExpression(e) && ts.isPropertyAccessExpression(e.expression)) {
      const method = e.expression.name.text;
      const target = e.expression.expression;
      if (ts.isIdentifier(target) && target.text === 'z') {
        const [a0, a1] = e.arguments;
        if (method === 'object' && a0 !== undefined && ts.isObjectLiteralExpression(a0))
          return { kind: 'object', literal: a0, doc };
        if (method === 'array' && a0 !== undefined) return { kind: 'array', inner: a0, doc };
        if (method === 'record' && a1 !== undefined) return { kind: 'record', inner: a1, doc };
        return { kind: 'leaf', doc };
      }
      e = target;
    } else if (ts.isIdentifier(e)) {
      const c = consts.get(e.text);
      if (c === undefined) return { kind: 'leaf', doc };
      // A named schema's own doc describes a key only when the schema is a structure (an object,
      // list or map); a named scalar (an id, a positive number) says nothing about the key.
      const shape = shapeOf(c.init, consts, doc);
      return shape.kind === 'leaf' || doc !== undefined ? shape : { ...shape, doc: c.doc };
    } else return { kind: 'leaf', doc };
  }
}

/** `{@link x}` as code; a key whose whole doc is "See {@link x}." takes x's doc. */
function resolveDoc(doc: KeyDoc | undefined, consts: ReturnType<typeof constants>): KeyDoc | undefined {
  if (doc === undefined) return undefined;
  const see = /^See \{@link (\w+)\}\.?$/.exec(doc.text);
  const target = see?.[1] !== undefined ? consts.get(see[1])?.doc : undefined;
  const d = target ?? doc;
  const link = (s: string): string => s.replace(/\{@link (\w+)\}/g, '`$1`');
  return {
    text: link(d.text),
    defaultTag: d.defaultTag === undefined ? undefined : link(d.defaultTag),
  };
}

/** The TSDoc of every key path, walking the source from `fairwayConfigSchema`. */
function keyDocs(): Map<string, KeyDoc> {
  const file = `${ROOT}${CONFIG_SOURCE}`;
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const consts = constants(source);
  const docs = new Map<string, KeyDoc>();
  const visit = (shape: Shape, path: string): void => {
    if (shape.kind === 'array') visit(shapeOf(shape.inner, consts), `${path}[]`);
    else if (shape.kind === 'record') visit(shapeOf(shape.inner, consts), `${path}.<name>`);
    else if (shape.kind === 'object')
      for (const prop of shape.literal.properties) {
        const name =
          prop.name !== undefined && (ts.isIdentifier(prop.name) || ts.isStringLiteral(prop.name))
            ? prop.name.text
            : undefined;
        if (name === undefined) continue;
        const value = ts.isPropertyAssignment(prop)
          ? prop.initializer
          : ts.isShorthandPropertyAssignment(prop)
            ? prop.name
            : undefined;
        if (value === undefined) continue;
        const key = path === '' ? name : `${path}.${name}`;
        const own = docOf(prop, source);
        const child = shapeOf(value, consts, own);
        const doc = resolveDoc(child.doc, consts);
        if (doc !== undefined) docs.set(key, doc);
        visit(child, key);
      }
  };
  const root = consts.get('fairwayConfigSchema');
  if (root === undefined) throw new Error(`${CONFIG_SOURCE}: no fairwayConfigSchema`);
  visit(shapeOf(root.init, consts), '');
  return docs;
}

// ---------------------------------------------------------------------------------------------
// Types and defaults: the schema itself, as JSON Schema.

const ID_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$';

function range(s: JsonSchema): string {
  const lo =
    s.exclusiveMinimum !== undefined
      ? `> ${s.exclusiveMinimum}`
      : s.minimum !== undefined && s.minimum > Number.MIN_SAFE_INTEGER
        ? `≥ ${s.minimum}`
        : undefined;
  const hi =
    s.exclusiveMaximum !== undefined
      ? `< ${s.exclusiveMaximum}`
      : s.maximum !== undefined && s.maximum < Number.MAX_SAFE_INTEGER
        ? `≤ ${s.maximum}`
        : undefined;
  return [lo, hi].filter((x) => x !== undefined).join(', ');
}

function typeOf(s: JsonSchema): string {
  if (s.enum !== undefined) return s.enum.map((v) => `\`${JSON.stringify(v)}\``).join(' | ');
  const bounds = range(s);
  switch (s.type) {
    case 'string': {
      const parts = [
        s.pattern === ID_PATTERN ? 'id: 1–64 of `A-Z a-z 0-9 . _ : -`' : undefined,
        s.pattern !== undefined && s.pattern !== ID_PATTERN ? `matching \`${s.pattern}\`` : undefined,
        s.format === 'uri' ? 'URL' : undefined,
        s.minLength !== undefined && s.minLength > 1 ? `≥ ${s.minLength} characters` : undefined,
        s.maxLength !== undefined ? `≤ ${s.maxLength} characters` : undefined,
      ].filter((x) => x !== undefined);
      return parts.length === 0 ? 'string' : `string (${parts.join(', ')})`;
    }
    case 'integer':
    case 'number':
      return bounds === '' ? s.type : `${s.type} ${bounds}`;
    case 'boolean':
      return 'boolean';
    case 'array': {
      const item = s.items === undefined ? 'any' : s.items.type === 'object' ? 'object' : typeOf(s.items);
      const n = [
        s.minItems !== undefined ? `≥ ${s.minItems}` : undefined,
        s.maxItems !== undefined ? `≤ ${s.maxItems}` : undefined,
      ].filter((x) => x !== undefined);
      return `list of ${item}${n.length === 0 ? '' : ` (${n.join(', ')} items)`}`;
    }
    case 'object':
      if (typeof s.additionalProperties === 'object') return 'map: name → value';
      return 'object';
    default:
      return 'any';
  }
}

function defaultOf(s: JsonSchema, doc: KeyDoc | undefined, required: boolean): string {
  if (s.default !== undefined) {
    const nested = s.type === 'object' && s.properties !== undefined;
    if (nested && typeof s.default === 'object' && s.default !== null)
      return Object.keys(s.default).length === 0
        ? '`{}` (each key its own default)'
        : 'each key its own default';
    return `\`${JSON.stringify(s.default)}\``;
  }
  if (doc?.defaultTag !== undefined) return doc.defaultTag;
  return required ? 'required' : 'unset';
}

/** Every key of the config file, in schema order, parents before their children. */
export function configKeys(): ConfigKey[] {
  const schema = fairwayConfigSchema.toJSONSchema({ io: 'input', unrepresentable: 'any' }) as JsonSchema;
  const docs = keyDocs();
  const keys: ConfigKey[] = [];
  const visit = (s: JsonSchema, path: string): void => {
    if (s.type === 'array' && s.items !== undefined) visit(s.items, `${path}[]`);
    if (s.type === 'object' && typeof s.additionalProperties === 'object')
      visit(s.additionalProperties, `${path}.<name>`);
    for (const [name, child] of Object.entries(s.properties ?? {})) {
      const key = path === '' ? name : `${path}.${name}`;
      const required = s.required?.includes(name) ?? false;
      const doc = docs.get(key);
      keys.push({
        path: key,
        type: typeOf(child),
        required,
        default: defaultOf(child, doc, required),
        description: doc?.text ?? '',
      });
      visit(child, key);
    }
  };
  visit(schema, '');
  return keys;
}

// ---------------------------------------------------------------------------------------------
// Environment variables: what each process reads. `test/docs/docs.test.ts` finds every variable
// the sources read and fails when one is missing here.

/** An environment variable, the commands that read it and what it does. */
interface EnvVar {
  readonly name: string;
  readonly readBy: string;
  readonly meaning: string;
}

const ENVIRONMENT: readonly EnvVar[] = [
  { name: 'FAIRWAY_CONFIG', readBy: 'serve', meaning: 'the config file (`--config`)' },
  {
    name: 'REDIS_URL',
    readBy: 'serve, up',
    meaning:
      'Redis of the shared store, `redis://` or `rediss://` (`--redis-url`); `serve` defaults to `redis://127.0.0.1:6379`, `up` runs on the in-memory store without it (and without sentinels, a cluster or `store.redis`)',
  },
  {
    name: 'REDIS_CLUSTER',
    readBy: 'serve, up',
    meaning:
      'a Redis Cluster’s seed nodes, `host:port,host:port` (`--redis-cluster`); `store.slotGroups` spreads pools over its primaries',
  },
  {
    name: 'REDIS_SENTINELS',
    readBy: 'serve, up',
    meaning: 'Redis Sentinel nodes, `host:port,host:port`; the store asks them for the primary',
  },
  {
    name: 'REDIS_SENTINEL_NAME',
    readBy: 'serve, up',
    meaning: 'the monitored primary’s name; required with `REDIS_SENTINELS`',
  },
  { name: 'REDIS_SENTINEL_PASSWORD', readBy: 'serve, up', meaning: 'password of the sentinels' },
  {
    name: 'REDIS_PASSWORD',
    readBy: 'serve, up',
    meaning:
      'password of Redis: of `REDIS_URL`’s server when the URL carries none (a password in the URL wins), of the primary and replicas through Sentinel (`store.redis` too, when it gives none), of a cluster’s nodes',
  },
  { name: 'REDIS_TLS', readBy: 'serve, up', meaning: '`1`: TLS to the sentinels, cluster nodes and primary' },
  {
    name: 'REDIS_COMMAND_TIMEOUT_MS',
    readBy: 'serve, up',
    meaning:
      'how long one Redis command may go unanswered before it fails, ms, default 5000 (a Redis that hangs: arrivals answered `503 not_ready`, see [faults](faults.md))',
  },
  {
    name: 'NATS_URL',
    readBy: 'serve, up, agent, admin',
    meaning:
      'NATS of the bus (`--nats-url`); `serve`, `agent` and `admin` default to `nats://127.0.0.1:4222`, `up` runs on the in-process bus without it',
  },
  { name: 'NATS_USER', readBy: 'serve, up, agent, engine-sim, admin', meaning: 'NATS user (`--nats-user`)' },
  {
    name: 'NATS_PASSWORD',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'NATS password (`--nats-password`)',
  },
  {
    name: 'NATS_TOKEN',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'NATS token (`--nats-token`)',
  },
  {
    name: 'NATS_NKEY_SEED_FILE',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'file holding an NKey user seed (`--nats-nkey-seed`)',
  },
  {
    name: 'NATS_CREDS_FILE',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'NATS `.creds` file (`--nats-creds`)',
  },
  {
    name: 'NATS_TLS_CA_FILE',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'CA of the NATS server’s certificate (`--nats-tls-ca`)',
  },
  {
    name: 'NATS_TLS_CERT_FILE',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'client certificate (`--nats-tls-cert`)',
  },
  {
    name: 'NATS_TLS_KEY_FILE',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'client key (`--nats-tls-key`)',
  },
  { name: 'PORT', readBy: 'serve', meaning: 'API port (`--port`), default 8080' },
  { name: 'HOST', readBy: 'serve', meaning: 'API interface (`--host`), default 127.0.0.1' },
  {
    name: 'FAIRWAY_OPERATOR_PORT',
    readBy: 'serve, up',
    meaning:
      'operator port: `/metrics`, `/health`, `/ready`, admin API, console (`--operator-port`, `server.operatorPort`); 0 disables it',
  },
  {
    name: 'FAIRWAY_OPERATOR_HOST',
    readBy: 'serve, up',
    meaning: 'interface of the operator port (`--operator-host`, `server.operatorHost`)',
  },
  {
    name: 'FAIRWAY_PREFIX',
    readBy: 'serve, up, agent, engine-sim, admin',
    meaning: 'Redis key and NATS subject prefix (`--prefix`), default `fairway`',
  },
  {
    name: 'FAIRWAY_DISPATCHER_ID',
    readBy: 'serve, up',
    meaning: 'dispatcher name, suffixed with a random token per start (`--id`), default `<hostname>-<pid>`',
  },
  {
    name: 'FAIRWAY_LEASE_MS',
    readBy: 'serve, up',
    meaning: 'lease on what a dispatcher holds, ms (`--lease-ms`), default 10000; renewed every third',
  },
  {
    name: 'FAIRWAY_QUEUE_TIMEOUT_MS',
    readBy: 'serve, up',
    meaning: 'longest wait for capacity before 504 `queue_timeout`, ms; default `policy.queueTimeoutS`',
  },
  {
    name: 'FAIRWAY_DEFAULT_MAX_TOKENS',
    readBy: 'serve, up',
    meaning: 'output cap injected when a request gives no `max_tokens`, default 1024',
  },
  {
    name: 'FAIRWAY_BODY_LIMIT_BYTES',
    readBy: 'serve, up',
    meaning: 'largest request body, bytes (413 above), default 4194304 (4 MiB)',
  },
  {
    name: 'FAIRWAY_RESERVE',
    readBy: 'serve, up',
    meaning:
      'what a request reserves on its replica and in TPM windows: `max-tokens` (default) or `predicted`',
  },
  {
    name: 'FAIRWAY_REPREDICT',
    readBy: 'serve, up',
    meaning: '`1`: re-predict the output of requests that outrun their prediction (Aladdin 4.3)',
  },
  {
    name: 'FAIRWAY_STALE_MS',
    readBy: 'serve, up',
    meaning:
      'a replica whose heartbeat is older than this gets no new work, ms, default 1000 (unless no replica has been heard for that long: then the bus is taken for silent, see [faults](faults.md))',
  },
  {
    name: 'FAIRWAY_LOG_LEVEL',
    readBy: 'serve',
    meaning: '`debug`, `info` (default), `warn`, `error` or `silent`',
  },
  {
    name: 'FAIRWAY_OPERATOR_PUBLIC_KEY_FILE',
    readBy: 'serve, up',
    meaning:
      'operator public key file(s), comma-separated, whose signed admin events apply (`--operator-public-key`)',
  },
  {
    name: 'FAIRWAY_ADMIN_TOKEN_FILE',
    readBy: 'serve, up, admin usage',
    meaning: 'file holding the admin API’s bearer token (`--admin-token-file`)',
  },
  {
    name: 'FAIRWAY_OPERATOR_KEY_FILE',
    readBy: 'serve, up, admin',
    meaning: 'operator private key that signs admin events (`--operator-key`)',
  },
  {
    name: 'FAIRWAY_SHUTDOWN_TIMEOUT_MS',
    readBy: 'serve, up, agent, engine-sim',
    meaning:
      'on SIGTERM/SIGINT, time to finish before connections are dropped and the process exits 1 (`--shutdown-timeout`), default 10000',
  },
  {
    name: 'FAIRWAY_ADVERTISE_URL',
    readBy: 'agent, engine-sim',
    meaning: 'the URL the agent registers for dispatchers to reach the engine at (`--advertise-url`)',
  },
  {
    name: 'PYTHONHASHSEED',
    readBy: 'engine-sim',
    meaning:
      'seed of `--prefix-caching-hash-algo sha256_cbor` block hashes, as vLLM’s; unset, random per process (nobody else can compute them)',
  },
  {
    name: 'VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES',
    readBy: 'engine-sim',
    meaning:
      '`0`: KV cache events carry block hashes as their 32 bytes; `1` (default, as vLLM): as the integer of their low 64 bits',
  },
  {
    name: 'FAIRWAY_ADMIN_URL',
    readBy: 'admin usage',
    meaning: 'a dispatcher’s operator port (`--url`), default `http://127.0.0.1:9464`',
  },
  {
    name: 'FAIRWAY_BATCH_CONCURRENCY',
    readBy: 'serve, up',
    meaning: 'batch lines one dispatcher runs at once, default 8',
  },
  {
    name: 'FAIRWAY_BATCH_LOCK_MS',
    readBy: 'serve, up',
    meaning:
      'lock of a running batch line, ms: how soon a dead dispatcher’s lines run elsewhere, default 30000',
  },
  {
    name: 'FAIRWAY_BATCH_MAX_FILE_BYTES',
    readBy: 'serve, up',
    meaning: 'largest batch input file, bytes, default 33554432 (32 MiB)',
  },
  {
    name: 'FAIRWAY_BATCH_SLO_CLASS',
    readBy: 'serve, up',
    meaning: 'SLO class batch lines run in; default the configured class of the lowest priority',
  },
  {
    name: 'FAIRWAY_HEALTHCHECK_URL',
    readBy: 'the image’s health check (`bin/healthcheck.js`)',
    meaning: 'URL it probes instead of the dispatcher’s `/health`',
  },
  {
    name: 'FAIRWAY_DEBUG',
    readBy: 'every command',
    meaning: '`1`: print the stack trace of an internal error',
  },
  {
    name: 'OTEL_SDK_DISABLED',
    readBy: 'serve, up',
    meaning: '`true`: no tracing, whatever the rest says',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    readBy: 'serve, up',
    meaning: 'OTLP/HTTP endpoint (`<endpoint>/v1/traces`); setting it turns tracing on',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
    readBy: 'serve, up',
    meaning: 'the traces endpoint itself; setting it turns tracing on',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_PROTOCOL',
    readBy: 'serve, up',
    meaning: '`http/protobuf` (default) or `http/json`; gRPC is refused at start',
  },
  { name: 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', readBy: 'serve, up', meaning: 'as above, for traces only' },
  {
    name: 'OTEL_TRACES_SAMPLER',
    readBy: 'serve, up',
    meaning:
      'replaces `telemetry.tracing.sampleRatio` (with `OTEL_TRACES_SAMPLER_ARG`), e.g. `parentbased_traceidratio`',
  },
  {
    name: 'OTEL_SERVICE_NAME',
    readBy: 'serve, up',
    meaning:
      'the resource’s service name, default `fairway-dispatcher` (also `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, as in any OTel SDK)',
  },
  {
    name: 'OTEL_TRACES_EXPORTER',
    readBy: 'serve, up',
    meaning:
      '`otlp` (default), `console` (spans printed to stdout) or `none` (tracing off even with an endpoint)',
  },
  {
    name: 'OTEL_METRICS_EXPORTER',
    readBy: 'serve, up',
    meaning: '`otlp`: the dispatcher’s metrics are exported over OTLP too (Prometheus’s `/metrics` stays)',
  },
  {
    name: 'OTEL_METRIC_EXPORT_INTERVAL',
    readBy: 'serve, up',
    meaning: 'ms between OTLP metric exports, default 60000',
  },
  {
    name: 'OTEL_NODE_ENABLED_INSTRUMENTATIONS',
    readBy: 'serve, up',
    meaning: 'libraries instrumented while tracing: `ioredis` (default), `undici`, `fastify`',
  },
  {
    name: 'OTEL_NODE_DISABLED_INSTRUMENTATIONS',
    readBy: 'serve, up',
    meaning: 'libraries taken out of the list above',
  },
  {
    name: 'OTEL_NODE_RESOURCE_DETECTORS',
    readBy: 'serve, up',
    meaning:
      'resource detectors; default the environment’s and the host’s only (the process detector would export the command line, where a password may be a flag)',
  },
];

// ---------------------------------------------------------------------------------------------

/** Text for a table cell: pipes escaped, and `<…>` outside code spans kept from reading as HTML. */
function cell(s: string): string {
  return s
    .split('`')
    .map((part, i) => (i % 2 === 0 ? part.replace(/</g, '&lt;').replace(/>/g, '&gt;') : part))
    .join('`')
    .replace(/\|/g, '\\|')
    .replace(/\n/g, ' ');
}

/** The configuration reference as Markdown. */
export function renderConfigReference(): string {
  const keys = configKeys();
  const lines = [
    '# Configuration reference',
    '',
    '<!-- Generated by `npm run docs:config` (scripts/config-reference.ts) from the config schema in',
    `     ${CONFIG_SOURCE}. Do not edit by hand: change the schema or its comments and regenerate. -->`,
    '',
    'The config file is YAML or JSON, given to `fairway serve` with `--config` (or `FAIRWAY_CONFIG`)',
    'and to `fairway up` with `--config` (default `infra/fairway.example.yaml`, an annotated example).',
    'It is validated when a process starts: an unknown key or a bad value stops it with a message naming',
    'the key. `[]` in a path is any item of a list; `<name>` is any key of a map.',
    '',
    'Tenants, keys, limits and quotas can also be changed on a running fleet with signed admin events',
    '(`fairway admin`, the admin API); the file is the starting point those events apply to. See',
    '[security](security.md) and [usage and quotas](usage-and-quotas.md).',
    '',
    '## Keys',
    '',
    '| key | type | default | description |',
    '|---|---|---|---|',
    ...keys.map(
      (k) => `| \`${k.path}\` | ${cell(k.type)} | ${cell(k.default)} | ${cell(k.description) || '—'} |`,
    ),
    '',
    '## Environment variables',
    '',
    'Flags win over the environment, and the environment over the config file. Secrets (passwords,',
    'tokens) are better given here or in files than on a command line, which every user of the host',
    'can read.',
    '',
    '| variable | read by | meaning |',
    '|---|---|---|',
    ...ENVIRONMENT.map((v) => `| \`${v.name}\` | ${cell(v.readBy)} | ${cell(v.meaning)} |`),
    '',
  ];
  return lines.join('\n');
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(`${ROOT}${CONFIG_REFERENCE_PATH}`, renderConfigReference());
  console.log(`wrote ${CONFIG_REFERENCE_PATH}`);
}
