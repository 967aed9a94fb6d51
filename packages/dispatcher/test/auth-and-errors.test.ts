import { describe, expect, it } from 'vitest';
import { hashApiKey, KeyRing } from '../src/auth.ts';
import { ApiError } from '../src/errors.ts';
import {
  CHAT_FIELDS,
  COMPLETION_FIELDS,
  chatCompletionSchema,
  refuseUnknownFields,
} from '../src/openai-schemas.ts';
import { bearerToken, readFairwayHeaders } from '../src/request-headers.ts';
import { TenantDirectory } from '../src/tenant-directory.ts';

describe('KeyRing', () => {
  it('authenticates a key stored only as its hash and rejects others', () => {
    const tenants = new TenantDirectory();
    tenants.upsertTenant({ id: 'alpha', weight: 1, sloClass: undefined, limits: {} });
    const ring = new KeyRing(tenants);
    ring.add(hashApiKey('sk-alpha-123456'), { tenant: 'alpha' });
    expect(ring.authenticate('sk-alpha-123456')?.tenant).toBe('alpha');
    expect(ring.authenticate('sk-alpha-123457')).toBeUndefined();
    expect(ring.revoke(hashApiKey('sk-alpha-123456'))).toBe(true);
    expect(ring.authenticate('sk-alpha-123456')).toBeUndefined();
  });
});

describe('ApiError', () => {
  it('renders an OpenAI-shaped body with the catalogue status', () => {
    const err = new ApiError('TPM_LIMITED', 'tenant alpha is over its TPM limit', { retryAfterS: 3 });
    expect(err.status).toBe(429);
    expect(err.body()).toEqual({
      error: {
        message: 'tenant alpha is over its TPM limit',
        type: 'tokens',
        param: null,
        code: 'rate_limit_exceeded',
      },
    });
  });
});

describe('request headers', () => {
  it('accepts safe values and rejects injection attempts', () => {
    expect(readFairwayHeaders({ 'x-fairway-app': 'chat', 'x-fairway-user': 'u-1' })).toMatchObject({
      app: 'chat',
      user: 'u-1',
    });
    expect(() => readFairwayHeaders({ 'x-fairway-user': 'a\r\nx-evil: 1' })).toThrow(ApiError);
    expect(() => readFairwayHeaders({ 'x-fairway-app': 'a b' })).toThrow(/x-fairway-app/);
    expect(() => readFairwayHeaders({ 'x-fairway-app': ['a', 'b'] })).toThrow(/once/);
  });

  it('reads bearer tokens and rejects malformed authorization', () => {
    expect(bearerToken({ authorization: 'Bearer sk-1234' })).toBe('sk-1234');
    expect(bearerToken({})).toBeUndefined();
    expect(() => bearerToken({ authorization: 'Basic abc' })).toThrow(ApiError);
  });
});

describe('chat completion schema', () => {
  it("accepts vLLM's extra fields, refuses any other naming it, and rejects wrong types with the field name", () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], top_k: 5, guided_json: {} };
    expect(() => refuseUnknownFields(body, CHAT_FIELDS)).not.toThrow();
    const ok = chatCompletionSchema.parse(body);
    expect((ok as Record<string, unknown>).top_k).toBe(5);
    let unknown: unknown;
    try {
      refuseUnknownFields({ ...body, top_kk: 5 }, CHAT_FIELDS);
    } catch (err) {
      unknown = err;
    }
    expect(unknown).toBeInstanceOf(ApiError);
    expect((unknown as ApiError).body().error).toMatchObject({
      type: 'invalid_request_error',
      param: 'top_kk',
    });
    // A chat-only field is not a completion field.
    expect(() => refuseUnknownFields({ model: 'm', prompt: 'p', tools: [] }, COMPLETION_FIELDS)).toThrow(
      /"tools"/,
    );
    const bad = chatCompletionSchema.safeParse({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 'x',
    });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual(['max_tokens']);
    expect(chatCompletionSchema.safeParse({ model: 'm', messages: [] }).success).toBe(false);
  });
});
