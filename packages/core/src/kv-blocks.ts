import { createHash } from 'node:crypto';
import { Encoder } from 'cbor-x';

/**
 * vLLM's prefix-cache block hashes under `--prefix-caching-hash-algo sha256_cbor`, the
 * reproducible, cross-language hash vLLM offers for consumers of its KV cache events: block i's
 * hash is SHA-256 over the canonical CBOR of `(hash of block i − 1, the block's token ids, extra
 * keys)`, the first block's parent being the hash of the seed (vLLM's `NONE_HASH`, from
 * `PYTHONHASHSEED`). Only full blocks have a hash. Extra keys (LoRA, multimodal inputs, cache salt)
 * are not modelled: such requests hash differently in vLLM and simply find no match.
 *
 * A block is named here by its **block key**: the low 64 bits of its hash as 16 hex digits, which
 * is what vLLM sends in its events by default (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`) and the
 * tail of the 32 bytes it sends with `=0`, so both forms name a block alike.
 */

// Canonical CBOR for the values hashed (arrays, byte strings, small integers, null, one string):
// plain arrays, Buffers as byte strings without a typed-array tag.
const cbor = new Encoder({ tagUint8Array: false, useRecords: false, mapsAsObjects: false });

function sha256Cbor(value: unknown): Buffer {
  return createHash('sha256').update(cbor.encode(value)).digest();
}

/** vLLM's `NONE_HASH` for a hash seed (the engines' `PYTHONHASHSEED`). */
export function kvSeedHash(seed: string): Buffer {
  return sha256Cbor(seed);
}

/**
 * The hashes of a token sequence's full blocks of `blockSize` tokens, at most `maxBlocks` of them,
 * under `sha256_cbor` with the hash seed `seed` (32 bytes each, as vLLM's).
 */
export function kvBlockHashes(
  tokenIds: readonly number[],
  blockSize: number,
  seed: string,
  maxBlocks = Number.POSITIVE_INFINITY,
): Buffer[] {
  const hashes: Buffer[] = [];
  let parent = kvSeedHash(seed);
  for (let end = blockSize; end <= tokenIds.length && hashes.length < maxBlocks; end += blockSize) {
    parent = sha256Cbor([parent, tokenIds.slice(end - blockSize, end), null]);
    hashes.push(parent);
  }
  return hashes;
}

/** The block keys ({@link kvBlockKey}) of a token sequence's full blocks; see {@link kvBlockHashes}. */
export function kvBlockKeys(
  tokenIds: readonly number[],
  blockSize: number,
  seed: string,
  maxBlocks = Number.POSITIVE_INFINITY,
): string[] {
  return kvBlockHashes(tokenIds, blockSize, seed, maxBlocks).map((h) => h.subarray(24).toString('hex'));
}

/**
 * {@link kvBlockKeys} in slices of `sliceBlocks` blocks, yielding to the event loop between them,
 * so a long prompt (about 3–5 µs per block) never holds other requests up for more than one slice.
 */
export async function kvBlockKeysSliced(
  tokenIds: readonly number[],
  blockSize: number,
  seed: string,
  maxBlocks = Number.POSITIVE_INFINITY,
  sliceBlocks = 128,
): Promise<string[]> {
  const keys: string[] = [];
  let parent = kvSeedHash(seed);
  let inSlice = 0;
  for (let end = blockSize; end <= tokenIds.length && keys.length < maxBlocks; end += blockSize) {
    if (inSlice++ === sliceBlocks) {
      inSlice = 1;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    parent = sha256Cbor([parent, tokenIds.slice(end - blockSize, end), null]);
    keys.push(parent.subarray(24).toString('hex'));
  }
  return keys;
}

/**
 * The block key of a block hash as a KV cache event carries it: an integer (vLLM's default) or
 * bytes (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`); undefined for anything else.
 */
export function kvBlockKey(hash: unknown): string | undefined {
  if (hash instanceof Uint8Array) {
    if (hash.length === 0) return undefined;
    const tail = hash.subarray(Math.max(0, hash.length - 8));
    return Buffer.from(tail).toString('hex').padStart(16, '0');
  }
  if (typeof hash === 'bigint')
    return hash >= 0n ? (hash & 0xffff_ffff_ffff_ffffn).toString(16).padStart(16, '0') : undefined;
  if (typeof hash === 'number' && Number.isSafeInteger(hash) && hash >= 0)
    return hash.toString(16).padStart(16, '0');
  return undefined;
}
