import { describe, expect, it } from 'vitest';
import { PrefixIndex } from '../src/index.ts';

describe('PrefixIndex', () => {
  it('finds the replica of the longest key it holds', () => {
    const ix = new PrefixIndex();
    ix.learn('t', 'p', ['a/8', 'a/4'], 'r1', 0);
    ix.learn('t', 'p', ['a/16', 'a/8', 'a/4'], 'r2', 1);
    ix.learn('t', 'p', ['b/4'], 'r3', 2);
    expect(ix.lookup('t', 'p', ['a/32', 'a/16', 'a/8', 'a/4'], 3)).toBe('r2');
    expect(ix.lookup('t', 'p', ['c/8', 'b/4'], 3)).toBe('r3');
    expect(ix.lookup('t', 'p', ['c/4'], 3)).toBeUndefined();
  });

  it('keeps tenants and pools apart', () => {
    const ix = new PrefixIndex();
    ix.learn('t', 'p', ['a/4'], 'r1', 0);
    expect(ix.lookup('u', 'p', ['a/4'], 0)).toBeUndefined();
    expect(ix.lookup('t', 'q', ['a/4'], 0)).toBeUndefined();
  });

  it('forgets an entry once its TTL has passed', () => {
    const ix = new PrefixIndex({ ttlMs: 1000 });
    ix.learn('t', 'p', ['a/4'], 'r1', 0);
    expect(ix.lookup('t', 'p', ['a/4'], 999)).toBe('r1');
    expect(ix.lookup('t', 'p', ['a/4'], 1000)).toBeUndefined();
    expect(ix.size).toBe(0);
  });

  it('lets a tenant flooding unique prompts evict only its own entries', () => {
    const ix = new PrefixIndex({ entriesPerTenant: 100 });
    ix.learn('victim', 'p', ['v/8', 'v/4'], 'r1', 0);
    for (let i = 0; i < 100_000; i++) ix.learn('flood', 'p', [`f${i}/8`, `f${i}/4`], 'r2', i);
    expect(ix.lookup('victim', 'p', ['v/8'], 1)).toBe('r1');
    expect(ix.size).toBe(102);
    // The flooder's own oldest entries went first.
    expect(ix.lookup('flood', 'p', ['f0/4'], 1)).toBeUndefined();
    expect(ix.lookup('flood', 'p', ['f99999/8'], 1)).toBe('r2');
  });

  it('holds at most entriesPerTenant × maxTenants entries whatever it is told', () => {
    const ix = new PrefixIndex({ entriesPerTenant: 10, maxTenants: 5 });
    for (let t = 0; t < 50; t++)
      for (let i = 0; i < 30; i++) ix.learn(`t${t}`, 'p', [`k${i}/8`, `k${i}/4`], 'r', 0);
    expect(ix.size).toBe(50);
    // The least recently used tenants went first.
    expect(ix.lookup('t0', 'p', ['k29/8'], 0)).toBeUndefined();
    expect(ix.lookup('t49', 'p', ['k29/8'], 0)).toBe('r');
  });
});
