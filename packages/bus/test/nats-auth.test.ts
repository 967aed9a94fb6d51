import { ConfigError } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { BusError } from '../src/errors.ts';
import { mergeNatsSecurity, natsConnectionOptions, natsSecurityFromEnv } from '../src/nats-auth.ts';

describe('natsConnectionOptions', () => {
  it('takes a user and password out of the URL and sends them as NATS credentials', () => {
    const o = natsConnectionOptions('nats://svc:p%40ss%3Aword@nats.internal:4222');
    expect(o).toEqual({ servers: ['nats://nats.internal:4222'], user: 'svc', pass: 'p@ss:word' });
  });

  it('reads a lone user part as a token, and the same credentials on several URLs once', () => {
    expect(natsConnectionOptions('nats://s3cret@h1:4222, nats://s3cret@h2:4222')).toEqual({
      servers: ['nats://h1:4222', 'nats://h2:4222'],
      token: 's3cret',
    });
  });

  it('refuses credentials given twice or differing between URLs, without quoting them', () => {
    const twice = () =>
      natsConnectionOptions('nats://u:topsecret@h:4222', { auth: { user: 'u', password: 'other' } });
    expect(twice).toThrow(BusError);
    expect(twice).toThrow(/nats:\/\/u:\*\*\*@h:4222/);
    expect(() => natsConnectionOptions(['nats://a:x@h1', 'nats://b:y@h2'])).toThrow(/different credentials/);
  });

  it('asks for TLS with a tls:// URL or any TLS file, and not for an empty TLS section', () => {
    expect(natsConnectionOptions('tls://h:4222').tls).toEqual({});
    expect(natsConnectionOptions('nats://h:4222', { tls: { caFile: '/ca.pem' } }).tls).toEqual({
      caFile: '/ca.pem',
    });
    expect(natsConnectionOptions('nats://h:4222', natsSecurityFromEnv({})).tls).toBeUndefined();
  });
});

describe('mergeNatsSecurity', () => {
  it('takes each field from the first layer that sets it: flags, then environment, then config', () => {
    const merged = mergeNatsSecurity(
      { auth: { password: 'from-flag' } },
      natsSecurityFromEnv({ NATS_USER: 'env-user', NATS_PASSWORD: 'from-env', NATS_TLS_CA_FILE: '/env-ca' }),
      { auth: { user: 'config-user' }, tls: { caFile: '/config-ca', certFile: '/c.pem', keyFile: '/c.key' } },
    );
    expect(merged).toEqual({
      auth: { user: 'env-user', password: 'from-flag' },
      tls: { caFile: '/env-ca', certFile: '/c.pem', keyFile: '/c.key' },
    });
  });

  it('refuses two mechanisms at once and a certificate without its key, naming the fields', () => {
    expect(() => mergeNatsSecurity({ auth: { token: 't' } }, { auth: { user: 'u' } })).toThrow(ConfigError);
    expect(() => mergeNatsSecurity({ auth: { token: 't' } }, { auth: { user: 'u' } })).toThrow(
      /one of user, token/,
    );
    expect(() => mergeNatsSecurity({ tls: { certFile: '/c.pem' } })).toThrow(/certFile/);
  });
});
