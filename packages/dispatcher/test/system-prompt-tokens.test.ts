import { DEFAULT_SLO_CLASSES, type SloClass } from '@fairway/core';
import { wscPolicy } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import type { Principal } from '../src/auth.ts';
import type { ChatCompletionBody } from '../src/openai-schemas.ts';
import { describeRequest } from '../src/request-descriptor.ts';

const classes = new Map<string, SloClass>(DEFAULT_SLO_CLASSES.map((c) => [c.name, c]));
const principal: Principal = { tenant: 't', weight: 1, app: 'chat', sloClass: undefined };
const SYSTEM = 'You are a careful assistant. Answer in one short sentence and cite nothing. '.repeat(20);

function describeChat(messages: unknown[], endpoint: 'chat' | 'completions' = 'chat') {
  return describeRequest({
    id: 'r1',
    endpoint,
    body: (endpoint === 'chat'
      ? { model: 'm', messages, max_tokens: 8 }
      : { model: 'm', prompt: SYSTEM, max_tokens: 8 }) as ChatCompletionBody,
    principal,
    headers: { app: undefined, user: undefined, sloClass: undefined, interaction: undefined },
    arrivalMs: 0,
    sloClasses: classes,
    defaultSloClass: 'interactive',
    defaultMaxTokens: 16,
  }).descriptor;
}

describe("a live request's system prompt (FairServe's n_sys)", () => {
  it('counts the system and developer messages apart, as part of the prompt', () => {
    const d = describeChat([
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'What is two and two?' },
    ]);
    expect(d.systemTokens).toBeGreaterThan(200);
    expect(d.systemTokens).toBeLessThan(d.inputTokens);
    const dev = describeChat([
      { role: 'developer', content: [{ type: 'text', text: SYSTEM }] },
      { role: 'user', content: 'What is two and two?' },
    ]);
    expect(dev.systemTokens).toBe(d.systemTokens);
    expect(describeChat([{ role: 'user', content: SYSTEM }]).systemTokens).toBeUndefined();
    expect(describeChat([], 'completions').systemTokens).toBeUndefined();
  });

  it('lets WSC price system tokens at their own weight', () => {
    const messages = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'What is two and two?' },
    ];
    const withSystem = describeChat(messages);
    const asUser = describeChat(messages.map((m) => ({ ...m, role: 'user' })));
    const wsc = wscPolicy({
      alpha: 1,
      beta: 0.1,
      gamma: 2,
      appProfile: (id) => ({ id, stages: [{ input: 100, system: 100, output: 100 }] }),
    });
    // The same tokens cost less when they are the system prompt (β = 0.1 against α = 1).
    expect(wsc.dispatchCost(withSystem, undefined)).toBeLessThan(0.5 * wsc.dispatchCost(asUser, undefined));
  });
});
