import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, startStack } from './support/stack.ts';

const KEY = 'sk-alpha-0000000001';

function config(ordering: 'qlm' | 'vtc') {
  return {
    pools: [
      { id: 'chat', model: 'llama-2-7b' },
      { id: 'code', model: 'codellama-7b' },
    ],
    tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
    policy: { ordering, control: { swappable: ['codellama-7b'] } },
  };
}

async function ask(stack: Stack, model: string): Promise<{ status: number; code: string | undefined }> {
  const res = await fetch(`${stack.dispatchers[0]?.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
  });
  const body = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: body.error?.code };
}

describe('requests for a model no replica serves yet', () => {
  let stack: Stack | undefined;
  afterEach(async () => {
    await stack?.close();
    stack = undefined;
  });

  it('are queued for the control plane when it may swap a replica to that model', async () => {
    stack = await startStack({ config: config('qlm'), options: { queueTimeoutMs: 300 } });
    // Queued (the planner sees the demand), then the queue timeout ends it: 504, not 503.
    expect(await ask(stack, 'codellama-7b')).toEqual({ status: 504, code: 'queue_timeout' });
    expect((await ask(stack, 'llama-2-7b')).status).toBe(200);
  });

  it('are refused at once with 503 when nothing may swap to it', async () => {
    stack = await startStack({ config: config('vtc'), options: { queueTimeoutMs: 300 } });
    expect(await ask(stack, 'codellama-7b')).toEqual({ status: 503, code: 'no_replica' });
  });
});
