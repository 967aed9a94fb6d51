import { createHash, type Hash } from 'node:crypto';
import { estimateTextTokens } from './tokens.ts';

/**
 * Prefix keys: names for the leading parts of a prompt, so a placement can send a request to the
 * replica that served an earlier one sharing its start (its prompt's KV blocks are likely still in
 * that engine's prefix cache). A prompt has a boundary at each power-of-two number of blocks from
 * {@link PREFIX_MIN_BLOCKS} on and at the end of each of its parts (its messages: where a system
 * prompt, an earlier turn or the prompt itself ends), there at the last whole block at or before
 * the end, as an engine caches whole blocks; a key names everything before its boundary. A prompt
 * keeps at most {@link PREFIX_MAX_KEYS} keys, longest first: its longest boundaries', the shortest
 * of them the end of its first part that ends at or past the first boundary (a system prompt that
 * conversations share) when that is shorter. A follow-up turn that resends the history shares the
 * keys of the earlier prompt's end and boundaries, whatever it appends; prompts that start with one
 * system prompt share the key of its end. A prompt shorter than the first boundary has no keys.
 */

/** Blocks before the first boundary. */
export const PREFIX_MIN_BLOCKS = 4;
/** Most keys a prompt gets. */
export const PREFIX_MAX_KEYS = 8;
/** Characters per block of a serialised prompt (about 16 tokens, vLLM's default block). */
export const PREFIX_BLOCK_CHARS = 64;
/** Characters of a key (base64url of a SHA-256: 96 bits). */
const KEY_CHARS = 16;

/**
 * Which of a prompt's `count` boundaries (shortest first) it keeps keys for, as their indices,
 * longest first: the longest {@link PREFIX_MAX_KEYS}, the shortest of them the one at index
 * `firstEnd` (the end of its first part to end at or past the first boundary; -1: none) when that
 * is shorter.
 */
function keptBoundaries(count: number, firstEnd: number): number[] {
  const out: number[] = [];
  for (let i = count - 1; i >= 0 && out.length < PREFIX_MAX_KEYS - 1; i--) out.push(i);
  const next = out.at(-1) ?? count;
  const last = firstEnd >= 0 && firstEnd < next ? firstEnd : next - 1;
  if (last >= 0) out.push(last);
  return out;
}

/**
 * The boundaries a prompt of `blocks` whole blocks keeps keys for, in blocks, longest first (see
 * {@link keptBoundaries}), given the whole blocks before the end of each of its parts but the
 * last (`partEnds`, any order; the prompt's end is the last part's).
 */
export function prefixBoundaries(blocks: number, partEnds: Iterable<number> = []): number[] {
  if (blocks < PREFIX_MIN_BLOCKS) return [];
  const all = new Set<number>([blocks]);
  for (let b = PREFIX_MIN_BLOCKS; b < blocks; b *= 2) all.add(b);
  let firstEnd = blocks;
  for (const e of partEnds)
    if (e >= PREFIX_MIN_BLOCKS && e < blocks) {
      all.add(e);
      firstEnd = Math.min(firstEnd, e);
    }
  const ascending = [...all].sort((a, b) => a - b);
  return keptBoundaries(ascending.length, ascending.indexOf(firstEnd)).map((i) => ascending[i] as number);
}

/**
 * A prompt's prefix keys, longest first, with the tokens of the part each key adds to the next
 * shorter one (everything before its boundary for the shortest): requests on one replica share a
 * part's KV blocks in its prefix cache, so the store reserves each part once per replica
 * (`QueuedRequest.prefixParts`). The parts do not overlap and their tokens sum to the tokens
 * before the longest boundary.
 */
export interface PromptPrefix {
  readonly keys: string[];
  readonly tokens: number[];
}

/**
 * Prefix keys of a prompt whose KV blocks have chained hashes `blockHashes` (each names its block
 * and every block before it, as vLLM's do), `promptBlocks` of them the prompt's, whose parts end
 * after `partEnds` whole blocks (see {@link prefixBoundaries}): the hash of the last block before
 * each boundary; with each key's part in tokens, for blocks of `blockTokens`.
 */
export function promptPrefixOfBlocks(
  blockHashes: readonly string[],
  promptBlocks: number,
  blockTokens: number,
  partEnds: Iterable<number> = [],
): PromptPrefix {
  const boundaries = prefixBoundaries(Math.min(promptBlocks, blockHashes.length), partEnds);
  return {
    keys: boundaries.map((b) => blockHashes[b - 1] as string),
    tokens: boundaries.map((b, i) => (b - (boundaries[i + 1] ?? 0)) * blockTokens),
  };
}

/**
 * Prefix keys of a serialised prompt, given as its parts in order (`parts` joined is the
 * serialisation; a follow-up's must start with the earlier request's), hashed in one pass with the
 * hash state copied at each boundary (a block is {@link PREFIX_BLOCK_CHARS} characters), each with
 * its part's estimated tokens (`estimateTextTokens` of the text hashed since the kept boundary
 * before; the shortest kept key's part is all the text before it). `scope` (the model) starts the
 * hash, so two models' equal prompts have different keys.
 */
export function promptPrefixOfText(scope: string, parts: Iterable<string>): PromptPrefix {
  const hash: Hash = createHash('sha256').update(scope).update('\u0000');
  // Every boundary, shortest first: its key and the estimated tokens before it.
  const keys: string[] = [];
  const upTo: number[] = [];
  /** Index of the boundary where the first part to end at or past the first boundary ends (-1: none). */
  let firstEnd = -1;
  const first = PREFIX_MIN_BLOCKS * PREFIX_BLOCK_CHARS;
  /** Characters hashed: whole blocks, so a part's end can still be cut at its last whole block. */
  let hashed = 0;
  /** Characters before the last boundary. */
  let last = 0;
  let power = first;
  let tokens = 0;
  /** The part being hashed, after what is left of the one before; `text[from]` is at `hashed`. */
  let text = '';
  let from = 0;
  const hashTo = (to: number): void => {
    const piece = text.slice(from, from + to - hashed);
    hash.update(piece);
    tokens += estimateTextTokens(piece);
    from += piece.length;
    hashed = to;
  };
  const cut = (): void => {
    keys.push(hash.copy().digest('base64url').slice(0, KEY_CHARS));
    upTo.push(tokens);
    last = hashed;
  };
  for (const part of parts) {
    // What follows the last whole block (less than a block) is hashed with the next part.
    text = text.slice(from) + part;
    from = 0;
    const whole = hashed + text.length - (text.length % PREFIX_BLOCK_CHARS);
    for (; power <= whole; power *= 2) {
      hashTo(power);
      cut();
    }
    if (whole > hashed) hashTo(whole);
    if (whole >= first && whole > last) cut();
    if (firstEnd < 0 && whole >= first) firstEnd = keys.length - 1;
  }
  const kept = keptBoundaries(keys.length, firstEnd);
  return {
    keys: kept.map((i) => keys[i] as string),
    tokens: kept.map((i, k) => {
      const below = kept[k + 1];
      return (upTo[i] as number) - (below === undefined ? 0 : (upTo[below] as number));
    }),
  };
}
