import { describe, expect, it } from 'vitest';
import { kvBlockKey, kvBlockKeys, kvBlockKeysSliced, kvSeedHash } from '../src/index.ts';

// Known answers computed with Python's cbor2 (`hashlib.sha256(cbor2.dumps(x, canonical=True))`),
// as vLLM's `sha256_cbor` does: the seed "0" (PYTHONHASHSEED=0), then blocks 1..16 and 17..32.
const NONE_HASH_0 = '4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e';
const BLOCK_1 = '202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea';
const BLOCK_2 = '4a0a393805c6d2f0ed831000d41bb65980336c4c04895d5e26470bbec927f5bf';
const tokens = Array.from({ length: 40 }, (_, i) => i + 1);

describe('vLLM sha256_cbor block keys', () => {
  it('hashes the seed and each full block as vLLM does', () => {
    expect(kvSeedHash('0').toString('hex')).toBe(NONE_HASH_0);
    expect(kvBlockKeys(tokens, 16, '0')).toEqual([BLOCK_1.slice(-16), BLOCK_2.slice(-16)]);
  });

  it('gives the same keys hashed in slices that yield to the event loop', async () => {
    const long = Array.from({ length: 16 * 300 + 5 }, (_, i) => (i * 31) % 32000);
    expect(await kvBlockKeysSliced(long, 16, '0', 290, 64)).toEqual(kvBlockKeys(long, 16, '0', 290));
    let ran = false;
    setImmediate(() => {
      ran = true;
    });
    const sliced = kvBlockKeysSliced(long, 16, '0', Number.POSITIVE_INFINITY, 64);
    expect(ran).toBe(false);
    await sliced;
    expect(ran).toBe(true);
  });

  it('stops at the last full block and at maxBlocks', () => {
    expect(kvBlockKeys(tokens.slice(0, 15), 16, '0')).toEqual([]);
    expect(kvBlockKeys(tokens, 16, '0', 1)).toEqual([BLOCK_1.slice(-16)]);
  });

  it('chains: a different first block changes every later key, another seed every key', () => {
    const other = kvBlockKeys([99, ...tokens.slice(1)], 16, '0');
    expect(other[0]).not.toBe(BLOCK_1.slice(-16));
    expect(other[1]).not.toBe(BLOCK_2.slice(-16));
    expect(kvBlockKeys(tokens, 16, '1')[0]).not.toBe(BLOCK_1.slice(-16));
  });

  it('names a block alike from its bytes and from vLLM’s integer form (low 64 bits)', () => {
    const bytes = Buffer.from(BLOCK_2, 'hex');
    // int.from_bytes(h, "big") & (2**64 - 1) in Python for BLOCK_2
    expect(kvBlockKey(2758186210834249151n)).toBe(kvBlockKey(bytes));
    expect(kvBlockKey(5)).toBe('0000000000000005');
    expect(kvBlockKey(-1)).toBeUndefined();
    expect(kvBlockKey('abc')).toBeUndefined();
    expect(kvBlockKey(new Uint8Array())).toBeUndefined();
  });
});
