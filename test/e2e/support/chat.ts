/** What one chat completion did, as a plain HTTP client saw it. */
export interface ChatOutcome {
  /** HTTP status; 0 when no status arrived (connection refused or reset). */
  readonly status: number;
  /** The body as far as it arrived (with the client error appended when the connection broke). */
  readonly text: string;
  /** A 200 whose body finished: `data: [DONE]` when streamed. */
  readonly ok: boolean;
  /** A 200 that carried generated content. */
  readonly firstByte: boolean;
  /** The stream carried an SSE error event (`data: {"error": …}`). */
  readonly sseError: boolean;
  /** Wall-clock ms when the answer ended. */
  readonly endMs: number;
}

/** A chat completion of `tokens` output tokens (engine-sim's exact-length hook) against engine-sim's model. */
export interface ChatRequest {
  readonly key: string;
  readonly model: string;
  readonly tokens: number;
  /** @default true */
  readonly stream?: boolean;
  /** Ask for usage in the last chunk (`stream_options.include_usage`). @default false */
  readonly usage?: boolean;
}

/**
 * Sends one chat completion to a dispatcher (or an engine) and reads the whole answer; never
 * throws: a refused or broken connection is an outcome too, which is what fault tests count.
 */
export async function sendChat(url: string, r: ChatRequest): Promise<ChatOutcome> {
  const stream = r.stream ?? true;
  let status = 0;
  let text = '';
  try {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${r.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: r.model,
        messages: [{ role: 'user', content: 'x'.repeat(36) }],
        max_tokens: r.tokens,
        fairway_output_tokens: r.tokens,
        ...(stream ? { stream: true } : {}),
        ...(stream && r.usage === true ? { stream_options: { include_usage: true } } : {}),
      }),
    });
    status = res.status;
    text = await res.text();
  } catch (err) {
    text += `\n[connection lost: ${String(err)}]`;
  }
  const done =
    status === 200 && (stream ? text.includes('data: [DONE]') : !text.includes('[connection lost'));
  return {
    status,
    text,
    ok: done,
    firstByte: status === 200 && text.includes('"content"'),
    sseError: /data: \{"error"/.test(text),
    endMs: Date.now(),
  };
}

/** A fairway metric without labels, read from a dispatcher's operator port (0 when absent). */
export async function gatewayMetric(operatorUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${operatorUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

/** Sum of an engine-sim metric's series (vLLM's exposition: `name{labels} value`). */
export async function engineMetric(engineUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${engineUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}
