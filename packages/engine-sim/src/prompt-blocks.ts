import { createHash } from 'node:crypto';
import { renderSimChat } from './prompt-tokens.ts';
import type { ChatRequest, CompletionRequest } from './request-schema.ts';

/** A prompt token as prefix caching compares it: a tokenizer's id or the stand-in's piece of text. */
export type PromptToken = string | number;

/** Splits text into tokens, as the engine's tokenizer does (without special tokens). */
export type Tokenize = (text: string) => readonly PromptToken[];

/** Stands for a token that is not text (a template's `<s>`, `</s>`, or an image's encoder tokens). */
const SPECIAL = '\u0000special';

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
 * The tokens of a chat prompt under the simulated model's template: the rendered text's tokens,
 * then its special and media tokens. Those are placed last (where they are in the text is not
 * kept), so a prompt that extends an earlier one shares its text tokens but not the earlier one's
 * trailing special tokens: at most the block holding them misses.
 */
export function chatPromptTokenList(req: ChatRequest, tokenize: Tokenize): PromptToken[] {
  const { text, extraTokens } = renderSimChat(req);
  const tokens: PromptToken[] = [...tokenize(text)];
  for (let i = 0; i < extraTokens; i++) tokens.push(SPECIAL);
  return tokens;
}

/** The tokens of a completion prompt: `<s>` and the text's tokens, or the token ids given. */
export function completionPromptTokenList(req: CompletionRequest, tokenize: Tokenize): PromptToken[] {
  const p = req.prompt;
  const first = typeof p === 'string' ? p : p[0];
  if (typeof first === 'string') return [SPECIAL, ...tokenize(first)];
  if (Array.isArray(first)) return first;
  return p as number[];
}
