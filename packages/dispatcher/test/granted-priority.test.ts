import { DEFAULT_SLO_CLASSES, type SloClass } from '@fairway/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Principal } from '../src/auth.ts';
import type { ChatCompletionBody } from '../src/openai-schemas.ts';
import { describeRequest } from '../src/request-descriptor.ts';
import { type Stack, startStack } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const BATCH_KEY = 'sk-test-batch-tenant-01';
const GRANTED_KEY = 'sk-test-batch-granted-01';
const INTERACTIVE_KEY = 'sk-test-interactive-01';
const TEMPLATE_KEY = 'sk-test-template-01';

function chat(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, ...extra };
}

describe('SLO class and engine fields: granted, never claimed', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [
          {
            id: 'batchco',
            sloClass: 'batch-1',
            keys: [{ key: BATCH_KEY }, { key: GRANTED_KEY, sloClasses: ['interactive'] }],
          },
          { id: 'chatco', keys: [{ key: INTERACTIVE_KEY }] },
          { id: 'templco', engineFields: ['chat_template'], keys: [{ key: TEMPLATE_KEY }] },
        ],
        pools: [{ id: 'llama', model: MODEL }],
      },
    });
  });
  afterAll(async () => {
    await s.close();
  });

  async function post(key: string, body: Record<string, unknown>, extra: Record<string, string> = {}) {
    return s.dispatchers[0]!.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...extra },
      payload: body,
    });
  }

  it('refuses a header that claims a class ahead of the key’s own, naming the granted class', async () => {
    const res = await post(BATCH_KEY, chat(), { 'x-fairway-slo-class': 'interactive' });
    expect(res.statusCode).toBe(403);
    expect(res.json().error.param).toBe('x-fairway-slo-class');
    expect(res.json().error.message).toContain('"batch-1"');
  });

  it('lets any key lower its own class, and a granted key choose a named one', async () => {
    expect((await post(INTERACTIVE_KEY, chat(), { 'x-fairway-slo-class': 'batch-2' })).statusCode).toBe(200);
    expect((await post(BATCH_KEY, chat(), { 'x-fairway-slo-class': 'batch-2' })).statusCode).toBe(200);
    expect((await post(GRANTED_KEY, chat(), { 'x-fairway-slo-class': 'interactive' })).statusCode).toBe(200);
  });

  it('refuses an engine priority from the client: fairway sets it', async () => {
    const res = await post(INTERACTIVE_KEY, chat({ priority: -100 }));
    expect(res.statusCode).toBe(400);
    expect(res.json().error.param).toBe('priority');
  });

  it.each([
    ['kv_transfer_params', { do_remote_prefill: true, remote_host: '10.0.0.9' }],
    ['chat_template', '{{ messages }}'],
    ['request_id', 'someone-elses-id'],
    ['logits_processors', ['evil.module:Proc']],
    ['vllm_xargs', { a: 1 }],
    ['best_of', 20],
  ])('refuses the restricted engine field %s from a key not granted it', async (field, value) => {
    const res = await post(INTERACTIVE_KEY, chat({ [field]: value }));
    expect(res.statusCode).toBe(403);
    expect(res.json().error.param).toBe(field);
  });

  it('forwards a restricted field to a tenant granted it, and no other', async () => {
    const ok = await post(
      TEMPLATE_KEY,
      chat({ chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}' }),
    );
    expect(ok.statusCode).toBe(200);
    expect((await post(TEMPLATE_KEY, chat({ request_id: 'x' }))).statusCode).toBe(403);
  });
});

describe('describeRequest', () => {
  const classes = new Map<string, SloClass>(DEFAULT_SLO_CLASSES.map((c) => [c.name, c]));
  const principal: Principal = { tenant: 't', weight: 1, app: undefined, sloClass: 'batch-1' };
  const describe1 = (enginePriority: boolean) =>
    describeRequest({
      id: 'r1',
      endpoint: 'chat',
      body: chat() as ChatCompletionBody,
      principal,
      headers: { app: undefined, user: undefined, sloClass: 'batch-2', interaction: undefined },
      arrivalMs: 0,
      sloClasses: classes,
      defaultSloClass: 'interactive',
      defaultMaxTokens: 16,
      enginePriority,
    });

  it('sets vLLM priority to the class band on pools that schedule by priority, and none elsewhere', () => {
    const on = describe1(true);
    expect(on.forwardBody.priority).toBe(2);
    expect(on.descriptor.priority).toBe(2);
    const off = describe1(false);
    expect(off.forwardBody.priority).toBeUndefined();
    expect(off.descriptor.sloClass).toBe('batch-2');
  });
});
