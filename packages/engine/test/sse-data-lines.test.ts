import { describe, expect, it } from 'vitest';
import { SseDataLines } from '../src/sse.ts';

describe('SseDataLines', () => {
  it('gives the payloads of whole data lines only, however the bytes are split, characters included', () => {
    const stream = new TextEncoder().encode('event: x\ndata: {"a":"é"}\n\ndata:[DONE]\n\n');
    const lines = new SseDataLines();
    const out: string[] = [];
    // One byte at a time: the line waits for its end, and the two bytes of "é" for each other.
    for (let i = 0; i < stream.length; i++) out.push(...lines.push(stream.subarray(i, i + 1)));
    expect(out).toEqual(['{"a":"é"}', '[DONE]']);
    expect(new SseDataLines().push('data: 1\ndata: 2\n: comment\ndata: 3')).toEqual(['1', '2']);
  });
});
