import { kvBlockKeysSliced, type Logger, LogThrottle } from '@fairway/core';
import type { Engine } from '@fairway/engine';
import type { ChatCompletionBody, CompletionBody } from './openai-schemas.ts';
import type { Endpoint, RequestBody } from './request-descriptor.ts';
import { type ResponsesBody, responsesMessages } from './responses-api.ts';

/** A replica of a pool that can tokenize: its engine and its KV block size. */
export interface TokenizingReplica {
  readonly engine: Engine;
  readonly blockSize: number;
}

/** How a pool's prompts are hashed into KV block keys (`pools[].kvEvents`). */
export interface PoolKvEvents {
  readonly hashSeed: string;
  readonly tokenizeTimeoutMs: number;
  readonly maxBlocks: number;
}

/** Chat fields that shape the prompt's tokens (its chat template's inputs), passed to `/tokenize` as the engine gets them. */
const TEMPLATE_FIELDS = [
  'add_special_tokens',
  'tools',
  'add_generation_prompt',
  'continue_final_message',
  'chat_template',
  'chat_template_kwargs',
  'documents',
] as const;

/**
 * What `/tokenize` is asked for a request: a chat body's messages with what its chat template
 * reads, a Responses body's messages, a completion's prompt; undefined when nothing can be
 * tokenized (embeddings, a prompt of token ids — hashed without an engine call — or a batch).
 */
function tokenizeBody(endpoint: Endpoint, body: RequestBody): Record<string, unknown> | undefined {
  switch (endpoint) {
    case 'chat': {
      const chat = body as ChatCompletionBody & Record<string, unknown>;
      const out: Record<string, unknown> = { messages: chat.messages };
      for (const f of TEMPLATE_FIELDS) if (chat[f] !== undefined) out[f] = chat[f];
      return out;
    }
    case 'responses':
      return { messages: responsesMessages(body as ResponsesBody) };
    case 'completions': {
      const c = body as CompletionBody & { add_special_tokens?: unknown };
      if (typeof c.prompt !== 'string') return undefined;
      return c.add_special_tokens === undefined
        ? { prompt: c.prompt }
        : { prompt: c.prompt, add_special_tokens: c.add_special_tokens };
    }
    case 'embeddings':
      return undefined;
  }
}

/** The token ids of a completion prompt given as ids (one prompt), else undefined. */
function promptIds(endpoint: Endpoint, body: RequestBody): readonly number[] | undefined {
  if (endpoint !== 'completions') return undefined;
  const p = (body as CompletionBody).prompt as unknown;
  return Array.isArray(p) && p.every((t) => typeof t === 'number') ? (p as number[]) : undefined;
}

/**
 * The KV block keys of a request's prompt (`RequestDescriptor.promptBlockKeys`) for a pool whose
 * engines publish KV cache events: its token ids from one of the pool's engines (vLLM's
 * `/tokenize`, taking turns over the replicas that accept work), hashed as vLLM hashes its blocks
 * (`sha256_cbor`, the pool's hash seed, in slices that let other requests run between them).
 * Undefined when the request has nothing to tokenize, no
 * replica accepts work, or the engine does not answer within the pool's timeout: the request is
 * then placed without them.
 */
export class PromptBlockKeys {
  readonly #replicasOf: (pool: string) => readonly TokenizingReplica[];
  readonly #logger: Logger;
  readonly #failures = new LogThrottle();
  #turn = 0;

  constructor(replicasOf: (pool: string) => readonly TokenizingReplica[], logger: Logger) {
    this.#replicasOf = replicasOf;
    this.#logger = logger;
  }

  async of(
    pool: string,
    config: PoolKvEvents,
    endpoint: Endpoint,
    body: RequestBody,
  ): Promise<string[] | undefined> {
    const replicas = this.#replicasOf(pool);
    if (replicas.length === 0) return undefined;
    const replica = replicas[this.#turn++ % replicas.length] as TokenizingReplica;
    const hash = async (ids: readonly number[]): Promise<string[] | undefined> => {
      const keys = await kvBlockKeysSliced(ids, replica.blockSize, config.hashSeed, config.maxBlocks);
      return keys.length === 0 ? undefined : keys;
    };
    const given = promptIds(endpoint, body);
    if (given !== undefined) return hash(given);
    const ask = tokenizeBody(endpoint, body);
    if (ask === undefined) return undefined;
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), config.tokenizeTimeoutMs);
    let ids: readonly number[];
    try {
      ids = await replica.engine.tokenize(ask, { signal: controller.signal });
    } catch (err) {
      this.#failures.warn(
        this.#logger,
        pool,
        { pool, engine: replica.engine.url, err: (err as Error).message },
        'dispatcher: prompt not tokenized; placed without KV cache events',
      );
      return undefined;
    } finally {
      clearTimeout(timer);
    }
    return hash(ids);
  }
}
