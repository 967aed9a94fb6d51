import { createHash, type Hash } from 'node:crypto';
import { estimateTextTokens } from './tokens.ts';

/**
 * Prefix keys: names for the leading parts of a prompt, so a placement can send a request to the
 * replica that served an earlier one sharing its start (its prompt's KV blocks are likely still in
 * that engine's prefix cache). A prompt gets one key per boundary at a power-of-two number of
 * blocks from {@link PREFIX_MIN_BLOCKS} on, the longest {@link PREFIX_MAX_KEYS} of them, longest
 * first; a key names everything before its boundary. A follow-up turn that resends the history
 * shares the key of the earlier turn's longest boundary (and every shorter one), whatever it
 * appends. A prompt shorter than the first boundary has no keys.
 */

/** Blocks before the first boundary. */
export const PREFIX_MIN_BLOCKS = 4;
/** Most keys a prompt gets (the longest boundaries). */
export const PREFIX_MAX_KEYS = 8;
/** Characters per block of a serialised prompt (about 16 tokens, vLLM's default block). */
export const PREFIX_BLOCK_CHARS = 64;
/** Characters of a key (base64url of a SHA-256: 96 bits). */
const KEY_CHARS = 16;

/** The boundaries of a prompt of `blocks` whole blocks, in blocks, longest first. */
export function prefixBoundaries(blocks: number): number[] {
  const out: number[] = [];
  for (let b = PREFIX_MIN_BLOCKS; b <= blocks; b *= 2) out.push(b);
  return out.reverse().slice(0, PREFIX_MAX_KEYS);
}

/**
 * A prompt's prefix keys, longest first, with the tokens of the part each key adds to the next
 * shorter one (the whole first boundary for the shortest): requests on one replica share a part's
 * KV blocks in its prefix cache, so the store reserves each part once per replica
 * (`QueuedRequest.prefixParts`). The tokens of the parts sum to at most the prompt's.
 */
export interface PromptPrefix {
  readonly keys: string[];
  readonly tokens: number[];
}

/**
 * Blocks of the part a key at `boundary` blocks names beyond the next shorter boundary (half of
 * it); the first boundary's key names all its blocks.
 */
export function prefixPartBlocks(boundary: number): number {
  return boundary > PREFIX_MIN_BLOCKS ? boundary / 2 : boundary;
}

/**
 * Prefix keys of a prompt whose KV blocks have chained hashes `blockHashes` (each names its block
 * and every block before it, as vLLM's do), `promptBlocks` of them the prompt's: the hash of the
 * last block before each boundary; with each key's part in tokens, for blocks of `blockTokens`.
 */
export function promptPrefixOfBlocks(
  blockHashes: readonly string[],
  promptBlocks: number,
  blockTokens: number,
): PromptPrefix {
  const boundaries = prefixBoundaries(Math.min(promptBlocks, blockHashes.length));
  return {
    keys: boundaries.map((b) => blockHashes[b - 1] as string),
    tokens: boundaries.map((b) => prefixPartBlocks(b) * blockTokens),
  };
}

/**
 * Prefix keys of a serialised prompt, given as its parts in order (`parts` joined is the
 * serialisation; a follow-up's must start with the earlier request's), hashed in one pass with the
 * hash state copied at each boundary (a block is {@link PREFIX_BLOCK_CHARS} characters), each with
 * its part's estimated tokens (`estimateTextTokens` of the text hashed since the boundary before).
 * `scope` (the model) starts the hash, so two models' equal prompts have different keys.
 */
export function promptPrefixOfText(scope: string, parts: Iterable<string>): PromptPrefix {
  const hash: Hash = createHash('sha256').update(scope).update('\u0000');
  const keys: string[] = [];
  const tokens: number[] = [];
  let boundary = PREFIX_MIN_BLOCKS * PREFIX_BLOCK_CHARS;
  let at = 0;
  let partTokens = 0;
  for (const part of parts) {
    let from = 0;
    while (at + part.length - from >= boundary) {
      const upTo = from + boundary - at;
      const piece = part.slice(from, upTo);
      hash.update(piece);
      keys.push(hash.copy().digest('base64url').slice(0, KEY_CHARS));
      tokens.push(partTokens + estimateTextTokens(piece));
      partTokens = 0;
      at = boundary;
      from = upTo;
      boundary *= 2;
    }
    if (from < part.length) {
      const rest = from === 0 ? part : part.slice(from);
      hash.update(rest);
      partTokens += estimateTextTokens(rest);
      at += part.length - from;
    }
  }
  return {
    keys: keys.reverse().slice(0, PREFIX_MAX_KEYS),
    tokens: tokens.reverse().slice(0, PREFIX_MAX_KEYS),
  };
}
