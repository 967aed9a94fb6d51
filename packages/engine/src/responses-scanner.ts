import { cachedTokensOf, type EngineUsage } from './sse.ts';

/**
 * Scans a Responses API event stream (`POST /v1/responses` with `stream: true`) for what accounting
 * needs: one output token per `response.output_text.delta` (vLLM's default stream interval) until
 * the final event, whose `response.usage` ({input_tokens, output_tokens}) is the exact count. The
 * stream is done at `response.completed`, `response.incomplete` or `response.failed`; Responses
 * streams end without `data: [DONE]`. Lines may span chunks; only the final event is parsed.
 */
export class ResponsesScanner {
  #carry = '';
  #deltas = 0;
  #usage: EngineUsage | undefined;
  #status: string | undefined;
  #done = false;
  readonly #decoder = new TextDecoder();

  /** Feeds the next chunk of the response body. */
  push(chunk: Uint8Array): void {
    const text = this.#carry + this.#decoder.decode(chunk, { stream: true });
    let start = 0;
    for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', start)) {
      this.#line(text.slice(start, nl));
      start = nl + 1;
    }
    this.#carry = text.slice(start);
  }

  #line(raw: string): void {
    if (!raw.startsWith('data:')) return;
    if (raw.includes('"response.output_text.delta"')) {
      this.#deltas++;
      return;
    }
    if (
      !raw.includes('"response.completed"') &&
      !raw.includes('"response.incomplete"') &&
      !raw.includes('"response.failed"')
    )
      return;
    let event: { type?: unknown; response?: { status?: unknown; usage?: Record<string, unknown> | null } };
    try {
      event = JSON.parse(raw.slice(5));
    } catch {
      return;
    }
    if (
      event.type !== 'response.completed' &&
      event.type !== 'response.incomplete' &&
      event.type !== 'response.failed'
    )
      return;
    this.#done = true;
    this.#status = typeof event.response?.status === 'string' ? event.response.status : undefined;
    const u = event.response?.usage;
    const input = u?.input_tokens;
    const output = u?.output_tokens;
    if (typeof input === 'number' && typeof output === 'number') {
      const cached = cachedTokensOf(u?.input_tokens_details);
      this.#usage = {
        promptTokens: input,
        completionTokens: output,
        totalTokens: input + output,
        ...(cached === undefined ? {} : { cachedTokens: cached }),
      };
    }
  }

  /** Output tokens so far: the final usage once seen, else the text deltas. */
  get completionTokens(): number {
    return this.#usage === undefined ? this.#deltas : Math.max(this.#usage.completionTokens, this.#deltas);
  }

  /** The usage of the final event. */
  get usage(): EngineUsage | undefined {
    return this.#usage;
  }

  /** The final response's `status` (`completed`, `incomplete`, `failed`). */
  get finishReason(): string | undefined {
    return this.#status;
  }

  /** True once the final event was read. */
  get done(): boolean {
    return this.#done;
  }
}
