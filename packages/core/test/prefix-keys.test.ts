import { describe, expect, it } from 'vitest';
import {
  PREFIX_BLOCK_CHARS,
  PREFIX_MAX_KEYS,
  prefixBoundaries,
  prefixKeysOfBlocks,
  prefixKeysOfText,
} from '../src/index.ts';

describe('prefix keys', () => {
  it('cuts at power-of-two block counts from the first boundary on, longest first', () => {
    expect(prefixBoundaries(3)).toEqual([]);
    expect(prefixBoundaries(4)).toEqual([4]);
    expect(prefixBoundaries(40)).toEqual([32, 16, 8, 4]);
    expect(prefixBoundaries(1 << 20)).toHaveLength(PREFIX_MAX_KEYS);
    expect(prefixBoundaries(1 << 20)[0]).toBe(1 << 20);
  });

  it('names a prefix of block hashes by the hash of its last block', () => {
    const hashes = Array.from({ length: 20 }, (_, i) => `h${i}`);
    expect(prefixKeysOfBlocks(hashes, 12)).toEqual(['h7', 'h3']);
    expect(prefixKeysOfBlocks(hashes.slice(0, 2), 12)).toEqual([]);
  });

  it('gives a follow-up that resends the history the key of the earlier prompt’s longest boundary', () => {
    const turn1 = ['system: be brief\u0001', 'user: '.padEnd(700, 'x'), '\u0001'];
    const turn2 = [...turn1, 'assistant: '.padEnd(900, 'y'), '\u0001', 'user: more\u0001'];
    const k1 = prefixKeysOfText('llama', turn1);
    const k2 = prefixKeysOfText('llama', turn2);
    expect(k1.length).toBeGreaterThan(0);
    expect(k2.length).toBeGreaterThan(k1.length);
    expect(k2).toContain(k1[0]);
    // Split differently, the same text has the same keys.
    expect(prefixKeysOfText('llama', [turn2.join('')])).toEqual(k2);
    // Another model's equal prompt shares none.
    expect(prefixKeysOfText('mistral', turn2).some((k) => k2.includes(k))).toBe(false);
  });

  it('gives a prompt shorter than the first boundary no keys', () => {
    expect(prefixKeysOfText('m', ['x'.repeat(4 * PREFIX_BLOCK_CHARS - 1)])).toEqual([]);
    expect(prefixKeysOfText('m', ['x'.repeat(4 * PREFIX_BLOCK_CHARS)])).toHaveLength(1);
  });
});
