import { DEFAULT_SLO_CLASSES, hashApiKey, parseConfig } from '@fairway/core';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { utcDay } from '../src/quotas.ts';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * Fallbacks (`models.fallbacks`): a request for a model whose pool cannot take it — no replica
 * serving, its queue full, its SLO class unable to start in time — is admitted in the next pool of
 * the chain, charged once there, and answered with the name the client asked for. A tenant's own
 * limits never fall back.
 */

const BIG = 'llama-2-70b';
const SMALL = 'llama-2-7b';
const KEY = 'sk-fallback-tenant-0001';
const LIMITED = 'sk-fallback-limited-001';

const ask = (client: OpenAI, model = BIG, maxTokens = 3) =>
  client.chat.completions
    .create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens })
    .withResponse();

async function metrics(s: Stack): Promise<string> {
  return (await s.dispatchers[0]!.dispatcher.operator.inject({ method: 'GET', url: '/metrics' })).body;
}

describe('model fallbacks: a pool with no replica', () => {
  let s: Stack;
  let client: OpenAI;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          { id: 'acme', keys: [{ key: KEY }] },
          { id: 'limited', keys: [{ key: LIMITED }], limits: { rpm: 2 } },
        ],
        pools: [
          { id: 'small', model: SMALL },
          { id: 'big', model: BIG },
        ],
        models: { aliases: { 'gpt-4o': BIG }, fallbacks: { [BIG]: [SMALL] } },
      },
      // Only the small model has a replica.
      engines: [{ servedModelName: SMALL }],
    });
    client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => s?.close());

  it('serves the request in the next pool, named as asked, and says so in a header and a metric', async () => {
    const { data, response } = await ask(client);
    expect(data.model).toBe(BIG);
    expect(data.usage?.completion_tokens).toBe(3);
    expect(response.headers.get('x-fairway-fallback-model')).toBe(SMALL);
    // An alias of the model falls back the same way and keeps the alias's name.
    const aliased = await ask(client, 'gpt-4o');
    expect(aliased.data.model).toBe('gpt-4o');
    expect(aliased.response.headers.get('x-fairway-fallback-model')).toBe(SMALL);
    // A request for the model that serves needs no fallback.
    const direct = await ask(client, SMALL);
    expect(direct.response.headers.get('x-fairway-fallback-model')).toBeNull();
    expect(await metrics(s)).toMatch(
      /fairway_fallbacks_total\{from_pool="big",to_pool="small",reason="no_replica"\} 2/,
    );
  });

  it('streams from the fallback with the name asked in every chunk', async () => {
    const stream = await client.chat.completions.create({
      model: BIG,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
      stream: true,
    });
    const models = new Set<string>();
    for await (const c of stream) models.add(c.model);
    expect([...models]).toEqual([BIG]);
  });

  it('charges a fallen-back request once: one RPM slot, one usage record', async () => {
    const limited = new OpenAI({ apiKey: LIMITED, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
    await ask(limited);
    await ask(limited);
    // Two requests used the two slots of the minute: each counted once, not once per pool tried.
    const third = await ask(limited).catch((e: unknown) => e);
    expect(third).toBeInstanceOf(OpenAI.RateLimitError);
    const day = utcDay(Date.now());
    await waitFor(
      async () => (await s.store.usage!({ days: [day], key: hashApiKey(LIMITED) }))[0]?.requests === 2,
      5000,
    );
    const rows = await s.store.usage!({ days: [day], key: hashApiKey(LIMITED) });
    expect(rows.map((r) => [r.model, r.requests])).toEqual([[SMALL, 2]]);
  });
});

describe('model fallbacks: a pool whose queue is full', () => {
  let s: Stack | undefined;
  afterEach(async () => {
    await s?.close();
    s = undefined;
  });

  it('passes on what its queue cannot hold and nothing else', async () => {
    s = await startStack({
      config: {
        tenants: [{ id: 'acme', keys: [{ key: KEY }] }],
        pools: [
          { id: 'small', model: SMALL },
          // One sequence at a time, one request queued: a third request finds the queue full.
          { id: 'big', model: BIG, maxQueued: 1 },
        ],
        models: { fallbacks: { [BIG]: [SMALL] } },
      },
      engines: [{ servedModelName: SMALL }, { servedModelName: BIG, maxNumSeqs: 1, speed: 5 }],
    });
    const client = new OpenAI({ apiKey: KEY, baseURL: `${s.dispatchers[0]!.url}/v1`, maxRetries: 0 });
    // 600 tokens at speed 5: still running while the two after it arrive, however loaded the machine.
    const running = client.chat.completions
      .create({
        model: BIG,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 600,
        // engine-sim's own field: the answer's length.
        ...{ fairway_output_tokens: 600 },
      })
      .withResponse();
    await waitFor(
      async () => /fairway_requests_in_flight\{state="running"\} 1/.test(await metrics(s!)),
      5000,
    );
    const queued = ask(client, BIG, 3);
    await waitFor(async () => /fairway_requests_in_flight\{state="queued"\} 1/.test(await metrics(s!)), 5000);
    const over = await ask(client, BIG, 3);
    expect(over.response.headers.get('x-fairway-fallback-model')).toBe(SMALL);
    expect(over.data.model).toBe(BIG);
    const [first, second] = await Promise.all([running, queued]);
    expect(first.response.headers.get('x-fairway-fallback-model')).toBeNull();
    expect(second.response.headers.get('x-fairway-fallback-model')).toBeNull();
    expect(await metrics(s)).toMatch(
      /fairway_fallbacks_total\{from_pool="big",to_pool="small",reason="queue_full"\} 1/,
    );
  });
});

describe('model fallbacks: a pool whose queue would start a request past its deadline', () => {
  let s: Stack | undefined;
  afterEach(async () => {
    await s?.close();
    s = undefined;
  });

  it('passes on what would start too late there: the next pool serves it, named as asked', async () => {
    s = await startStack({
      config: {
        tenants: [{ id: 'acme', keys: [{ key: KEY }] }],
        pools: [
          { id: 'small', model: SMALL },
          { id: 'big', model: BIG },
        ],
        sloClasses: DEFAULT_SLO_CLASSES.map((c) => ({ ...c, queueDeadlineS: 1 })),
        models: { fallbacks: { [BIG]: [SMALL] } },
      },
      // The big model's one replica runs two sequences, slowly; the small model's takes many.
      engines: [
        { servedModelName: SMALL, maxNumSeqs: 256 },
        { servedModelName: BIG, maxNumSeqs: 2, speed: 4 },
      ],
      options: { queueTimeoutMs: 120_000 },
      redis: true,
    });
    const url = s.dispatchers[0]!.url;
    const send = async () => {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: BIG,
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 64,
          fairway_output_tokens: 64,
        }),
      });
      const body = (await res.json()) as { model?: string };
      return { status: res.status, model: body.model, servedBy: res.headers.get('x-fairway-fallback-model') };
    };
    // Until the big replica's finish rate is measured, admission predicts no wait.
    const registry = s.infra.registry;
    await waitFor(async () => {
      await Promise.all(Array.from({ length: 4 }, send));
      return registry.finishRateOf('sim-2') > 0;
    }, 20_000);
    const answers = (
      await Promise.all(Array.from({ length: 40 }, async () => [await send(), await send(), await send()]))
    ).flat();
    const passed = answers.filter((a) => a.servedBy === SMALL);
    expect(passed.length).toBeGreaterThan(0);
    for (const a of passed) expect([a.status, a.model]).toEqual([200, BIG]);
    expect(await metrics(s)).toMatch(
      /fairway_fallbacks_total\{from_pool="big",to_pool="small",reason="over_deadline"\} [1-9]/,
    );
  }, 120_000);
});

describe('model fallbacks: configuration', () => {
  const base = {
    pools: [
      { id: 'small', model: SMALL },
      { id: 'big', model: BIG },
    ],
  };

  it('refuses a chain naming a model no pool serves, or one model twice', () => {
    expect(() => parseConfig({ ...base, models: { fallbacks: { [BIG]: ['mistral-7b'] } } }, 't')).toThrow(
      /mistral-7b.*no model a pool serves/,
    );
    expect(() => parseConfig({ ...base, models: { fallbacks: { 'gpt-4o': [SMALL] } } }, 't')).toThrow(
      /gpt-4o.*no model a pool serves/,
    );
    expect(() => parseConfig({ ...base, models: { fallbacks: { [BIG]: [SMALL, BIG] } } }, 't')).toThrow(
      /named twice/,
    );
    expect(parseConfig({ ...base, models: { fallbacks: { [BIG]: [SMALL] } } }, 't').models.fallbacks).toEqual(
      {
        [BIG]: [SMALL],
      },
    );
  });
});
