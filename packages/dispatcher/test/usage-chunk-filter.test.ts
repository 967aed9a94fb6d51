import { describe, expect, it } from 'vitest';
import { UsageChunkFilter } from '../src/usage-chunk-filter.ts';

const head = '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[';
const events = [
  `data: ${head}{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n`,
  `data: ${head}{"index":0,"delta":{"content":" say \\"usage\\":{ here"},"finish_reason":null}]}\n\n`,
  `data: ${head}{"index":0,"delta":{"content":" bye"},"finish_reason":"stop"}]}\n\n`,
  `data: ${head}],"usage":{"prompt_tokens":6,"total_tokens":8,"completion_tokens":2}}\n\n`,
  'data: [DONE]\n\n',
];
const full = events.join('');
const expected = events.filter((_, i) => i !== 3).join('');

function run(chunks: readonly string[]): { out: string; dropped: number } {
  const f = new UsageChunkFilter();
  let out = '';
  for (const c of chunks) {
    const b = f.push(Buffer.from(c));
    if (b) out += b.toString();
  }
  const rest = f.end();
  if (rest) out += rest.toString();
  return { out, dropped: f.dropped };
}

describe('UsageChunkFilter', () => {
  it('removes only the usage-only event and forwards every other byte unchanged', () => {
    expect(run([full])).toEqual({ out: expected, dropped: 1 });
  });

  it('gives the same bytes however the stream is split into network chunks', () => {
    for (let size = 1; size <= 40; size += 3) {
      const chunks: string[] = [];
      for (let i = 0; i < full.length; i += size) chunks.push(full.slice(i, i + size));
      expect(run(chunks)).toEqual({ out: expected, dropped: 1 });
    }
  });

  it('forwards each complete line as soon as it arrives (no event is held back)', () => {
    const f = new UsageChunkFilter();
    const first = events[0] ?? '';
    expect(f.push(Buffer.from(first))?.toString()).toBe(first);
    // A partial line waits for its end; the client could not use it anyway.
    expect(f.push(Buffer.from('data: {"par'))).toBeUndefined();
    expect(f.push(Buffer.from('tial":1}\n'))?.toString()).toBe('data: {"partial":1}\n');
  });

  it('keeps usage that rides on content chunks (continuous usage stats the client asked for)', () => {
    const withUsage = `data: ${head}{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1}}\n\n`;
    expect(run([withUsage])).toEqual({ out: withUsage, dropped: 0 });
  });
});
