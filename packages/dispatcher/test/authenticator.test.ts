import { describe, expect, it } from 'vitest';
import { Authenticator, hashApiKey, INTERNAL_KEY_HEADER, KeyRing } from '../src/auth.ts';
import { TenantDirectory } from '../src/tenant-directory.ts';

const KEY = 'sk-acme-0000000001';

function ring(now: { t: number }): { keys: KeyRing; auth: Authenticator } {
  const tenants = new TenantDirectory();
  tenants.upsertTenant({ id: 'acme', weight: 2, sloClass: undefined, limits: {} });
  const keys = new KeyRing(tenants);
  keys.add(hashApiKey(KEY), { tenant: 'acme', expiresAt: 10_000 });
  return { keys, auth: new Authenticator(keys, () => now.t) };
}

describe('Authenticator', () => {
  it('authenticates a bearer key as its tenant and key id, and refuses it once expired', () => {
    const now = { t: 0 };
    const { auth } = ring(now);
    expect(auth.principal({ authorization: `Bearer ${KEY}` })).toMatchObject({
      tenant: 'acme',
      weight: 2,
      keyId: hashApiKey(KEY),
    });
    now.t = 10_000;
    expect(() => auth.principal({ authorization: `Bearer ${KEY}` })).toThrow('API key expired');
    expect(() => auth.principal({})).toThrow('missing API key');
  });

  it("lets this process's own requests name a key by id, checked on the ring like a presented key", () => {
    const now = { t: 0 };
    const { keys, auth } = ring(now);
    const header = auth.internalHeader(hashApiKey(KEY));
    expect(auth.principal(header)).toMatchObject({ tenant: 'acme', keyId: hashApiKey(KEY) });
    keys.revoke(hashApiKey(KEY));
    expect(() => auth.principal(header)).toThrow('invalid API key');
  });

  it('refuses a client that sends the internal header without the secret, even with a valid key', () => {
    const now = { t: 0 };
    const { auth } = ring(now);
    const forged = `${'0'.repeat(64)}.${hashApiKey(KEY)}`;
    expect(() => auth.principal({ [INTERNAL_KEY_HEADER]: forged, authorization: `Bearer ${KEY}` })).toThrow(
      'invalid API key',
    );
    expect(() => auth.principal({ [INTERNAL_KEY_HEADER]: hashApiKey(KEY) })).toThrow('invalid API key');
    // Another process's secret is not this one's.
    const other = ring(now).auth.internalHeader(hashApiKey(KEY));
    expect(() => auth.principal(other)).toThrow('invalid API key');
  });
});
