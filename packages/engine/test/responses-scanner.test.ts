import { describe, expect, it } from 'vitest';
import { ResponsesScanner } from '../src/responses-scanner.ts';

describe('ResponsesScanner', () => {
  it('counts deltas across chunk boundaries until the final usage arrives', () => {
    const s = new ResponsesScanner();
    const line = (o: unknown) => `event: x\ndata: ${JSON.stringify(o)}\n\n`;
    const all = Buffer.from(
      line({ type: 'response.created', response: { usage: null } }) +
        line({ type: 'response.output_text.delta', delta: 'a' }) +
        line({ type: 'response.output_text.delta', delta: 'b' }) +
        line({
          type: 'response.completed',
          response: { status: 'completed', usage: { input_tokens: 7, output_tokens: 2 } },
        }),
    );
    const cut = all.indexOf('delta') + 3;
    s.push(all.subarray(0, cut));
    expect(s.completionTokens).toBe(0);
    expect(s.done).toBe(false);
    s.push(all.subarray(cut));
    expect(s.completionTokens).toBe(2);
    expect(s.done).toBe(true);
    expect(s.usage).toEqual({ promptTokens: 7, completionTokens: 2, totalTokens: 9 });
    expect(s.finishReason).toBe('completed');
  });
});
