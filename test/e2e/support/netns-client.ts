/**
 * The client "host" of the multi-host test: run inside its network namespace
 * (`ip netns exec <ns> node --import tsx netns-client.ts '<plan json>'`), it waits until each
 * dispatcher serves, sends `requests` completions through each (every other one streamed), reads
 * each engine's completed-request count from its `/metrics`, and prints one JSON line.
 */

interface Plan {
  readonly dispatchers: readonly string[];
  readonly engines: readonly string[];
  readonly key: string;
  readonly model: string;
  readonly requests: number;
  readonly concurrency: number;
  readonly outputTokens: number;
  readonly readyTimeoutMs: number;
}

interface Outcome {
  readonly ok: boolean;
  readonly detail: string;
}

const plan = JSON.parse(process.argv[2] ?? '{}') as Plan;

async function complete(url: string, stream: boolean): Promise<Outcome> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${plan.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: plan.model,
      messages: [{ role: 'user', content: 'hello from another host' }],
      max_tokens: plan.outputTokens,
      fairway_output_tokens: plan.outputTokens,
      stream,
    }),
  });
  const text = await res.text();
  if (res.status !== 200) return { ok: false, detail: `${res.status} ${text.slice(0, 200)}` };
  if (stream) {
    const done = text.trimEnd().endsWith('data: [DONE]');
    return { ok: done, detail: done ? 'stream' : `unterminated stream: ${text.slice(-200)}` };
  }
  const body = JSON.parse(text) as { usage?: { completion_tokens?: number } };
  const tokens = body.usage?.completion_tokens;
  return { ok: tokens === plan.outputTokens, detail: `completion_tokens ${tokens}` };
}

async function waitServing(url: string): Promise<void> {
  const deadline = Date.now() + plan.readyTimeoutMs;
  let last = '';
  for (;;) {
    try {
      const r = await complete(url, false);
      if (r.ok) return;
      last = r.detail;
    } catch (err) {
      last = String(err);
    }
    if (Date.now() > deadline) throw new Error(`${url} did not serve in ${plan.readyTimeoutMs} ms: ${last}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function sendAll(url: string): Promise<{ url: string; answered: number; failures: string[] }> {
  let next = 0;
  let answered = 0;
  const failures: string[] = [];
  const worker = async (): Promise<void> => {
    while (next < plan.requests) {
      const i = next++;
      try {
        const r = await complete(url, i % 2 === 1);
        if (r.ok) answered++;
        else failures.push(r.detail);
      } catch (err) {
        failures.push(String(err));
      }
    }
  };
  await Promise.all(Array.from({ length: plan.concurrency }, worker));
  return { url, answered, failures: failures.slice(0, 5) };
}

/** Sum of `vllm:request_success_total` over its label sets. */
async function successTotal(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n'))
    if (line.startsWith('vllm:request_success_total')) total += Number(line.split(' ').at(-1));
  return total;
}

async function main(): Promise<void> {
  await Promise.all(plan.dispatchers.map(waitServing));
  const dispatchers = [];
  for (const url of plan.dispatchers) dispatchers.push(await sendAll(url));
  const engines = await Promise.all(
    plan.engines.map(async (url) => ({ url, completed: await successTotal(url) })),
  );
  process.stdout.write(`${JSON.stringify({ dispatchers, engines })}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
