import type { AppProfile, RequestDescriptor } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { AppProfileLearner } from '../src/app-profile-learner.ts';
import { wscPolicy } from '../src/wsc.ts';

const chat: AppProfile = { id: 'chat', stages: [{ input: 100, system: 0, output: 100 }] };
const rag: AppProfile = {
  id: 'rag',
  stages: [
    { input: 1000, system: 200, output: 100 },
    { input: 2000, system: 200, output: 300 },
  ],
};
const profiles = new Map([
  ['chat', chat],
  ['rag', rag],
]);

const req = (over: Partial<RequestDescriptor> = {}): RequestDescriptor => ({
  id: 'r',
  tenant: 't',
  user: 'u',
  app: 'chat',
  model: 'm',
  sloClass: 'interactive',
  inputTokens: 100,
  maxTokens: 500,
  arrivalMs: 0,
  ...over,
});

describe('wscPolicy', () => {
  const p = wscPolicy({ appProfile: (a) => profiles.get(a) });

  it('charges everything at completion when asked (Algorithm 1 as written), the same total as while streaming', () => {
    const late = wscPolicy({ appProfile: (a) => profiles.get(a), chargeAt: 'completion' });
    const r = req({ app: 'rag', inputTokens: 1500, systemTokens: 200 });
    expect(late.dispatchCost(r, undefined)).toBe(0);
    expect(late.outputCost(r, 0, 50, undefined)).toBe(0);
    const usage = { inputTokens: 1500, outputTokens: 120 };
    expect(late.finalCost(r, usage)).toBeCloseTo(p.finalCost(r, usage), 12);
    expect(p.dispatchCost(r, undefined)).toBeGreaterThan(0);
  });

  it('keeps one counter per user across apps (FairServe u_i), with fair ordering and lift', () => {
    expect([p.mode, p.lift]).toEqual(['fair', 'vtc']);
    expect(p.flowOf(req())).toBe('u');
    expect(p.flowOf(req({ app: 'rag' }))).toBe('u');
    expect(p.flowOf(req({ user: undefined, app: undefined }))).toBe('t');
  });

  it('keeps one counter per user of each app as an option', () => {
    const perApp = wscPolicy({ appProfile: (a) => profiles.get(a), counter: 'user-app' });
    expect(perApp.flowOf(req())).toBe('u@chat');
    expect(perApp.flowOf(req({ app: 'rag' }))).toBe('u@rag');
    expect(perApp.flowOf(req({ user: undefined, app: undefined }))).toBe('t@default');
  });

  it('counts a user’s service E times (the user priority factor)', () => {
    const e = wscPolicy({ appProfile: (a) => profiles.get(a), userPriority: (u) => (u === 'vip' ? 0.5 : 2) });
    expect(e.finalCost(req({ user: 'vip' }), { inputTokens: 100, outputTokens: 100 })).toBe(0.5);
    expect(e.finalCost(req(), { inputTokens: 100, outputTokens: 100 })).toBe(2);
  });

  it('learns app profiles from settled calls and normalises by them once learned', () => {
    const learner = new AppProfileLearner({ minSamples: 3 });
    const learned = wscPolicy({ appProfile: (a) => profiles.get(a), learner });
    // The configured chat profile (w = 200) prices calls until three have settled…
    const big = req({ inputTokens: 300 });
    const usage = { inputTokens: 300, outputTokens: 900 };
    expect(learned.finalCost(big, usage)).toBe(6);
    for (let i = 0; i < 2; i++) learned.settled?.(big, usage);
    expect(learned.finalCost(big, usage)).toBe(6);
    // …then the app's own traffic does: a call of its learned usual size costs 1.
    learned.settled?.(big, usage);
    expect(learner.profile('chat')).toEqual({ id: 'chat', stages: [{ input: 300, system: 0, output: 900 }] });
    expect(learner.outputInputRatio('chat')).toBe(3);
    expect(learned.finalCost(big, usage)).toBe(1);
    // An app it has never seen keeps its configured profile.
    expect(
      learned.finalCost(req({ app: 'rag', inputTokens: 1500 }), { inputTokens: 1500, outputTokens: 0 }),
    ).toBe(1);
  });

  it('normalises service by the app’s expected tokens at the interaction stage (FairServe Eq. 2–3)', () => {
    // chat: w = 1·100 + 2·0 + 1·100 = 200; an average chat call costs exactly 1.
    expect(p.finalCost(req(), { inputTokens: 100, outputTokens: 100 })).toBe(1);
    // rag stage 0: w = 1000 + 400 + 100 = 1500; a call of the app's usual size also costs 1.
    const r0 = req({ app: 'rag', inputTokens: 1200, systemTokens: 200 });
    expect(p.finalCost(r0, { inputTokens: 1200, outputTokens: 100 })).toBeCloseTo(1, 12);
    // rag stage 3 uses the last stage's profile: w = 2000 + 400 + 300 = 2700.
    const r3 = req({
      app: 'rag',
      inputTokens: 2200,
      systemTokens: 200,
      interactionId: 'i',
      interactionStage: 3,
    });
    expect(p.finalCost(r3, { inputTokens: 2200, outputTokens: 300 })).toBeCloseTo(1, 12);
  });

  it('charges prompt and system tokens at dispatch and output as it streams', () => {
    const r = req({ app: 'rag', inputTokens: 1200, systemTokens: 200 });
    expect(p.dispatchCost(r, undefined)).toBeCloseTo(1400 / 1500, 12);
    expect(p.outputCost(r, 0, 100, undefined)).toBeCloseTo(100 / 1500, 12);
  });

  it('scales service by the user priority factor', () => {
    const vip = wscPolicy({
      appProfile: (a) => profiles.get(a),
      userPriority: (u) => (u === 'vip' ? 0.5 : 1),
    });
    expect(vip.finalCost(req({ user: 'vip' }), { inputTokens: 100, outputTokens: 100 })).toBe(0.5);
  });

  it('marks calls after the first of an interaction as continuations', () => {
    expect(p.continuation?.(req())).toBe(false);
    expect(p.continuation?.(req({ interactionId: 'i', interactionStage: 0 }))).toBe(false);
    expect(p.continuation?.(req({ interactionId: 'i', interactionStage: 1 }))).toBe(true);
  });

  it('rejects an app without a profile unless a fallback is given', () => {
    expect(() => p.dispatchCost(req({ app: 'mystery' }), undefined)).toThrow(/appProfile\.mystery/);
    const fb = wscPolicy({ appProfile: () => undefined, fallbackProfile: chat });
    expect(fb.finalCost(req({ app: 'mystery' }), { inputTokens: 100, outputTokens: 100 })).toBe(1);
  });
});
