// How much a proxy pays to account for a vLLM stream it forwards: the incremental SseScanner
// (byte search, lazy usage parse) against the obvious alternative of decoding every chunk and
// JSON.parse-ing every data line. Run: npm run bench:engine-sse
import { SseScanner } from '../src/sse.ts';

const TOKENS = 200_000;
const head =
  '{"id":"chatcmpl-7f303a0000001c","object":"chat.completion.chunk","created":1795313340,"model":"llama-2-7b","choices":[';

function chunks(continuousUsage: boolean): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 1; i <= TOKENS; i++) {
    const usage = continuousUsage
      ? `,"usage":{"prompt_tokens":100,"total_tokens":${100 + i},"completion_tokens":${i}}`
      : '';
    out.push(
      Buffer.from(
        `data: ${head}{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]${usage}}\n\n`,
      ),
    );
  }
  out.push(
    Buffer.from(
      `data: ${head}],"usage":{"prompt_tokens":100,"total_tokens":${100 + TOKENS},"completion_tokens":${TOKENS}}}\n\ndata: [DONE]\n\n`,
    ),
  );
  return out;
}

function scanner(input: readonly Buffer[]): number {
  const s = new SseScanner();
  for (const c of input) s.push(c);
  return s.completionTokens;
}

/** As a proxy that charges streamed tokens as it goes: reads the count every 16 chunks. */
function scannerCharging(input: readonly Buffer[]): number {
  const s = new SseScanner();
  let charged = 0;
  for (let i = 0; i < input.length; i++) {
    s.push(input[i]!);
    if ((i & 15) === 15) charged = s.completionTokens;
  }
  return Math.max(charged, s.completionTokens);
}

/** The baseline: decode, split lines, JSON.parse each chunk, read delta and usage. */
function parseEvery(input: readonly Buffer[]): number {
  let carry = '';
  let tokens = 0;
  let usage = 0;
  for (const c of input) {
    const text = carry + c.toString('utf8');
    const lines = text.split('\n');
    carry = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('data: ')) continue;
      const payload = line.slice(6);
      if (payload === '[DONE]') continue;
      const o = JSON.parse(payload) as {
        choices: { delta?: { content?: string } }[];
        usage?: { completion_tokens: number };
      };
      if (o.choices[0]?.delta?.content) tokens++;
      if (o.usage) usage = o.usage.completion_tokens;
    }
  }
  return Math.max(tokens, usage);
}

function time(name: string, fn: (input: readonly Buffer[]) => number, input: readonly Buffer[]): number {
  fn(input); // warm up
  const runs = 5;
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    const n = fn(input);
    const ms = performance.now() - t0;
    if (n !== TOKENS) throw new Error(`${name} counted ${n} tokens, expected ${TOKENS}`);
    best = Math.min(best, ms);
  }
  const perChunkNs = (best * 1e6) / input.length;
  console.log(
    `  ${name.padEnd(34)} ${perChunkNs.toFixed(0).padStart(6)} ns/chunk  ${(input.length / best / 1000).toFixed(2).padStart(7)} M chunks/s`,
  );
  return perChunkNs;
}

for (const continuous of [false, true]) {
  const input = chunks(continuous);
  const bytes = input.reduce((n, b) => n + b.length, 0);
  console.log(
    `${TOKENS.toLocaleString()} token chunks, ${(bytes / TOKENS).toFixed(0)} bytes each, continuous_usage_stats=${continuous}`,
  );
  const a = time('SseScanner (byte search, lazy usage)', scanner, input);
  time('SseScanner, count read every 16', scannerCharging, input);
  const b = time('JSON.parse every chunk', parseEvery, input);
  console.log(`  scanner is ${(b / a).toFixed(1)}× cheaper\n`);
}
