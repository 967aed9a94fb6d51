import { describe, expect, it } from 'vitest';
import { ResponsesScanner } from '../src/responses-scanner.ts';
import { SseScanner } from '../src/sse.ts';

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

describe("reading the engine's cached prompt tokens from its usage", () => {
  it('reads prompt_tokens_details.cached_tokens from the final usage chunk of a chat or completion stream', () => {
    const s = new SseScanner();
    s.push(bytes('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'));
    s.push(
      bytes(
        'data: {"choices":[],"usage":{"prompt_tokens":500,"completion_tokens":1,"total_tokens":501,"prompt_tokens_details":{"cached_tokens":480}}}\n\ndata: [DONE]\n\n',
      ),
    );
    expect(s.usage).toEqual({ promptTokens: 500, completionTokens: 1, totalTokens: 501, cachedTokens: 480 });
  });

  it('leaves the count out when the engine does not report it, or reports something that is not a count', () => {
    const s = new SseScanner();
    s.push(
      bytes(
        'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":null}}\n\n',
      ),
    );
    expect(s.usage?.cachedTokens).toBeUndefined();
    const t = new SseScanner();
    t.push(
      bytes(
        'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-3}}}\n\n',
      ),
    );
    expect(t.usage?.cachedTokens).toBeUndefined();
  });

  it("reads input_tokens_details.cached_tokens from a Responses stream's response.completed", () => {
    const s = new ResponsesScanner();
    s.push(
      bytes(
        'event: response.completed\ndata: {"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":300,"output_tokens":2,"input_tokens_details":{"cached_tokens":256}}}}\n\n',
      ),
    );
    expect(s.usage).toEqual({ promptTokens: 300, completionTokens: 2, totalTokens: 302, cachedTokens: 256 });
  });
});
