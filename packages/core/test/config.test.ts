import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../src/index.ts';

describe('fairway config', () => {
  it('fills defaults: VTC ordering, linear cost 1/2 and QLM SLO classes', () => {
    const cfg = parseConfig({ tenants: [{ id: 'acme' }] });
    expect(cfg.policy.ordering).toBe('vtc');
    expect(cfg.policy.cost).toEqual({ fn: 'linear', wIn: 1, wOut: 2 });
    expect(cfg.sloClasses.map((c) => [c.name, c.ttftS])).toEqual([
      ['interactive', 20],
      ['batch-1', 60],
      ['batch-2', 3600],
    ]);
    expect(cfg.tenants[0]?.weight).toBe(1);
  });

  it('maps pools to slot groups, each pool in one group of known pools', () => {
    const pools = [
      { id: 'a', model: 'm1' },
      { id: 'b', model: 'm2' },
    ];
    expect(parseConfig({ pools }).store.slotGroups).toEqual({});
    expect(parseConfig({ pools, store: { slotGroups: { g1: ['a'], g2: ['b'] } } }).store.slotGroups).toEqual({
      g1: ['a'],
      g2: ['b'],
    });
    const issues = (slotGroups: unknown) => {
      try {
        parseConfig({ pools, store: { slotGroups } });
        return [];
      } catch (e) {
        return (e as ConfigError).issues.map((i) => `${i.path}: ${i.message}`);
      }
    };
    expect(issues({ g1: ['a', 'c'] })).toEqual(['store.slotGroups.g1[1]: unknown pool "c"']);
    expect(issues({ g1: ['a'], g2: ['a'] })).toEqual([
      'store.slotGroups.g2[0]: pool "a" is in slot group "g1" too',
    ]);
    expect(issues({ 'g{1}': ['a'] })).toHaveLength(1);
  });

  it('names the offending field by path', () => {
    const bad = () =>
      parseConfig({ tenants: [{ id: 'a' }, { id: 'b', weight: -2, limits: { rpm: 1.5 } }] }, 'fairway.yaml');
    expect(bad).toThrow(ConfigError);
    try {
      bad();
    } catch (e) {
      const err = e as ConfigError;
      expect(err.issues.map((i) => i.path)).toEqual(['tenants[1].weight', 'tenants[1].limits.rpm']);
      expect(err.message).toContain('fairway.yaml');
    }
  });

  it('rejects unknown fields, duplicate ids and dangling references', () => {
    expect(() => parseConfig({ tenant: [] })).toThrow(/\(root\)|tenant/);
    expect(() => parseConfig({ tenants: [{ id: 'a' }, { id: 'a' }] })).toThrow(/tenants\[1\]: duplicate "a"/);
    expect(() =>
      parseConfig({ pools: [{ id: 'p', model: 'm' }], engines: [{ id: 'e', url: 'http://x:1', pool: 'q' }] }),
    ).toThrow(/engines\[0\]\.pool: unknown pool "q"/);
  });
});
