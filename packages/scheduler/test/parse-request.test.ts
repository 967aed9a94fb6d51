import { describe, expect, it } from 'vitest';
import { parseRequest, requestDescriptorSchema } from '../src/request-payload.ts';

const BASE = {
  id: 'r1',
  tenant: 't1',
  keyId: 'k1',
  app: 'chat',
  user: 't1/alice',
  model: 'llama-2-7b',
  sloClass: 'interactive',
  inputTokens: 12,
  systemTokens: 3,
  maxTokens: 256,
  outputTokens: 40,
  arrivalMs: 1_700_000_000_000,
  interactionId: 'i1',
  interactionStage: 0,
  interactionSize: 2,
  priority: -1,
  blockHashes: ['a/0', 'a/1'],
};

const ODD: unknown[] = [
  undefined,
  null,
  '',
  'x',
  -1,
  0,
  1,
  1.5,
  2 ** 60,
  Number.NaN,
  true,
  [],
  {},
  ['x'],
  [1],
];

describe('parseRequest (descriptors read without zod when plainly valid)', () => {
  it('accepts and rejects exactly what the schema does, whatever one field holds', () => {
    let refused = 0;
    const bodies: unknown[] = [
      BASE,
      { id: 'r', tenant: 't', model: 'm', sloClass: 's', inputTokens: 0, maxTokens: 0, arrivalMs: 0 },
    ];
    for (const k of Object.keys(BASE)) for (const v of ODD) bodies.push({ ...BASE, [k]: v });
    bodies.push({ ...BASE, extra: 1 }, null, [], 'x');
    for (const b of bodies) {
      const z = requestDescriptorSchema.safeParse(b);
      if (!z.success) {
        refused++;
        expect(() => parseRequest(b, 'g'), JSON.stringify(b)).toThrow(/invalid request/);
      } else expect(parseRequest(b, 'g')).toEqual(z.data);
    }
    expect(refused).toBeGreaterThan(100);
  });
});
