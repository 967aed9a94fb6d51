import { describe, expect, it } from 'vitest';
import { startEngineSim } from '../src/index.ts';

async function firstId(seed: number): Promise<string> {
  const sim = await startEngineSim({ servedModelName: 'llama-2-7b', speed: 50, seed });
  try {
    const res = await fetch(`${sim.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'llama-2-7b',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 2,
      }),
    });
    return ((await res.json()) as { id: string }).id;
  } finally {
    await sim.close();
  }
}

describe('engine-sim response ids', () => {
  it('differ across replicas of one fleet (neighbouring seeds), as vLLM ids do', async () => {
    const [a, b] = [await firstId(0), await firstId(1)];
    expect(a).toMatch(/^chatcmpl-[0-9a-f]+$/);
    expect(a).not.toBe(b);
  });
});
