import { DEFAULT_SLO_CLASSES, type RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { sloClassMap } from '../src/edf.ts';
import { PolicyInputError, UnknownSloClassError } from '../src/errors.ts';
import { GroupTable, type QlmRequest, toQlmRequest } from '../src/qlm/request-group.ts';

const classes = sloClassMap(DEFAULT_SLO_CLASSES);
const desc = (id: string, over: Partial<RequestDescriptor> = {}): RequestDescriptor => ({
  id,
  tenant: 't',
  model: 'm',
  sloClass: 'batch-1',
  inputTokens: 100,
  maxTokens: 512,
  arrivalMs: 0,
  ...over,
});
const req = (id: string, over: Partial<RequestDescriptor> = {}): QlmRequest =>
  toQlmRequest(desc(id, over), classes);

describe('GroupTable', () => {
  it('bounds every group at δ times the batch size', () => {
    const table = new GroupTable({ avgBatchSize: 16, delta: 4 });
    for (let i = 0; i < 1000; i++) table.add(req(`r${i}`, { arrivalMs: i }));
    const groups = table.groups();
    expect(table.maxGroupSize).toBe(64);
    expect(groups).toHaveLength(Math.ceil(1000 / 64));
    for (const g of groups) expect(g.members.length).toBeLessThanOrEqual(64);
    expect(groups.reduce((n, g) => n + g.members.length, 0)).toBe(1000);
    // FCFS inside and across the groups of one key.
    expect(groups[0]?.members[0]?.id).toBe('r0');
    expect(groups[1]?.members[0]?.id).toBe('r64');
  });

  it('separates requests by model, SLO class and prompt-length profile', () => {
    const table = new GroupTable({ avgBatchSize: 8 });
    const a = table.add(req('a'));
    const b = table.add(req('b', { model: 'other' }));
    const c = table.add(req('c', { sloClass: 'interactive' }));
    const d = table.add(req('d', { inputTokens: 3000 }));
    const e = table.add(req('e', { inputTokens: 120 }));
    expect(new Set([a, b, c, d]).size).toBe(4);
    expect(e).toBe(a);
    expect(table.get(c)?.band).toBe(0);
    expect(table.get(d)?.key.profile).toBe(2);
  });

  it('puts an evicted request back at the front with its output so far and drops empty groups', () => {
    const table = new GroupTable({ avgBatchSize: 8 });
    const g = table.add(req('a'));
    table.add(req('b'));
    expect(table.remove('a')).toBe(true);
    table.requeue({ ...req('a'), generated: 40 });
    expect(table.get(g)?.members.map((m) => [m.id, m.generated ?? 0])).toEqual([
      ['a', 40],
      ['b', 0],
    ]);
    table.remove('a');
    table.remove('b');
    expect(table.groups()).toEqual([]);
    expect(table.remove('zzz')).toBe(false);
  });

  it('refuses a request that is already queued', () => {
    const table = new GroupTable({ avgBatchSize: 8 });
    table.add(req('a'));
    expect(() => table.add(req('a'))).toThrow(PolicyInputError);
  });

  it('derives band and deadline from the SLO class', () => {
    const r = req('x', { sloClass: 'interactive', arrivalMs: 5000 });
    expect(r).toMatchObject({ band: 0, sheddable: false, deadlineMs: 25_000 });
    expect(() => req('y', { sloClass: 'gold' })).toThrow(UnknownSloClassError);
  });
});
