import { describe, expect, it } from 'vitest';
import { type SseDataLine, SseScanner } from '../src/sse.ts';

const chunk = (o: object): string => `data: ${JSON.stringify(o)}\n\n`;
const head = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm' };
const token = (text: string, finish: string | null = null, usage?: object): string =>
  chunk({
    ...head,
    choices: [{ index: 0, delta: { content: text }, logprobs: null, finish_reason: finish }],
    ...(usage ? { usage } : {}),
  });

const stream = [
  chunk({ ...head, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }),
  token(' Hello'),
  token(' "quoted" {braces}'),
  token(' world', 'stop'),
  chunk({ ...head, choices: [], usage: { prompt_tokens: 7, total_tokens: 10, completion_tokens: 3 } }),
  'data: [DONE]\n\n',
].join('');

describe('SseScanner', () => {
  it('counts content chunks, reads the finish reason and the final usage', () => {
    const s = new SseScanner();
    s.push(Buffer.from(stream));
    expect(s.contentChunks).toBe(3);
    expect(s.finishReason).toBe('stop');
    expect(s.usage).toEqual({ promptTokens: 7, completionTokens: 3, totalTokens: 10 });
    expect(s.completionTokens).toBe(3);
    expect(s.done).toBe(true);
    expect(s.dataLines).toBe(6);
  });

  it('gives the same result whatever the chunk boundaries', () => {
    const bytes = Buffer.from(stream);
    for (const size of [1, 2, 3, 7, 13, 64]) {
      const s = new SseScanner();
      for (let i = 0; i < bytes.length; i += size) s.push(bytes.subarray(i, i + size));
      expect([s.contentChunks, s.finishReason, s.usage?.completionTokens, s.done]).toEqual([
        3,
        'stop',
        3,
        true,
      ]);
    }
  });

  it('follows continuous usage stats as the engine count of streamed tokens', () => {
    const s = new SseScanner();
    s.push(Buffer.from(token(' a', null, { prompt_tokens: 5, total_tokens: 6, completion_tokens: 1 })));
    expect(s.completionTokens).toBe(1);
    // Two tokens in one chunk (vLLM with a stream interval): usage says 3, chunks say 2.
    s.push(Buffer.from(token(' b c', null, { prompt_tokens: 5, total_tokens: 8, completion_tokens: 3 })));
    expect(s.contentChunks).toBe(2);
    expect(s.completionTokens).toBe(3);
  });

  it('reads text completion chunks and CRLF line ends', () => {
    const s = new SseScanner();
    const c = (text: string) =>
      `data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"${text}","finish_reason":null}]}\r\n\r\n`;
    s.push(Buffer.from(`${c('x')}${c('')}${c('y')}data: [DONE]\r\n\r\n`));
    expect(s.contentChunks).toBe(2);
    expect(s.done).toBe(true);
  });

  it('hands every data line to the callback, flagging errors and ignoring comments', () => {
    const lines: SseDataLine[] = [];
    const s = new SseScanner((l) => lines.push(l));
    s.push(Buffer.from(': ping\n\nevent: x\n'));
    s.push(Buffer.from('data: {"error": {"message": "boom", "code": 500}}\n\ndata: [DONE]\n\n'));
    expect(lines.map((l) => [l.isError, l.done])).toEqual([
      [true, false],
      [false, true],
    ]);
    expect(Buffer.from(lines[0]!.payload).toString()).toBe('{"error": {"message": "boom", "code": 500}}');
    expect(s.errorPayload).toContain('boom');
  });

  it('is not done when the stream stops before [DONE]', () => {
    const s = new SseScanner();
    s.push(Buffer.from(token(' a')));
    s.push(Buffer.from('data: [DO'));
    expect(s.done).toBe(false);
    expect(s.contentChunks).toBe(1);
  });
});
