import { createHash } from 'node:crypto';
import { kvBlockHashes } from '@fairway/core';
import { renderSimChat } from './prompt-tokens.ts';
import type { ChatRequest, CompletionRequest } from './request-schema.ts';

/** A prompt token as prefix caching compares it: a tokenizer's id or the stand-in's piece of text. */
export type PromptToken = string | number;

/** Splits text into tokens, as the engine's tokenizer does (without special tokens). */
export type Tokenize = (text: string) => readonly PromptToken[];

/** Stands for a token that is not text (a template's `<s>`, `</s>`, or an image's encoder tokens). */
const SPECIAL = '\u0000special';

/** The token id of {@link SPECIAL} (Llama's `<s>`). */
export const SPECIAL_TOKEN_ID = 1;

/**
 * How prefix-cache block hashes are computed, as vLLM's `--prefix-caching-hash-algo`: `sha256`
 * over a JSON encoding of the tokens ({@link chainBlockHashes}), or `sha256_cbor`, vLLM's
 * reproducible hash of the token ids (`kvBlockHashes` of `@fairway/core`).
 */
export type PrefixCachingHashAlgo = 'sha256' | 'sha256_cbor';

/**
 * vLLM's chained block hashes of a token sequence: block i's hash is the hash of block i − 1's
 * hash and block i's tokens, so equal hashes mean equal prefixes. Only full blocks of `blockSize`
 * tokens get one; the last, partial block is never cached. SHA-256 as vLLM's
 * `--prefix-caching-hash-algo sha256`, over a JSON encoding of the tokens (vLLM pickles them).
 */
export function chainBlockHashes(tokens: readonly PromptToken[], blockSize: number): string[] {
  const hashes: string[] = [];
  let parent = '';
  for (let end = blockSize; end <= tokens.length; end += blockSize) {
    parent = createHash('sha256')
      .update(parent)
      .update(JSON.stringify(tokens.slice(end - blockSize, end)))
      .digest('hex');
    hashes.push(parent);
  }
  return hashes;
}

/**
 * A prompt's tokens as token ids: a tokenizer's ids as they are, {@link SPECIAL} as
 * {@link SPECIAL_TOKEN_ID}, and each word piece of the stand-in tokenizer as a 31-bit FNV-1a hash
 * of its UTF-16 code units, so that equal pieces have equal ids. These are the ids `/tokenize`
 * answers and `sha256_cbor` hashes.
 */
export function promptTokenIds(tokens: readonly PromptToken[]): number[] {
  const ids = new Array<number>(tokens.length);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    ids[i] = typeof t === 'number' ? t : t === SPECIAL ? SPECIAL_TOKEN_ID : pieceId(t);
  }
  return ids;
}

function pieceId(piece: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < piece.length; i++) h = Math.imul(h ^ piece.charCodeAt(i), 0x01000193);
  return h & 0x7fffffff;
}

/**
 * The chained block hashes the engine's prefix cache knows a prompt by, under `algo`: hex strings,
 * those of `sha256_cbor` being vLLM's 32-byte hashes with the hash seed `seed` (`PYTHONHASHSEED`).
 */
export function promptBlockHashes(
  tokens: readonly PromptToken[],
  blockSize: number,
  algo: PrefixCachingHashAlgo,
  seed: string,
): string[] {
  if (algo === 'sha256') return chainBlockHashes(tokens, blockSize);
  return kvBlockHashes(promptTokenIds(tokens), blockSize, seed).map((h) => h.toString('hex'));
}

/**
 * The tokens of a chat prompt under the simulated model's template: the rendered text's tokens,
 * then its special and media tokens. Those are placed last (where they are in the text is not
 * kept), so a prompt that extends an earlier one shares its text tokens but not the earlier one's
 * trailing special tokens: at most the block holding them misses.
 */
export function chatPromptTokenList(req: ChatRequest, tokenize: Tokenize): PromptToken[] {
  const { text, extraTokens } = renderSimChat(req);
  const tokens: PromptToken[] = req.add_special_tokens === true ? [SPECIAL] : [];
  for (const t of tokenize(text)) tokens.push(t);
  for (let i = 0; i < extraTokens; i++) tokens.push(SPECIAL);
  return tokens;
}

/**
 * The tokens of a completion prompt: `<s>` (unless `add_special_tokens` is false) and the text's
 * tokens, or the token ids given.
 */
export function completionPromptTokenList(req: CompletionRequest, tokenize: Tokenize): PromptToken[] {
  const p = req.prompt;
  const first = typeof p === 'string' ? p : p[0];
  if (typeof first === 'string')
    return req.add_special_tokens === false ? [...tokenize(first)] : [SPECIAL, ...tokenize(first)];
  if (Array.isArray(first)) return first;
  return p as number[];
}
