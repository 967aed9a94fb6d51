import { createHash } from 'node:crypto';
import { z } from 'zod';

/** `POST /v1/embeddings` as vLLM reads it (OpenAI's fields; vLLM's extras are accepted and ignored). */
export const embeddingRequestSchema = z.looseObject({
  model: z.string().min(1).nullish(),
  input: z.union([
    z.string(),
    z.array(z.string()).min(1),
    z.array(z.number().int().nonnegative()).min(1),
    z.array(z.array(z.number().int().nonnegative()).min(1)).min(1),
  ]),
  encoding_format: z.enum(['float', 'base64']).nullish(),
  dimensions: z.number().int().positive().nullish(),
  user: z.string().nullish(),
});

/** An embeddings request after validation. */
export type EmbeddingRequest = z.infer<typeof embeddingRequestSchema>;

/** The inputs of a request, one per vector: a text or a list of token ids. */
export function embeddingInputs(input: EmbeddingRequest['input']): (string | readonly number[])[] {
  if (typeof input === 'string') return [input];
  if (input.length > 0 && typeof input[0] === 'number') return [input as number[]];
  return input as (string | number[])[];
}

/**
 * A deterministic unit vector of `dimensions` for an input: the same text (or token ids) always
 * embeds to the same vector, different ones to different vectors. Derived from SHA-256 of the
 * input, expanded with a counter; a Matryoshka request for fewer dimensions gets the first ones,
 * normalised again, as such models are used.
 */
export function embeddingVector(
  input: string | readonly number[],
  full: number,
  dimensions: number,
): number[] {
  const seed = typeof input === 'string' ? `t:${input}` : `i:${input.join(',')}`;
  const v: number[] = [];
  for (let block = 0; v.length < full; block++) {
    const h = createHash('sha256').update(`${block}:${seed}`).digest();
    for (let i = 0; i + 4 <= h.length && v.length < full; i += 4) v.push(h.readInt32LE(i) / 2 ** 31);
  }
  const cut = v.slice(0, dimensions);
  const norm = Math.sqrt(cut.reduce((s, x) => s + x * x, 0)) || 1;
  return cut.map((x) => Math.fround(x / norm));
}

/** A vector as OpenAI's `base64` encoding: little-endian float32s. */
export function base64Vector(v: readonly number[]): string {
  const b = Buffer.alloc(v.length * 4);
  for (const [i, x] of v.entries()) b.writeFloatLE(x, i * 4);
  return b.toString('base64');
}
