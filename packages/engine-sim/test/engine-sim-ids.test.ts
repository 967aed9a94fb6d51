import { describe, expect, it } from 'vitest';
import { startEngineSim } from '../src/index.ts';

async function ids(seed: number, n = 1): Promise<string[]> {
  const sim = await startEngineSim({ servedModelName: 'llama-2-7b', speed: 50, seed });
  try {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const res = await fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'llama-2-7b',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 2,
        }),
      });
      out.push(((await res.json()) as { id: string }).id);
    }
    return out;
  } finally {
    await sim.close();
  }
}

async function firstId(seed: number): Promise<string> {
  return (await ids(seed))[0] as string;
}

describe('engine-sim response ids', () => {
  it('differ across replicas of one fleet (neighbouring seeds), as vLLM ids do', async () => {
    const [a, b] = [await firstId(0), await firstId(1)];
    expect(a).toMatch(/^chatcmpl-[0-9a-f]+$/);
    expect(a).not.toBe(b);
  });

  it("cannot be guessed from one's own: consecutive ids of one engine share no prefix or counter", async () => {
    const seen = (await ids(0, 12)).map((id) => id.slice('chatcmpl-'.length));
    for (const id of seen) expect(id).toMatch(/^[0-9a-f]{24}$/);
    // 96 random bits each: no two share even their first 8 hex digits (a counter's ids would).
    expect(new Set(seen.map((id) => id.slice(0, 8))).size).toBe(seen.length);
  });
});
