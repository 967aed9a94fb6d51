import { createHash, type Hash } from 'node:crypto';

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
 * Prefix keys of a prompt whose KV blocks have chained hashes `blockHashes` (each names its block
 * and every block before it, as vLLM's do), `promptBlocks` of them the prompt's: the hash of the
 * last block before each boundary.
 */
export function prefixKeysOfBlocks(blockHashes: readonly string[], promptBlocks: number): string[] {
  const out: string[] = [];
  for (const b of prefixBoundaries(Math.min(promptBlocks, blockHashes.length)))
    out.push(blockHashes[b - 1] as string);
  return out;
}

/**
 * Prefix keys of a serialised prompt, given as its parts in order (`parts` joined is the
 * serialisation; a follow-up's must start with the earlier request's), hashed in one pass with the
 * hash state copied at each boundary (a block is {@link PREFIX_BLOCK_CHARS} characters).
 * `scope` (the model) starts the hash, so two models' equal prompts have different keys.
 */
export function prefixKeysOfText(scope: string, parts: Iterable<string>): string[] {
  const hash: Hash = createHash('sha256').update(scope).update('\u0000');
  const keys: string[] = [];
  let boundary = PREFIX_MIN_BLOCKS * PREFIX_BLOCK_CHARS;
  let at = 0;
  for (const part of parts) {
    let from = 0;
    while (at + part.length - from >= boundary) {
      const upTo = from + boundary - at;
      hash.update(part.slice(from, upTo));
      keys.push(hash.copy().digest('base64url').slice(0, KEY_CHARS));
      at = boundary;
      from = upTo;
      boundary *= 2;
    }
    if (from < part.length) {
      hash.update(from === 0 ? part : part.slice(from));
      at += part.length - from;
    }
  }
  return keys.reverse().slice(0, PREFIX_MAX_KEYS);
}
